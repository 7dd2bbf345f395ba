"""Stage 3 of a fetch, **fly**: the one upstream call every caller of a key shares, keyed by
the purge count it starts under too: a request never joins a call older than a purge it knows."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ..core.advisory import AdcpError
from ..core.callables import bounded
from ..core.decision import Fail, ServeStale, on_failure, target_seconds
from ..core.directives import Directives
from ..core.entry import Entry, Terms
from ..core.failures import Failure, StaleBeyondBound, classify
from ..core.keys import key_size
from ..core.policy import SurfacePolicy, Upstream
from ..core.values import Codec, Unreadable, decode, encode
from ..stores import Leasing, Listening
from ..stores.purges import PurgeWitness
from .admission import Admitted, Breakers
from .blocking import as_probe
from .breaker import Breaker
from .collector import AdvisoryCollector, current_collector, enter_flight, leave_flight
from .context import RequestContext
from .lookup import Lookup
from .settings import Settings
from .singleflight import SingleFlight, call_with_deadline

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")

#: Roughly what a remembered refresh's closures hold beside its key, labels and held value.
CLOSURE_BYTES = 2048

#: A flight's refresh, re-runnable: given the purge count to run under (None: read it), it
#: calls the upstream and stores the answer as its request would.
RememberedRefresh = Callable[[object], Awaitable[Any]]


@runtime_checkable
class RefreshMemory(Protocol):
    """What hears of every flight's refresh (as ``control.RecentRefreshes`` does)."""

    def remember(
        self, store_key: str, labels: tuple[str, ...], refresh: RememberedRefresh, weight: int
    ) -> None:
        """Remember ``refresh`` as the one of ``store_key`` (``weight``: about its bytes)."""


@dataclass(frozen=True, slots=True)
class StaleAtSource:
    """An answer its upstream already served stale (its own ``STALE_RESPONSE``), past our
    target: every caller's answer carries it as an advisory."""

    age: int
    target: int
    failure: Failure


class Refreshed(Generic[T]):
    """What one flight hands to every caller sharing it (``data`` None: not stored)."""

    __slots__ = (
        "advisories",
        "at_source",
        "codec",
        "data",
        "entry",
        "labels",
        "spare",
        "value",
    )

    def __init__(
        self,
        codec: Codec[T],
        value: T,
        data: bytes | None,
        advisories: tuple[tuple[Hashable, AdcpError], ...] = (),
        labels: tuple[str, ...] = (),
        entry: Entry | None = None,
        at_source: StaleAtSource | None = None,
        spare: tuple[T, ...] = (),
    ) -> None:
        self.codec = codec  # the one ``spare`` was read with
        self.value = value
        self.data = data
        self.advisories = advisories
        self.labels = labels
        self.entry = entry
        self.at_source = at_source
        self.spare = list(spare)  # a stored value no one holds: handed to one caller

    def own(self, codec: Codec[T]) -> T:
        """One caller's value: the spare, to the first to ask with its codec; else a copy read
        back from ``data``. A value not stored is its call's own, shared as it is."""
        if self.data is None:
            return self.value
        if codec is self.codec:
            try:
                return self.spare.pop()
            except IndexError:
                pass
        return codec.loads(self.data)


@dataclass(slots=True)
class Answer(Generic[T]):
    """How one fetch calls its upstream and reads what it answers (see ``fetch``). Not frozen,
    as the records every miss builds are not: a frozen one sets each field through
    ``object.__setattr__`` (six fields: 1.7 us, against 0.4)."""

    call: Callable[[], Awaitable[T]]
    codec: Codec[T]
    cacheable: Callable[[T], bool] | None = None
    validate: Callable[[T], object] | None = None
    revalidate: Callable[[T], Awaitable[T]] | None = None
    directives: Callable[[T], Directives | None] | None = None


@dataclass(slots=True)
class Target:
    """Where and how a flight's answer is stored; never the request's collector or entry, which
    a remembered refresh would keep alive (not frozen, as ``Answer``)."""

    upstream: Upstream
    policy: SurfacePolicy
    store_key: str
    labels: tuple[str, ...]
    shared: bool
    private: bool = False  # never stored

    @classmethod
    def of(cls, found: Lookup) -> Target:
        """The target of ``found``'s flight."""
        return cls(
            found.upstream, found.policy, found.store_key, found.labels, found.shared, found.private
        )


def as_made(origin: AdvisoryCollector | None, refresh: RememberedRefresh) -> RememberedRefresh:
    """``refresh``, to be re-run later as the request that made it (its surface, partition
    and pin), never as whoever asks for the refresh."""
    # The request's facts only: its collector would stay alive with every remembered key
    # (and "is not None": an empty collector is falsy).
    made = origin.context.as_made() if origin is not None else RequestContext

    async def again(before: object = None) -> Any:
        token = enter_flight(AdvisoryCollector(context=made()))
        try:
            return await refresh(before)
        finally:
            leave_flight(token)

    return again


class Flights:
    """The flights of one cache, reporting to ``breakers``; with ``coordinate_refreshes``,
    processes sharing a store with leases refresh a key once between them."""

    def __init__(
        self,
        settings: Settings,
        read: Callable[[str], Awaitable[Entry | None]],
        breakers: Breakers,
    ) -> None:
        self.store, self.read, self.clock = settings.store, read, settings.clock
        # Decided once: a protocol check walks every member.
        self.purges = PurgeWitness(self.store)
        self._leasing = self.store if isinstance(self.store, Leasing) else None
        self._listening = self.store if isinstance(self.store, Listening) else None
        self.metrics, self.breakers = settings.metrics, breakers
        self.failure_types = settings.failure_types
        self._longest_ttl: dict[str, int] = {}  # per upstream name
        for declared in settings.surfaces.policies:
            for name in declared.upstreams:
                self._longest_ttl[name] = max(self._longest_ttl.get(name, 0), declared.ttl_seconds)
        self.call_loop, self.lease = settings.call_loop, settings.coordinate_refreshes
        self.memory: RefreshMemory | None = None
        self.flights: SingleFlight[Refreshed[Any]] = SingleFlight()
        self.tasks: set[asyncio.Future[Any]] = set()  # what runs behind an answer
        self._detached: set[concurrent.futures.Future[Any]] = set()
        # Once a loop ended under work behind an answer, such work runs in front instead, or
        # a probe would never finish and its breaker never close.
        self.in_front = False

    def tell(self, memory: RefreshMemory | None) -> None:
        """Tell ``memory`` of every flight's refresh from now on (None: of none)."""
        if memory is not None and not isinstance(memory, RefreshMemory):  # else every fly fails
            raise TypeError(
                f"remember_refreshes takes a RefreshMemory (remember()), not {memory!r}"
            )
        self.memory = memory

    async def fly(
        self, found: Lookup, admitted: Admitted, answer: Answer[T]
    ) -> tuple[Awaitable[Refreshed[T]], bool]:
        """Start (or join) the flight of this fetch: what to await for its :class:`Refreshed`,
        and whether it runs behind an answer from the entry held."""
        call, previous, weight = answer.call, found.previous, 0
        if self.memory is not None:
            weight = len(found.store_key) + sum(map(len, found.labels)) + key_size(found.key)
            weight += CLOSURE_BYTES
        if answer.revalidate is not None and previous is not None:
            call = _conditional(previous, found.upstream, answer.codec, call, answer.revalidate)
            weight += len(previous.data)  # the held value rides with the call
        refresh = self._refresher(Target.of(found), admitted.timeout, answer, call)
        if self.memory is not None:
            remembered = as_made(found.collector, refresh)
            self.memory.remember(found.store_key, found.labels, remembered, weight)
        if admitted.probe is not None:  # its blocking call never waits behind stuck ones
            refresh = as_probe(refresh)
        try:
            epoch = await self.purges.flight_count()  # the tier's recent reading: no round trip
        except BaseException:  # cancelled before the flight could release the probe
            if admitted.probe is not None:
                admitted.probe.release_probe()
            raise
        flight: Awaitable[Refreshed[T]] = self.run(found.store_key, refresh, epoch)
        if admitted.probe is not None:
            flight = _releasing(admitted.probe, flight)
        behind = admitted.probe is not None or found.behind
        self.in_front = self.in_front or admitted.in_front
        if found.fallback is not None and behind and not self.in_front:
            task = self.background(flight)
            if admitted.probe is not None and isinstance(task, asyncio.Future):
                loop = task.get_loop()
                admitted.probe.probe_runs_while(lambda: not loop.is_closed())
            return task, True
        if found.fallback is not None and admitted.timeout < found.timeout:
            # The budget bounds the wait too: a joined flight may run under the full deadline.
            flight = bounded(flight, admitted.timeout)
        return flight, False

    def run(self, store_key: str, refresh: RememberedRefresh, epoch: object) -> Awaitable[Any]:
        """``refresh`` as the flight of ``store_key`` under purge count ``epoch``."""
        return self.flights.run((store_key, epoch), lambda: refresh(epoch))

    async def run_now(self, store_key: str, refresh: RememberedRefresh) -> Any:
        """``refresh`` as the flight of ``store_key`` that requests now would join."""
        return await self.run(store_key, refresh, await self.purges.count())

    def refresh_soon(
        self, refreshes: list[tuple[str, RememberedRefresh]], concurrency: int
    ) -> None:
        """Run ``refreshes`` in the background, ``concurrency`` at a time, each as its flight."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        queue = list(reversed(refreshes))

        async def worker() -> None:
            while queue:
                store_key, refresh = queue.pop()
                with contextlib.suppress(Exception):  # a failed refresh leaves the entry
                    await self.run_now(store_key, refresh)

        for _ in range(min(concurrency, len(queue))):
            self.background(worker())

    def ttl(self, upstream: Upstream, policy: SurfacePolicy) -> int:
        """How long the store keeps an entry of ``upstream``: the longest ttl of the surfaces
        that may share its key, plus a second (the decision draws the exact bound)."""
        longest = self._longest_ttl.get(upstream.name, 0)
        if policy.ttl_seconds > longest:
            self._longest_ttl[upstream.name] = longest = policy.ttl_seconds
        return longest + 1

    def background(self, work: Awaitable[T]) -> Awaitable[T]:
        """Run ``work`` behind the answer where it can finish: on the call loop when calls are
        detached, else on the caller's loop."""
        if self.call_loop is not None:
            done = self.call_loop.submit(lambda: work)
            self._detached.add(done)
            done.add_done_callback(self._detached.discard)
            return _Behind(done)
        task = asyncio.ensure_future(work)
        abandoned = [t for t in self.tasks if t.get_loop().is_closed()]
        if abandoned:  # their loops closed under them, never cancelled: none will finish
            self.in_front = True
            self.tasks.difference_update(abandoned)
        self.tasks.add(task)
        task.add_done_callback(self._landed)
        return task

    def _landed(self, task: asyncio.Future[Any]) -> None:
        self.tasks.discard(task)
        if task.cancelled():  # only its loop ending cancels it
            self.in_front = True
        else:
            task.exception()

    async def latest(self, found: Lookup) -> Entry | None:
        """After a failed flight, the newest entry to fall back on."""
        self._ask_shared(found.store_key)
        latest, fallback = await self.read(found.store_key), found.fallback
        if latest is None or (fallback is not None and latest.stored_at < fallback.stored_at):
            return fallback
        return latest

    async def seed(
        self, found: Lookup, call: Callable[[], Awaitable[T]], codec: Codec[T]
    ) -> Entry | None:
        """One call stored as it answers (an injected outage's cold cache); None if not stored."""
        before = await self.purges.count()
        stamp = self.clock()
        value = await call_with_deadline(call, found.timeout, self.call_loop)
        encoded = encode(codec, value, found.upstream)
        if encoded is None:
            return None
        entry = Entry(encoded.data, stamp, found.labels)
        await self._store(Target.of(found), entry, before)
        return entry

    def _refresher(
        self, found: Target, timeout: float, answer: Answer[T], call: Callable[[], Awaitable[T]]
    ) -> RememberedRefresh:
        """The flight's work: call, store, and report every way it ends to the breaker."""
        upstream, policy = found.upstream, found.policy

        async def refresh(before: object = None) -> Refreshed[T]:
            started = time.monotonic()
            try:
                refreshed = await self._fill(found, timeout, answer, call, before)
            except Exception as exc:
                failure = classify(exc, timeout, self.failure_types)
                outage = failure.kind in policy.stale_on
                self.metrics.refresh(policy.name, upstream.name, time.monotonic() - started, False)
                if isinstance(exc, StaleBeyondBound):  # it answered: no fault of the upstream's
                    await self.breakers.report(upstream, None, False)
                    raise
                if outage:
                    self.metrics.upstream_failure(upstream.name, failure.code)
                await self.breakers.report(upstream, failure, outage)
                raise
            self.metrics.refresh(policy.name, upstream.name, time.monotonic() - started, True)
            await self.breakers.report(upstream, None, False)
            return refreshed

        return refresh

    async def _fill(
        self,
        found: Target,
        timeout: float,
        answer: Answer[T],
        call: Callable[[], Awaitable[T]],
        before: object,
    ) -> Refreshed[T]:
        """Call and store; with leases, only as the holder, else wait for the holder's."""
        if not self.lease or self._leasing is None:
            return await self._call_and_store(found, timeout, answer, call, before)
        started = self.clock()
        async with self._leasing.lease(found.store_key, timeout + 1) as holder:
            if holder:
                return await self._call_and_store(found, timeout, answer, call, before)
        entry = await self._await_other_process(found.store_key, started, timeout)
        if entry is None:  # released with nothing stored: a failure, or a purge won
            before = await self.purges.count()
            return await self._call_and_store(found, timeout, answer, call, before)
        value = decode(answer.codec, entry, found.upstream)
        said = answer.directives(value) if answer.directives is not None else None
        at_source = _at_source(found, said, entry, self.clock())
        return Refreshed(
            answer.codec, value, entry.data, (), entry.labels, entry, at_source, (value,)
        )

    async def _call_and_store(
        self,
        found: Target,
        timeout: float,
        answer: Answer[T],
        call: Callable[[], Awaitable[T]],
        before: object,
    ) -> Refreshed[T]:
        if before is None:  # run on its own, not as a flight
            before = await self.purges.count()
        # Nested cached calls record their stale serves here, for every caller.
        inner = AdvisoryCollector.within(current_collector())
        token = enter_flight(inner)
        try:
            value = await call_with_deadline(call, timeout, self.call_loop)
        finally:
            leave_flight(token)
        if answer.validate is not None:
            answer.validate(value)
        # Built from other entries: labelled by them too, so that purging one purges it.
        read = inner.trace.labels.difference(found.labels) if inner.trace.labels else ()
        labels = (*found.labels, *sorted(read)) if read else found.labels
        if inner:  # built on stale data: served with its advisories, never stored fresh
            return Refreshed(answer.codec, value, None, tuple(inner.recorded()), labels)
        if found.private or (answer.cacheable is not None and not answer.cacheable(value)):
            return Refreshed(answer.codec, value, None, (), labels)
        said = answer.directives(value) if answer.directives is not None else None
        terms = _terms(said, found.policy)
        now = self.clock()
        at_source = _at_source(found, said, None, now, terms)
        if said is not None and not said.storable(found.shared):
            return Refreshed(answer.codec, value, None, (), labels, at_source=at_source)
        encoded = encode(answer.codec, value, found.upstream)
        if encoded is None:
            return Refreshed(answer.codec, value, None, (), labels, at_source=at_source)
        # Built from cached entries: as old as the oldest, not fresh for a whole target.
        built_age = now - inner.trace.read_since
        if built_age > (terms.age if terms is not None else 0.0):
            terms = dataclasses.replace(terms or Terms(), age=built_age)
        entry = Entry(encoded.data, now, labels, terms=terms)
        if not await self._store(found, entry, before):  # a purge landed meanwhile: it wins
            return Refreshed(answer.codec, value, None, (), labels, at_source=at_source)
        return Refreshed(
            answer.codec, value, encoded.data, (), labels, entry, at_source, encoded.spare
        )

    async def _store(self, found: Target, entry: Entry, before: object) -> bool:
        """Store unless a purge landed since ``before``; True when stored (never raises)."""
        ttl = self.ttl(found.upstream, found.policy)
        try:
            return await self.purges.store_unless_purged(found.store_key, entry, ttl, before)
        except Exception:
            logger.exception("store_error op=set")
            return False

    async def _await_other_process(
        self, store_key: str, since: float, timeout: float
    ) -> Entry | None:
        """The entry another process's refresh stores, waited for up to ``timeout``; None when
        it let go of the key without storing one (then this process calls itself)."""
        leasing = self._leasing if self.lease else None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            self._ask_shared(store_key)
            entry = await self.read(store_key)
            if entry is not None and entry.stored_at >= since:
                return entry
            if leasing is not None and not await leasing.lease_active(store_key):
                self._ask_shared(store_key)
                entry = await self.read(store_key)  # released: it stored, or it did not
                return entry if entry is not None and entry.stored_at >= since else None
        raise TimeoutError(f"no answer within {timeout:g}s (refresh by another process)")

    def _ask_shared(self, store_key: str) -> None:
        """The next read of ``store_key`` asks the shared store, not a memory copy."""
        if self._listening is not None:
            self._listening.ask_shared(store_key)


def _terms(said: Directives | None, policy: SurfacePolicy) -> Terms | None:
    """The terms an answer is stored with; a stale-at-source answer with no known age is
    at least our target old."""
    terms = said.terms() if said is not None else None
    if said is None or said.stale_at_source is None or said.age_known:
        return terms
    terms = terms or Terms()
    floor = target_seconds(Entry(b"", 0.0, terms=terms), policy)
    return dataclasses.replace(terms, age=max(terms.age, floor))


def _at_source(
    found: Target,
    said: Directives | None,
    entry: Entry | None,
    now: float,
    terms: Terms | None = None,
) -> StaleAtSource | None:
    """What a caller must be told of an answer stale at its source (None: within our target),
    ``entry`` as stored (None: stored ``now`` with ``terms``). Raises
    :class:`StaleBeyondBound` when it is past max-stale."""
    if said is None or said.stale_at_source is None:
        return None
    if entry is None:  # built only here: most answers say nothing of their staleness
        entry = Entry(b"", now, terms=terms)
    outcome = on_failure(entry, now, found.policy)
    if isinstance(outcome, Fail):
        raise StaleBeyondBound(said.stale_at_source.code, "stale at its source past max-stale")
    if isinstance(outcome, ServeStale):
        return StaleAtSource(outcome.age_seconds, outcome.target_seconds, said.stale_at_source)
    return None


def _conditional(
    previous: Entry,
    upstream: Upstream,
    codec: Codec[T],
    call: Callable[[], Awaitable[T]],
    revalidate: Callable[[T], Awaitable[T]],
) -> Callable[[], Awaitable[T]]:
    """``revalidate`` given the held value, decoded as the flight calls (``call`` when it
    cannot be read): a caller joining the flight decodes nothing, and each run its own copy."""

    def conditional() -> Awaitable[T]:
        try:
            held = decode(codec, previous, upstream)
        except Unreadable:
            return call()
        return revalidate(held)

    return conditional


class _Behind(Generic[T]):
    """Work on the call loop, bound to the caller's loop only if awaited."""

    __slots__ = ("_done",)

    def __init__(self, done: concurrent.futures.Future[T]) -> None:
        self._done = done

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.wrap_future(self._done).__await__()


async def _releasing(breaker: Breaker, flight: Awaitable[T]) -> T:
    """Await a probe's flight, then free its slot if it gave no verdict."""
    try:
        return await flight
    finally:
        breaker.release_probe()
