"""``UpstreamCache``, the hub: a fetch runs four stages (look up, admit, fly, serve)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ..core.directives import Directives
from ..core.failures import FailureTypes, FailureTypesLike, classify, failure_types_of
from ..core.policy import SurfacePolicy, Surfaces, Upstream
from ..core.values import JSON, Codec, Unreadable
from ..stores import Clocked, MemoryStore, Store
from .admission import Breakers, InjectedOutage, OutageInjector, Refused
from .blocking import DEFAULT_BLOCKING_THREADS, Lanes, wait_for
from .breaker import DEFAULT_BREAKER, BreakerPolicy
from .call_loop import CALLS
from .collector import current_collector
from .decorator import Decorator, decorator
from .flight import Answer, Flights, RefreshMemory, RememberedRefresh
from .lookup import MAX_CLOCK_SKEW_SECONDS, Hit, Lookups
from .metrics import CacheMetrics, Fanout
from .serving import Serving
from .settings import HOW_TO_GIVE, STAGES, Settings
from .shared_breakers import SharedBreakers
from .tracing import with_tracing

__all__ = ["MAX_CLOCK_SKEW_SECONDS", "UpstreamCache"]

T = TypeVar("T")


class UpstreamCache:
    """A freshness-aware cache in front of upstream calls, serving stale on outages.

    Settings are fixed when it is built (assigning one raises ``AttributeError``): ``store``
    (default: a bounded memory store), ``clock`` (default: the store's), ``breaker`` (None: off),
    ``failure_types`` (your exceptions as outages, see :func:`~adcp_stale_cache.classify`),
    ``schema_version`` (bump it when cached shapes change), ``detach_calls`` (calls on the
    library's own loop), ``blocking_threads`` (per upstream, for :meth:`fetch_blocking`),
    ``share_breakers`` and ``coordinate_refreshes`` (across processes sharing Redis),
    ``strict_advisories`` (raise rather than lose an advisory), ``test_mode`` (enables
    :meth:`force_upstream_unavailable`).
    """

    def __setattr__(self, name: str, value: object) -> None:
        # The stages copied every setting when built: an assignment would reach none.
        if name in _FIXED or (name in STAGES and name in self.__dict__):
            how = HOW_TO_GIVE.get(name, "pass it when building the cache")
            raise AttributeError(f"UpstreamCache.{name} is fixed: {how}")
        object.__setattr__(self, name, value)

    def __init__(
        self,
        store: Store | None = None,
        *,
        surfaces: Surfaces | None = None,
        clock: Callable[[], float] | None = None,
        namespace: str = "adcp-stale-cache",
        breaker: BreakerPolicy | None = DEFAULT_BREAKER,
        coordinate_refreshes: bool = False,
        metrics: CacheMetrics | None = None,
        tracing: bool | None = None,
        test_mode: bool = False,
        strict_advisories: bool = False,
        failure_types: FailureTypesLike | None = None,
        schema_version: str | None = None,
        share_breakers: bool = False,
        detach_calls: bool = False,
        outages: OutageInjector | None = None,
        blocking_threads: int = DEFAULT_BLOCKING_THREADS,
    ) -> None:
        store = store if store is not None else MemoryStore(clock=clock or time.monotonic)
        # A shared store (Redis) stamps entries with the wall clock every process shares.
        store_clock = store.clock if isinstance(store, Clocked) else time.monotonic
        self._settings = settings = Settings(
            store=store,
            clock=clock or store_clock,
            surfaces=surfaces or Surfaces(),
            metrics=Fanout(with_tracing(metrics, tracing)),
            namespace=namespace,
            schema_version=schema_version,
            failure_types=failure_types_of(failure_types),
            breaker=breaker,
            breaker_clock=clock or time.monotonic,
            shared_breakers=SharedBreakers(store) if share_breakers and breaker else None,
            call_loop=CALLS if detach_calls else None,
            coordinate_refreshes=coordinate_refreshes,
            strict_advisories=strict_advisories,
        )
        own_keys = type(self).store_key is not UpstreamCache.store_key  # a subclass's keys
        self.lookups = Lookups(settings, self.store_key if own_keys else None)
        self.breakers = Breakers(settings)
        self.flights = Flights(settings, self.lookups.read, self.breakers)
        self.serving = Serving(settings)
        self.lanes = Lanes(blocking_threads)
        self._outages = _test_mode(self, outages) if test_mode or outages is not None else None

    @property
    def settings(self) -> Settings:
        """What this cache was built with."""
        return self._settings

    @property
    def outages(self) -> OutageInjector | None:
        """Where test mode's injected outages come from (None: not in test mode)."""
        return self._outages

    @property
    def store(self) -> Store:
        """Where entries are kept."""
        return self._settings.store

    @property
    def surfaces(self) -> Surfaces:
        """The policy of each tool surface."""
        return self._settings.surfaces

    @property
    def clock(self) -> Callable[[], float]:
        """What entries are stamped and aged on."""
        return self._settings.clock

    @property
    def failure_types(self) -> FailureTypes:
        """Your exception types and what they mean."""
        return self._settings.failure_types

    @property
    def metrics(self) -> CacheMetrics:
        """What every decision is reported to (see :meth:`report_to`)."""
        return self._settings.metrics

    async def fetch(
        self,
        upstream: Upstream,
        key: object,
        call: Callable[[], Awaitable[T]],
        *,
        surface: str | SurfacePolicy | None = None,
        codec: Codec[T] = JSON,
        cacheable: Callable[[T], bool] | None = None,
        validate: Callable[[T], object] | None = None,
        tags: Iterable[str] = (),
        revalidate: Callable[[T], Awaitable[T]] | None = None,
        directives: Callable[[T], Directives | None] | None = None,
    ) -> T:
        """Answer ``call()`` for ``upstream`` under ``key``, from cache when the policy allows.

        ``surface`` names the policy (default: the request's); ``validate`` may raise
        :class:`~adcp_stale_cache.InvalidPayload`; ``cacheable`` False serves without keeping;
        ``tags`` label the entry for purges; ``revalidate`` gets the held value instead of
        ``call``; ``directives`` reads what an answer says of its own caching. Raises
        :class:`~adcp_stale_cache.UpstreamUnavailable` when the upstream fails with no entry
        within max-stale; failures that are no outage are re-raised as they are.
        """
        found = await self.lookups.look_up(upstream, key, surface, tags, codec)  # 1. look up
        if isinstance(found, Hit):
            return self.serving.hit(found, codec)
        if found.miss:
            self.metrics.miss(found.policy.name, found.upstream.name)
        admitted = await self.breakers.admit(found)  # 2. admit
        if isinstance(admitted, Refused):
            return self.serving.from_cache(found, found.fallback, admitted.failure, codec)
        answer = Answer(call, codec, cacheable, validate, revalidate, directives)
        flight, behind = await self.flights.fly(found, admitted, answer)  # 3. fly
        if behind:  # unreadable: the refresh is the answer
            with contextlib.suppress(Unreadable):
                return self.serving.behind(found, admitted.last_failure, codec)
        try:
            refreshed = await flight
        except Exception as exc:  # 4. serve
            failure = classify(exc, admitted.timeout, self.failure_types)
            if failure.kind not in found.policy.stale_on:
                raise
            latest = await self.flights.latest(found)
            return self.serving.from_cache(found, latest, failure, codec, exc)
        return self.serving.flown(found, refreshed, codec)

    def fetch_blocking(
        self,
        upstream: Upstream,
        key: object,
        call: Callable[[], T],
        *,
        surface: str | SurfacePolicy | None = None,
        codec: Codec[T] = JSON,
        cacheable: Callable[[T], bool] | None = None,
        validate: Callable[[T], object] | None = None,
        tags: Iterable[str] = (),
        revalidate: Callable[[T], T] | None = None,
        directives: Callable[[T], Directives | None] | None = None,
    ) -> T:
        """:meth:`fetch` for a blocking ``call``, from any thread (a running loop's included)."""
        lane = self.lanes.of(upstream)
        fetch = functools.partial(
            self.fetch,
            upstream,
            key,
            lane.calling(call),
            surface=surface,
            codec=codec,
            cacheable=cacheable,
            validate=validate,
            tags=tags,
            directives=directives,
            revalidate=None if revalidate is None else lane.calling(revalidate),
        )
        return wait_for(fetch, CALLS)

    def cached(
        self,
        upstream: Upstream,
        *,
        surface: str | SurfacePolicy | None = None,
        key: Callable[..., object] | None = None,
        codec: Codec[Any] = JSON,
        tags: Iterable[str] | Callable[..., Iterable[str]] = (),
    ) -> Decorator:
        """Decorator form of :meth:`fetch`; the key defaults to the function and its arguments,
        ``tags`` may be a function of them. A plain function goes through :meth:`fetch_blocking`."""
        return decorator(self, upstream, surface, key, codec, tags)

    # The control plane's seam (see steering).

    def store_key(self, upstream: Upstream, key: object, partition: str | None = None) -> str:
        """The store key of ``key`` for ``upstream`` (and the caller partition, if any)."""
        return self.lookups.store_key(upstream, key, partition)

    def policy_for(self, surface: str | SurfacePolicy | None = None) -> SurfacePolicy:
        """The policy a ``fetch`` given ``surface`` would apply in the current request."""
        return self.lookups.policy(surface, current_collector())[0]

    def breaker_open(self, upstream: Upstream | str) -> bool:
        """True while a breaker of ``upstream`` (or of any upstream so named) holds calls back."""
        return self.breakers.is_open(upstream)

    def remember_refreshes(self, memory: RefreshMemory | None) -> None:
        """Tell ``memory`` of every flight's refresh from now on (None: of none)."""
        self.flights.tell(memory)

    def report_to(self, sink: CacheMetrics) -> None:
        """Report every decision to ``sink`` too, from now on (the ``metrics`` stay)."""
        self._settings.metrics.attach(sink)

    def refresh_soon(
        self, refreshes: list[tuple[str, RememberedRefresh]], concurrency: int = 8
    ) -> None:
        """Run remembered refreshes in the background, ``concurrency`` at a time, each as the
        flight its key's requests join."""
        self.flights.refresh_soon(refreshes, concurrency)

    def force_upstream_unavailable(
        self,
        tool: str,
        upstream_name: str | None = None,
        cache_age_seconds: int | None = None,
        empty_cache: bool = False,
    ) -> InjectedOutage:
        """Compliance testing only: fail ``upstream_name`` for the next response of ``tool``.
        Raises ``RuntimeError`` unless built with ``test_mode=True`` (or ``outages``)."""
        if self.outages is None:
            raise RuntimeError("force_upstream_unavailable needs UpstreamCache(test_mode=True)")
        if tool != "*":
            self.surfaces.get(tool)  # a clear error for an unknown tool
        return self.outages.force(tool, upstream_name, cache_age_seconds, empty_cache)


# Every keyword the cache is built with (the stages copied them), and the old names of some.
_FIXED = {*inspect.signature(UpstreamCache.__init__).parameters, *HOW_TO_GIVE} - {"self", *STAGES}


def _test_mode(cache: UpstreamCache, outages: OutageInjector | None) -> OutageInjector:
    """The injector of a cache in test mode, its fetch wrapped to answer injected outages."""
    from ..testing import in_test_mode  # only here: the core never loads the harness

    return in_test_mode(cache, outages)
