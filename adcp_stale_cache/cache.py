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

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from .advisory import AdcpError, stale_response
from .breaker import DEFAULT_BREAKER, Admission, Breaker, BreakerPolicy
from .call_loop import CALLS
from .collector import AdvisoryCollector, AdvisoryLost, _flight, current_collector
from .decision import Fail, Fresh, Refresh, ServeStale, on_failure, plan, whole_seconds
from .directives import Directives
from .entry import Entry
from .failures import (
    BUDGET_SPENT,
    CIRCUIT_OPEN,
    UNKNOWN_FAILURE,
    Failure,
    FailureTypesLike,
    UpstreamUnavailable,
    classify,
    failure_types_of,
)
from .keys import cache_key, key_size
from .labels import entry_labels
from .metrics import CacheMetrics
from .policy import SurfacePolicy, Surfaces, Upstream
from .purges import purge_count, store_unless_purged
from .shared_breakers import SharedBreakers
from .singleflight import SingleFlight, call_with_deadline
from .stores import MemoryStore, Store
from .testing import FORCED_FAILURE, ForcedOutage, ForcedOutages
from .tracing import with_tracing
from .values import JSON, Codec, Unreadable, decode, encode

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")


#: How far in the future (another host's clock running ahead) a stored time may be.
MAX_CLOCK_SKEW_SECONDS = 300.0


class _Refreshed(Generic[T]):
    """What one flight hands to every caller sharing it: the value, its stored bytes (None
    when not stored), and the advisories of stale data the value was built on."""

    __slots__ = ("advisories", "data", "value")

    def __init__(
        self, value: T, data: bytes | None, advisories: tuple[tuple[Hashable, AdcpError], ...] = ()
    ) -> None:
        self.value = value
        self.data = data
        self.advisories = advisories


async def _releasing(breaker: Breaker, flight: Awaitable[T]) -> T:
    """Await a probe's flight, then free the probe slot if the flight gave no verdict."""
    try:
        return await flight
    finally:
        breaker.release_probe()


#: What a remembered refresh's closures hold beside its key, labels and held value, roughly.
_CLOSURE_BYTES = 2048


def _forget(store_key: str, labels: tuple[str, ...], refresh: object, weight: int) -> None:
    """Remember no refresh (no control attached)."""


def _as_made(
    origin: AdvisoryCollector | None, refresh: Callable[[], Awaitable[T]]
) -> Callable[[], Awaitable[T]]:
    """``refresh``, to be re-run later (by the control plane) as the request that made it:
    with its surface and caller partition, never those of whoever asks for the refresh (an
    operator's request is every tenant's partition at once)."""

    # Its facts only, not the request's collector: remembered for thousands of keys, it
    # would keep every request's advisories alive. (is not None: an empty one is falsy.)
    surface, partition, partition_of = origin.origin() if origin is not None else (None, None, None)

    async def again() -> T:
        token = _flight.set(AdvisoryCollector(surface, partition, partition_of))
        try:
            return await refresh()
        finally:
            _flight.reset(token)

    return again


class UpstreamCache:
    """A freshness-aware cache in front of upstream calls, serving stale on outages.

    ``surfaces`` gives each tool surface its policy; ``store`` defaults to a bounded
    :class:`~adcp_stale_cache.stores.MemoryStore`. ``clock`` stamps entries and measures ages
    (and breaker cooldowns); it defaults to the store's own clock (the wall clock for shared
    stores, a monotonic one in memory). ``breaker`` sets the per-upstream circuit breaker
    (None: off). ``coordinate_refreshes`` makes processes sharing a store that offers leases
    (Redis) refresh an expired key once between them. ``metrics`` receives every decision
    (see :mod:`~adcp_stale_cache.metrics`); ``tracing`` adds them as OpenTelemetry span
    events (None: when ``opentelemetry-api`` is installed; see :mod:`~adcp_stale_cache.tracing`).
    ``test_mode`` enables :meth:`force_upstream_unavailable`: sandbox only.
    ``strict_advisories`` raises :class:`~adcp_stale_cache.collector.AdvisoryLost` instead of
    serving stale data when no request collector would carry its advisory (for tests: an
    advisory lost across a thread hop then fails loudly).

    ``failure_types`` maps your own exception types to what they mean
    (``{AdCPServiceUnavailableError: "SERVICE_UNAVAILABLE"}``, a
    :class:`~adcp_stale_cache.Failure`, or a function of the exception returning either, or
    None when it says nothing of that exception; a lone function reads every exception):
    they then count as outages, with the most specific code the exception's causes give (see
    :func:`~adcp_stale_cache.classify`).

    ``share_breakers`` publishes this process's open breakers through the store (Redis) so
    that other processes answer from cache at once instead of timing out on the same dead
    upstream (see :mod:`~adcp_stale_cache.shared_breakers`).

    ``schema_version`` names the shape of what you cache (bump it when your models change):
    an entry written under another version is never read, so it is a miss (refreshed, and
    left to expire) in every store: memory, file and Redis alike.

    One cache may be shared by threads and event loops (a loop per request in a worker
    thread): upstream calls coalesce per loop, the memory store is thread-safe. There,
    ``detach_calls=True`` runs every upstream call on the library's own event loop (see
    :mod:`~adcp_stale_cache.call_loop`): a call abandoned at its deadline then never holds
    the request's ``asyncio.run`` (or its worker thread) while it winds down. The call must
    then use nothing bound to the request's loop (a client it opens itself is fine), and
    must not block: that loop is shared by every detached call of the process.
    """

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
    ) -> None:
        self.store: Store = (
            store if store is not None else MemoryStore(clock=clock or time.monotonic)
        )
        self.surfaces = surfaces or Surfaces()
        # A shared store (Redis) stamps entries with the wall clock every process shares.
        store_clock: Callable[[], float] = getattr(self.store, "clock", time.monotonic)
        self.clock = clock or store_clock
        # Breakers are per process: a monotonic clock unless the caller chose one (a test's).
        self._breaker_clock = clock or time.monotonic
        self.coordinate_refreshes = coordinate_refreshes
        self.strict_advisories = strict_advisories
        self.failure_types = failure_types_of(failure_types)
        self.metrics = with_tracing(metrics, tracing)
        self.namespace = namespace
        self.schema_version = schema_version
        # Entries written under another schema version live under other keys: never read.
        self._keyspace = namespace if schema_version is None else f"{namespace}@{schema_version}"
        self._flights: SingleFlight[_Refreshed[Any]] = SingleFlight()
        self._forced = ForcedOutages() if test_mode else None
        self._call_loop = CALLS if detach_calls else None
        self.breaker_policy = breaker
        # Open breakers published through the shared store (see shared_breakers).
        self._shared = SharedBreakers(self.store) if share_breakers and breaker else None
        self._breakers: dict[tuple[str, str | None], Breaker] = {}  # by Upstream.identity
        self._tasks: set[asyncio.Future[object]] = set()
        self._warned_default = False
        # Set by CacheControl: every flight's refresh is remembered, for refresh on demand,
        # with its weight (the bytes it holds, roughly: key, labels and any held value).
        self.refreshers: Callable[[str, tuple[str, ...], Callable[[], Awaitable[Any]], int], None]
        self.refreshers = _forget
        self._longest_ttl: dict[str, int] = {}  # per upstream name: see _ttl
        for declared in self.surfaces.policies:
            for name in declared.upstreams:
                self._longest_ttl[name] = max(self._longest_ttl.get(name, 0), declared.ttl_seconds)

    def policy_for(self, surface: str | SurfacePolicy | None = None) -> SurfacePolicy:
        """The policy a ``fetch`` given ``surface`` would apply in the current request."""
        return self._policy(surface, current_collector())[0]

    def breaker_open(self, upstream: Upstream | str) -> bool:
        """True while the breaker of ``upstream`` holds calls back (given a name: of any
        upstream of that name)."""
        if isinstance(upstream, Upstream):
            breaker = self._breakers.get(upstream.identity)
            return breaker is not None and breaker.is_open
        return any(b.is_open for (name, _), b in list(self._breakers.items()) if name == upstream)

    def force_upstream_unavailable(
        self,
        tool: str,
        upstream_name: str | None = None,
        cache_age_seconds: int | None = None,
        empty_cache: bool = False,
    ) -> ForcedOutage:
        """Compliance testing only: fail ``upstream_name`` for the next response of ``tool``.

        See :mod:`adcp_stale_cache.testing`. Refused unless the cache was built with
        ``test_mode=True``.
        """
        if self._forced is None:
            raise RuntimeError("force_upstream_unavailable needs UpstreamCache(test_mode=True)")
        if tool != "*":
            self.surfaces.get(tool)  # a clear error for an unknown tool
        return self._forced.force(tool, upstream_name, cache_age_seconds, empty_cache)

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

        ``surface`` names the policy (default: the surface of the current request, else the
        default policy). ``validate`` may raise :class:`~adcp_stale_cache.InvalidPayload` to
        refuse an answer; ``cacheable`` returning False serves an answer without keeping it
        (a 4xx, say). ``tags`` label the stored entry for invalidation
        (:class:`~adcp_stale_cache.control.CacheControl`). ``revalidate`` is called instead
        of ``call`` with the value held for the key, when there is one (a conditional HTTP
        request, say). ``directives`` reads what an answer says of its own caching
        (:mod:`~adcp_stale_cache.directives`): kept with the entry as its terms. Raises
        :class:`~adcp_stale_cache.UpstreamUnavailable` when the upstream
        fails and no entry within max-stale exists; failures the policy does not count as an
        outage are re-raised as they are.
        """
        collector = current_collector()
        policy, identified = self._policy(surface, collector)
        # Only a surface known by name may share entries across callers: a request whose
        # surface was not recognised (a path mounted under a prefix, a misspelt tool) keys
        # per caller whatever the default policy says, so a slip never widens sharing.
        shared = policy.shared_across_callers and identified
        partition = None if shared or collector is None else collector.partition
        store_key = self.store_key(upstream, key, partition)
        timeout = upstream.timeout_seconds or policy.upstream_timeout_seconds
        labels = entry_labels(upstream, policy.name, partition, tags)
        if self._forced is not None:
            outage = self._forced.claim(policy, upstream, collector)
            if outage is not None:
                return await self._serve_forced(
                    outage, upstream, policy, store_key, labels, call, codec, timeout
                )
        entry = await self._get(store_key)
        step = plan(entry, self.clock(), policy)
        if isinstance(step, Fresh):
            try:
                value = decode(codec, step.entry, upstream)
            except Unreadable:
                entry, step = None, Refresh(fallback=None)  # refreshed, and overwritten
            else:
                self.metrics.hit(policy.name, upstream.name)
                return value
        if entry is None:
            self.metrics.miss(policy.name, upstream.name)

        budget = collector.budget_left(policy) if collector is not None else None
        if budget is not None:
            if budget <= 0:  # before the breaker: a caller that will not call takes no probe
                return self._after_failure(
                    upstream, policy, step.fallback, BUDGET_SPENT, None, codec
                )
            timeout = min(timeout, budget)
        breaker = self._breaker(upstream)
        admission = breaker.admit(self._breaker_clock()) if breaker else Admission.CALL
        if admission is Admission.REJECT:  # open: answer from cache at once
            failure = breaker.last_failure if breaker and breaker.last_failure else CIRCUIT_OPEN
            return self._after_failure(upstream, policy, step.fallback, failure, None, codec)
        if admission is Admission.CALL and self._shared is not None:
            elsewhere = await self._shared.open_elsewhere(upstream)  # another process's breaker
            if elsewhere is not None:
                return self._after_failure(upstream, policy, step.fallback, elsewhere, None, codec)

        # What the remembered refresh holds: its key and labels, the call's arguments (as
        # large as the key they make, roughly), its closures and any held value. Weighed
        # only when something remembers it: key_size encodes the key once more.
        weight = 0
        if self.refreshers is not _forget:
            weight = len(store_key) + sum(map(len, labels)) + key_size(key) + _CLOSURE_BYTES
        if revalidate is not None and step.previous is not None:
            call = self._conditional(step.previous, upstream, codec, call, revalidate)
            weight += len(step.previous.data)  # the held value rides with the call
        refresh = self._refresher(
            upstream, policy, store_key, call, codec, timeout, cacheable, validate, labels,
            directives, shared,
        )  # fmt: skip
        self.refreshers(store_key, labels, _as_made(collector, refresh), weight)
        # A request never joins a call that started before a purge it could know of: the
        # flight is the key's within one purge count (see purges).
        epoch = await purge_count(self.store)
        flight: Awaitable[_Refreshed[T]] = self._flights.run((store_key, epoch), refresh)
        if breaker is not None and admission is Admission.PROBE:
            flight = _releasing(breaker, flight)
        if step.fallback is not None and (
            admission is Admission.PROBE or policy.stale_while_revalidate or step.background
        ):
            # Serve the entry now; the probe (breaker) or the revalidation runs behind it.
            self._background(flight)
            last = breaker.last_failure if admission is Admission.PROBE and breaker else None
            return self._after_failure(upstream, policy, step.fallback, last, None, codec)
        try:
            refreshed: _Refreshed[T] = await flight
        except Exception as exc:
            failure = classify(exc, timeout, self.failure_types)
            if failure.kind not in policy.stale_on:
                raise
            # Another flight may have stored a newer entry meanwhile: prefer it.
            latest = await self._get(store_key)
            if latest is None or (step.fallback and latest.stored_at < step.fallback.stored_at):
                latest = step.fallback
            return self._after_failure(upstream, policy, latest, failure, exc, codec)
        if refreshed.advisories and collector is not None:
            for name, advisory in refreshed.advisories:  # every caller sharing the flight
                collector.record(name, advisory)
        return refreshed.value if refreshed.data is None else codec.loads(refreshed.data)

    def _refresher(
        self,
        upstream: Upstream,
        policy: SurfacePolicy,
        store_key: str,
        call: Callable[[], Awaitable[T]],
        codec: Codec[T],
        timeout: float,
        cacheable: Callable[[T], bool] | None,
        validate: Callable[[T], object] | None,
        labels: tuple[str, ...] = (),
        directives: Callable[[T], Directives | None] | None = None,
        shared: bool = False,
    ) -> Callable[[], Awaitable[_Refreshed[T]]]:
        """The one upstream call a flight makes: store what may be kept, tell the breaker.

        Every way a flight ends reports to the breaker, the wait for another process's
        refresh included: a probe that reported nothing would hold the breaker open.
        """
        breaker = self._breaker(upstream)

        async def refresh() -> _Refreshed[T]:
            started = time.monotonic()
            try:
                refreshed = await fill()
            except Exception as exc:
                failure = classify(exc, timeout, self.failure_types)
                outage = failure.kind in policy.stale_on
                self.metrics.refresh(policy.name, upstream.name, time.monotonic() - started, False)
                if outage:
                    self.metrics.upstream_failure(upstream.name, failure.code)
                if breaker is not None:
                    if outage:
                        breaker.on_failure(self._breaker_clock(), failure)
                    else:
                        breaker.on_success()  # it answered: what failed was not an outage
                    self.metrics.breaker(upstream.name, breaker.is_open)
                    if self._shared is not None and breaker.is_open and not breaker.probing:
                        await self._shared.opened(
                            upstream, failure, breaker.policy.cooldown_seconds
                        )
                raise
            self.metrics.refresh(policy.name, upstream.name, time.monotonic() - started, True)
            if breaker is not None:
                breaker.on_success()
                self.metrics.breaker(upstream.name, False)
                if self._shared is not None:
                    await self._shared.closed(upstream)
            return refreshed

        async def fill() -> _Refreshed[T]:
            lease = getattr(self.store, "lease", None) if self.coordinate_refreshes else None
            if lease is None:
                return await call_and_store()
            started = self.clock()
            async with lease(store_key, timeout + 1) as holder:
                if holder:
                    return await call_and_store()
            entry = await self._await_other_process(store_key, started, timeout)
            if entry is None:  # released with nothing stored: a failure, or a purge won
                return await call_and_store()  # (no outage known here: this one asks)
            return _Refreshed(decode(codec, entry, upstream), entry.data)

        async def call_and_store() -> _Refreshed[T]:
            before = await purge_count(self.store)  # see purges: a purge meanwhile wins
            # Nested cached calls record their stale serves here, for every caller.
            inner = AdvisoryCollector.within(current_collector())
            token = _flight.set(inner)
            try:
                value = await call_with_deadline(call, timeout, self._call_loop)
            finally:
                _flight.reset(token)
            if validate is not None:
                validate(value)
            if inner:  # built on stale data: served with its advisories, never stored fresh
                return _Refreshed(value, None, tuple(inner.recorded()))
            if cacheable is not None and not cacheable(value):
                return _Refreshed(value, None)
            said = directives(value) if directives is not None else None
            if said is not None and not said.storable(shared):
                return _Refreshed(value, None)
            terms = said.terms() if said is not None else None
            data = encode(codec, value, upstream)
            if data is None:
                return _Refreshed(value, None)
            entry = Entry(data, self.clock(), labels, terms=terms)
            if not await self._set(store_key, entry, self._ttl(upstream, policy), before):
                return _Refreshed(value, None)  # a purge landed meanwhile: it wins
            return _Refreshed(value, data)

        return refresh

    @staticmethod
    def _conditional(
        previous: Entry,
        upstream: Upstream,
        codec: Codec[T],
        call: Callable[[], Awaitable[T]],
        revalidate: Callable[[T], Awaitable[T]],
    ) -> Callable[[], Awaitable[T]]:
        """``revalidate`` given the held value (``call`` when it cannot be read)."""
        try:
            held = decode(codec, previous, upstream)
        except Unreadable:
            return call
        return lambda: revalidate(held)

    async def _await_other_process(
        self, store_key: str, since: float, timeout: float
    ) -> Entry | None:
        """The entry another process's refresh stores, waited for up to ``timeout``; None
        when that process let go of the key without storing one (its call failed, or a
        purge kept its answer out: this process cannot tell, so it asks itself)."""
        lease_active: Any = getattr(self.store, "lease_active", None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            entry = await self._get(store_key)
            if entry is not None and entry.stored_at >= since:
                return entry
            if lease_active is not None and not await lease_active(store_key):
                entry = await self._get(store_key)  # released: it stored, or it did not
                return entry if entry is not None and entry.stored_at >= since else None
        raise TimeoutError(f"no answer within {timeout:g}s (refresh by another process)")

    def _breaker(self, upstream: Upstream) -> Breaker | None:
        if self.breaker_policy is None:
            return None
        breaker = self._breakers.get(upstream.identity)
        if breaker is None:
            breaker = self._breakers[upstream.identity] = Breaker(self.breaker_policy)
        return breaker

    def refresh_soon_all(
        self, refreshes: list[tuple[str, Callable[[], Awaitable[Any]]]], concurrency: int
    ) -> None:
        """Run remembered refreshes (see ``refreshers``) in the background, ``concurrency``
        at a time, each as the flight of its store key when it starts: requests for the key
        meanwhile join it."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        queue = list(reversed(refreshes))

        async def worker() -> None:
            while queue:
                store_key, refresh = queue.pop()
                with contextlib.suppress(Exception):  # a failed refresh leaves the entry
                    await self._run_as_flight(store_key, refresh)

        for _ in range(min(concurrency, len(queue))):
            self._background(worker())

    async def _run_as_flight(self, store_key: str, refresh: Callable[[], Awaitable[Any]]) -> Any:
        """``refresh`` as the flight of ``store_key`` that requests now would join."""
        return await self._flights.run((store_key, await purge_count(self.store)), refresh)

    def _background(self, work: Awaitable[object]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def store_key(self, upstream: Upstream, key: object, partition: str | None = None) -> str:
        """The store key of ``key`` for ``upstream`` (and the caller partition, if any; and
        the upstream's own credentials, when it has some: never shared across them)."""
        parts: tuple[object, ...] = (upstream.url, partition, key)
        if upstream.credentials is not None:
            parts = (*parts, ("credentials", upstream.credentials.get_secret_value()))
        return cache_key(self._keyspace, upstream.name, parts)

    def cached(
        self,
        upstream: Upstream,
        *,
        surface: str | SurfacePolicy | None = None,
        key: Callable[..., object] | None = None,
        codec: Codec[Any] = JSON,
        tags: Iterable[str] | Callable[..., Iterable[str]] = (),
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
        """Decorator form of :meth:`fetch`; the key defaults to the function and its arguments.

        ``tags`` are attached to every entry (see :mod:`adcp_stale_cache.control`), or come
        from the call's arguments when given as a function of them."""

        def decorate(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> T:
                k = key(*args, **kwargs) if key else (fn.__qualname__, args, kwargs)
                call_tags = tags(*args, **kwargs) if callable(tags) else tags
                return await self.fetch(
                    upstream, k, lambda: fn(*args, **kwargs), surface=surface, codec=codec,
                    tags=call_tags,
                )  # fmt: skip

            return wrapper

        return decorate

    def _after_failure(
        self,
        upstream: Upstream,
        policy: SurfacePolicy,
        latest: Entry | None,
        failure: Failure | None,
        exc: Exception | None,
        codec: Codec[T],
    ) -> T:
        """Serve ``latest`` stale (recording the advisory), as a plain hit, or fail.

        ``failure`` is None for a stale-while-revalidate answer, where no call failed.
        """
        outcome = on_failure(latest, self.clock(), policy)
        if not isinstance(outcome, Fail):
            try:
                value = decode(codec, outcome.entry, upstream)
            except Unreadable:
                pass  # no usable entry after all: fail below
            else:
                if isinstance(outcome, ServeStale):
                    self._record_stale(
                        upstream, policy, outcome.age_seconds, failure, outcome.target_seconds
                    )
                return value
        failure = failure or UNKNOWN_FAILURE  # revalidating an entry that just expired
        self.metrics.unavailable(policy.name, upstream.name, failure.code)
        logger.warning(
            "upstream_unavailable upstream=%s surface=%s code=%s",
            upstream.name,
            policy.name,
            failure.code,
        )
        raise UpstreamUnavailable(upstream, failure) from exc

    def _record_stale(
        self,
        upstream: Upstream,
        policy: SurfacePolicy,
        age: int,
        failure: Failure | None,
        target: int | None = None,
    ) -> None:
        """One stale serve: the request's advisory, the metrics and the log line."""
        collector = current_collector()
        first = True  # this request's first stale serve from this upstream
        if collector is not None:
            first = collector.record(
                upstream.identity, stale_response(upstream, policy, age, failure, target)
            )
        elif self.strict_advisories:
            raise AdvisoryLost(
                f"{upstream.name!r} would be served stale with no request collector: carry the "
                "request's context into this thread or loop (carry_context, use_collector)"
            )
        code = failure.code if failure else "REVALIDATING"
        self.metrics.stale_serve(policy.name, upstream.name, code, collector is not None and first)
        # Once per upstream per request at WARNING: a page of 50 stale keys is one event.
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "stale_serve upstream=%s surface=%s age_seconds=%d code=%s collected=%s",
            upstream.name,
            policy.name,
            age,
            code,
            collector is not None,
        )

    async def _serve_forced(
        self,
        outage: ForcedOutage,
        upstream: Upstream,
        policy: SurfacePolicy,
        store_key: str,
        labels: tuple[str, ...],
        call: Callable[[], Awaitable[T]],
        codec: Codec[T],
        timeout: float,
    ) -> T:
        """A forced outage: serve the entry aged as asked (seeding a cold cache for real,
        with the labels a purge selects it by)."""
        if outage.empty_cache:  # as if nothing were cached: the failure stays a failure
            self.metrics.unavailable(policy.name, upstream.name, FORCED_FAILURE.code)
            raise UpstreamUnavailable(upstream, FORCED_FAILURE)
        entry = await self._get(store_key)
        now = self.clock()
        if entry is None:
            before = await purge_count(self.store)  # a purge meanwhile wins here too
            try:
                value = await call_with_deadline(call, timeout, self._call_loop)
            except Exception as exc:
                raise UpstreamUnavailable(
                    upstream, classify(exc, timeout, self.failure_types)
                ) from exc
            data = encode(codec, value, upstream)
            if data is None:  # nothing to age: the forced outage stays a failure
                raise UpstreamUnavailable(upstream, FORCED_FAILURE)
            entry = Entry(data, now, labels)
            await self._set(store_key, entry, self._ttl(upstream, policy), before)
        age = outage.cache_age_seconds
        if age is None:
            age = max(whole_seconds(entry.age(now)), policy.freshness_target_seconds)
        # The aged copy is served, never stored: the real entry keeps its real age.
        aged = Entry(entry.data, now - age)
        return self._after_failure(upstream, policy, aged, FORCED_FAILURE, None, codec)

    def _policy(
        self, surface: str | SurfacePolicy | None, collector: AdvisoryCollector | None
    ) -> tuple[SurfacePolicy, bool]:
        """The policy of this call, and whether it was identified (not the default)."""
        if isinstance(surface, SurfacePolicy):
            return surface, True
        if surface is not None:
            return self.surfaces.get(surface), True
        if collector is not None and collector.surface is not None:
            return collector.surface, True
        if collector is not None and not collector.nested and not self._warned_default:
            self._warned_default = True  # once: a misrouted app would say it on every request
            logger.warning(
                "surface_unknown: a fetch in a request named no surface and the request "
                "matched none (route paths are matched without the app's root_path); the "
                "default policy applies, keyed per caller"
            )
        return self.surfaces.default, False

    async def _get(self, store_key: str) -> Entry | None:
        try:
            entry = await self.store.get(store_key)
        except Exception:  # a broken store degrades to "no cache", never fails the request
            logger.exception("store_error op=get")
            return None
        if entry is not None and entry.tombstone:  # hard-purged
            return None
        # A time that is no time (NaN, infinite) or far in the future would look fresh
        # forever: such an entry is no entry.
        if entry is not None and not (entry.stored_at <= self.clock() + MAX_CLOCK_SKEW_SECONDS):
            logger.warning("unreadable_entry reason=stored_at %r", entry.stored_at)
            return None
        return entry

    def _ttl(self, upstream: Upstream, policy: SurfacePolicy) -> int:
        """How long the store keeps an entry of ``upstream``: as long as the longest-lived
        surface reading that upstream may serve it (surfaces can share a key, and each
        decision applies its own bound), plus one second of slack (the decision, not the
        store's expiry, draws the exact bound)."""
        longest = self._longest_ttl.get(upstream.name, 0)
        if policy.ttl_seconds > longest:
            self._longest_ttl[upstream.name] = longest = policy.ttl_seconds
        return longest + 1

    async def _set(self, store_key: str, entry: Entry, ttl_seconds: float, before: object) -> bool:
        """Store unless a purge landed since the count read ``before`` (see purges); True
        when stored. A store's fault is logged, never raised."""
        try:
            return await store_unless_purged(self.store, store_key, entry, ttl_seconds, before)
        except Exception:
            logger.exception("store_error op=set")
            return False
