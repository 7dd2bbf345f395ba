"""``UpstreamCache.fetch``: the decision core, a store, single-flight and the collector, tied.

One call of :meth:`UpstreamCache.fetch`:

1. looks the key up and asks :func:`~adcp_stale_cache.decision.plan` what to do;
2. serves a fresh entry without calling, or joins the single flight refreshing the key;
3. on success stores the new value (when it may be cached) and serves it;
4. on an outage asks :func:`~adcp_stale_cache.decision.on_failure`, and either serves the entry
   stale, recording one advisory in the current request's collector, or raises
   :class:`~adcp_stale_cache.failures.UpstreamUnavailable`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import orjson

from .advisory import stale_response
from .collector import current_collector
from .decision import Fresh, ServeStale, on_failure, plan
from .entry import Entry
from .failures import Failure, UpstreamUnavailable, classify
from .keys import cache_key
from .policy import SurfacePolicy, Surfaces, Upstream
from .singleflight import SingleFlight, call_with_deadline
from .stores import MemoryStore, Store

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")


class Codec(Protocol[T]):
    """Turns a value into the bytes a store keeps, and back (a fresh copy per caller)."""

    def dumps(self, value: T) -> bytes:
        """Serialise; raise to refuse a value (it is then not cached)."""
        ...

    def loads(self, data: bytes) -> T:
        """Deserialise."""
        ...


class JsonCodec(Generic[T]):
    """JSON values (dicts, lists, strings, numbers) through orjson."""

    def dumps(self, value: T) -> bytes:
        """Serialise with orjson."""
        return orjson.dumps(value)

    def loads(self, data: bytes) -> T:
        """Deserialise with orjson."""
        result: T = orjson.loads(data)
        return result


JSON: JsonCodec[Any] = JsonCodec()


class _Refreshed(Generic[T]):
    """What one flight hands to every caller sharing it."""

    __slots__ = ("data", "value")

    def __init__(self, value: T, data: bytes | None) -> None:
        self.value = value
        self.data = data


class UpstreamCache:
    """A freshness-aware cache in front of upstream calls, serving stale on outages.

    ``surfaces`` gives each tool surface its policy; ``store`` defaults to a bounded
    :class:`~adcp_stale_cache.stores.MemoryStore`. ``clock`` stamps entries and measures ages.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        surfaces: Surfaces | None = None,
        clock: Callable[[], float] = time.monotonic,
        namespace: str = "adcp-stale-cache",
    ) -> None:
        self.store: Store = store if store is not None else MemoryStore(clock=clock)
        self.surfaces = surfaces or Surfaces()
        self.clock = clock
        self.namespace = namespace
        self._flights: SingleFlight[_Refreshed[Any]] = SingleFlight()

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
    ) -> T:
        """Answer ``call()`` for ``upstream`` under ``key``, from cache when the policy allows.

        ``surface`` names the policy (default: the surface of the current request, else the
        default policy). ``validate`` may raise :class:`~adcp_stale_cache.InvalidPayload` to
        refuse an answer; ``cacheable`` returning False serves an answer without keeping it
        (a 4xx, say). Raises :class:`~adcp_stale_cache.UpstreamUnavailable` when the upstream
        fails and no entry within max-stale exists; failures the policy does not count as an
        outage are re-raised as they are.
        """
        policy = self._policy(surface)
        store_key = cache_key(self.namespace, upstream.name, key)
        entry = await self._get(store_key)
        step = plan(entry, self.clock(), policy)
        if isinstance(step, Fresh):
            return codec.loads(step.entry.data)

        timeout = upstream.timeout_seconds or policy.upstream_timeout_seconds

        async def refresh() -> _Refreshed[T]:
            value = await call_with_deadline(call, timeout)
            if validate is not None:
                validate(value)
            if cacheable is not None and not cacheable(value):
                return _Refreshed(value, None)
            data = codec.dumps(value)
            # One second of slack: the decision, not the store's expiry, draws the exact bound.
            await self._set(store_key, Entry(data, self.clock()), policy.ttl_seconds + 1)
            return _Refreshed(value, data)

        try:
            refreshed: _Refreshed[T] = await self._flights.run(store_key, refresh)
        except Exception as exc:
            failure = classify(exc, timeout)
            if failure.kind not in policy.stale_on:
                raise
            return await self._fall_back(
                upstream, policy, store_key, step.fallback, failure, exc, codec
            )
        return refreshed.value if refreshed.data is None else codec.loads(refreshed.data)

    def cached(
        self,
        upstream: Upstream,
        *,
        surface: str | SurfacePolicy | None = None,
        key: Callable[..., object] | None = None,
        codec: Codec[Any] = JSON,
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        """Decorator form of :meth:`fetch`; the key defaults to the function and its arguments."""

        def decorate(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> T:
                k = key(*args, **kwargs) if key else (fn.__qualname__, args, kwargs)
                return await self.fetch(
                    upstream, k, lambda: fn(*args, **kwargs), surface=surface, codec=codec
                )

            return wrapper

        return decorate

    async def _fall_back(
        self,
        upstream: Upstream,
        policy: SurfacePolicy,
        store_key: str,
        fallback: Entry | None,
        failure: Failure,
        exc: Exception,
        codec: Codec[T],
    ) -> T:
        # Another flight may have stored a newer entry meanwhile: prefer it.
        latest = await self._get(store_key)
        if latest is None or (fallback is not None and latest.stored_at < fallback.stored_at):
            latest = fallback
        outcome = on_failure(latest, self.clock(), policy)
        if isinstance(outcome, Fresh):
            return codec.loads(outcome.entry.data)
        if isinstance(outcome, ServeStale):
            collector = current_collector()
            if collector is not None:
                advisory = stale_response(upstream, policy, outcome.age_seconds, failure)
                collector.record(upstream.name, advisory)
            logger.warning(
                "stale_serve upstream=%s surface=%s age_seconds=%d code=%s collected=%s",
                upstream.name,
                policy.name,
                outcome.age_seconds,
                failure.code,
                collector is not None,
            )
            return codec.loads(outcome.entry.data)
        logger.warning(
            "upstream_unavailable upstream=%s surface=%s code=%s",
            upstream.name,
            policy.name,
            failure.code,
        )
        raise UpstreamUnavailable(upstream, failure) from exc

    def _policy(self, surface: str | SurfacePolicy | None) -> SurfacePolicy:
        if isinstance(surface, SurfacePolicy):
            return surface
        if surface is not None:
            return self.surfaces.get(surface)
        collector = current_collector()
        if collector is not None and collector.surface is not None:
            return collector.surface
        return self.surfaces.default

    async def _get(self, store_key: str) -> Entry | None:
        try:
            return await self.store.get(store_key)
        except Exception:  # a broken store degrades to "no cache", never fails the request
            logger.exception("store_error op=get")
            return None

    async def _set(self, store_key: str, entry: Entry, ttl_seconds: float) -> None:
        try:
            await self.store.set(store_key, entry, ttl_seconds)
        except Exception:
            logger.exception("store_error op=set")
