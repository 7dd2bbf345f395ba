"""A model-based simulation of the cache under interleavings (issue 22, the other half).

Several simulated processes (each an ``UpstreamCache`` with its own memory tier) share one
store, an in-process stand-in for Redis (a ``MemoryStore`` behind every process's
``TieredStore``), on one controlled clock. An upstream keeps a version per principal that
steps bump; a step can start a call and leave it in flight (it read the upstream, it has not
answered) while other steps run: purges (soft, hard, ``refresh()``) through any process,
outages, time passing, nested fetches, and the flight landing later. Hypothesis draws the
steps and shrinks a failure to a minimal sequence.

After every answer the invariants are checked against a reference model:

- a principal only sees its own data;
- an answer without an advisory is younger than its target and, for a request that started
  after an acknowledged purge of its principal, never carries data superseded before it;
- an advisory states its real age (never understated), at least its stated target, at most
  target + max-stale; one advisory per upstream;
- after an acknowledged hard purge, until the upstream answers a call started after it, an
  outage serves nothing: the failure stays a failure; so does an outage with nothing cached.

``SIMULATION_EXAMPLES`` (default 400) sets how many sequences one run draws; CI runs the
default (about a minute), ``SIMULATION_EXAMPLES=2000 pytest tests/test_simulation.py`` runs
a long one.
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass, field
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis (dev extra) is needed")
from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from adcp_stale_cache import (  # noqa: E402
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
)
from adcp_stale_cache.collector import AdvisoryCollector, use_collector  # noqa: E402
from adcp_stale_cache.control import CacheControl  # noqa: E402
from adcp_stale_cache.stores import TieredStore  # noqa: E402

TARGET, MAX_STALE = 10, 100
ACCOUNTS = SurfacePolicy(name="accounts", field="accounts", freshness_target_seconds=TARGET,
                         max_stale_seconds=MAX_STALE, upstream_timeout_seconds=60)  # fmt: skip
CATALOG = ACCOUNTS.model_copy(update={"name": "catalog", "field": "catalog"})
SURFACES = Surfaces.of(ACCOUNTS, CATALOG)
ACCOUNT_SERVICE = Upstream(name="account-service")
CATALOG_SERVICE = Upstream(name="catalog-service")
PROCESSES = 2
# "c" calls without credentials: its partition is the host's, which the operator's requests
# share too (the partition every uncredentialed caller of one host gets).
PARTITIONS = {"a": "tenant-a", "b": "tenant-b", "c": "host"}
OPERATOR = "host"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class SimTiers(TieredStore):
    """A process's tiers on the simulation's clock, hearing every purge at once."""

    def __init__(self, far: Any, clock: Clock) -> None:
        super().__init__(far, MemoryStore(clock=clock), check_seconds=0.0,
                         near_max_age_seconds=1.0)  # fmt: skip
        self.clock = clock  # type: ignore[assignment]
        self._heard_at = clock()


@dataclass
class Flight:
    """A call left in flight: it read the upstream (``version``), it has not answered."""

    task: asyncio.Task[Any]
    principal: str
    started: int  # the step it started at
    gate: asyncio.Event = field(default_factory=asyncio.Event)


class Simulation(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        shared = MemoryStore(clock=self.clock)
        self.caches = [
            UpstreamCache(
                SimTiers(shared, self.clock), surfaces=SURFACES, clock=self.clock, breaker=None
            )
            for _ in range(PROCESSES)
        ]
        self.controls = [CacheControl(cache) for cache in self.caches]
        self.version = dict.fromkeys(PARTITIONS, 0)
        self.down = False
        self.step = 0
        self.flights: list[Flight] = []
        self.waiting: list[Flight] = []  # requests that joined a call still in flight
        # The model: per principal, the step and version of the last acknowledged purge, and
        # whether a hard purge is not yet followed by a call that started after it.
        self.purged: dict[str, tuple[int, int]] = {}
        self.forgotten: set[str] = set()
        self.answered_since: dict[str, bool] = {}
        self.ever_answered: set[str] = set()

    def teardown(self) -> None:
        if hasattr(self, "loop"):
            for flight in self.flights + self.waiting:
                flight.gate.set()
            self.settle()
            for flight in self.flights + self.waiting:  # answered now: read, never left unread
                if flight.task.done() and not flight.task.cancelled():
                    flight.task.exception()
            # Whatever is left (a background refresh, say) is cancelled and awaited, so that
            # the loop closes with no task pending and no exception unretrieved.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()

            async def drain() -> None:
                await asyncio.gather(*pending, return_exceptions=True)

            self.run(drain())
            self.loop.close()

    # The upstream: principal data, with the version and time of the read.

    def account_call(self, principal: str, gate: asyncio.Event | None) -> Any:
        async def call() -> dict[str, Any]:
            if self.down:
                raise ConnectionRefusedError
            read_at = self.step  # what it reads is as of this step
            read = {"p": principal, "v": self.version[principal], "t": self.clock()}
            if gate is not None:
                await gate.wait()  # in flight: it read, it has not answered
                if self.down:
                    raise ConnectionRefusedError
            self.note_answered(principal, read_at)
            return {**read, "t": self.clock()}  # as of its answer (its version: as read)

        return call

    def note_answered(self, principal: str, read_at: int) -> None:
        purge = self.purged.get(principal)
        if purge is None or read_at > purge[0]:
            self.forgotten.discard(principal)
        self.ever_answered.add(principal)

    async def request(self, process: int, principal: str, nested: bool, gate: Any) -> Any:
        started = self.step
        cache = self.caches[process]
        with use_collector(AdvisoryCollector(partition=PARTITIONS[principal])) as collector:
            call = self.account_call(principal, gate)
            if nested:  # a catalog call that reads the caller's account inside

                async def outer() -> dict[str, Any]:
                    return await cache.fetch(ACCOUNT_SERVICE, "me", call, surface="accounts")

                value = await cache.fetch(CATALOG_SERVICE, "all", outer, surface="catalog")
            else:
                value = await cache.fetch(ACCOUNT_SERVICE, "me", call, surface="accounts")
            assert collector is not None
            return value, collector.errors(), started, self.clock()  # when it answered

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def settle(self) -> None:
        """Let every runnable task run as far as it can: a fixed number of loop turns, no
        wall-clock wait, so that every run of a sequence interleaves the same way."""

        async def turns() -> None:
            for _ in range(200):
                await asyncio.sleep(0)

        self.run(turns())

    # Steps.

    @rule(process=st.integers(0, PROCESSES - 1), principal=st.sampled_from(sorted(PARTITIONS)),
          nested=st.booleans())  # fmt: skip
    def fetch(self, process: int, principal: str, nested: bool) -> None:
        self.step += 1
        task = self.loop.create_task(self.request(process, principal, nested, None))
        self.settle()
        if not task.done():  # it joined a call in flight: it answers when that one lands
            self.waiting.append(Flight(task, principal, self.step))
            return
        self.check_done(principal, task)

    @precondition(lambda self: len(self.flights) < 3 and not self.waiting)
    @rule(process=st.integers(0, PROCESSES - 1), principal=st.sampled_from(sorted(PARTITIONS)))
    def start_flight(self, process: int, principal: str) -> None:
        self.step += 1
        gate = asyncio.Event()
        task = self.loop.create_task(self.request(process, principal, False, gate))
        self.settle()  # it reads the upstream, then waits at the gate
        self.flights.append(Flight(task, principal, self.step, gate))

    @precondition(lambda self: bool(self.flights) or bool(self.waiting))
    @rule(which=st.integers(0, 2))
    def land(self, which: int) -> None:
        if not self.flights:  # only joiners left: their calls' gates are theirs to open
            for waiting in self.waiting:
                waiting.gate.set()
            self.flights, self.waiting = self.waiting, []
        self.step += 1
        flight = self.flights.pop(which % len(self.flights))
        flight.gate.set()
        self.settle()
        if flight.task.done():

            async def landed() -> Any:
                return await flight.task

            self.check(flight.principal, landed, started=flight.started)
        else:  # it had joined another call in flight: it answers when that one lands
            self.waiting.append(flight)
        for joined in [w for w in self.waiting if w.task.done()]:
            self.waiting.remove(joined)

            async def answered(task: asyncio.Task[Any] = joined.task) -> Any:
                return await task

            self.check(joined.principal, answered, started=joined.started)

    def check_done(self, principal: str, task: asyncio.Task[Any]) -> None:
        async def result() -> Any:
            return await task

        self.check(principal, result)

    @rule(principal=st.sampled_from(sorted(PARTITIONS)))
    def bump(self, principal: str) -> None:
        self.version[principal] += 1

    @rule()
    def toggle_outage(self) -> None:
        self.down = not self.down

    @rule(seconds=st.sampled_from([0.5, 3, TARGET, 40, MAX_STALE]))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(process=st.integers(0, PROCESSES - 1), soft=st.booleans(),
          principal=st.sampled_from(sorted(PARTITIONS)))  # fmt: skip
    def purge(self, process: int, soft: bool, principal: str) -> None:
        self.step += 1
        control = self.controls[process]
        # By partition: that principal's entries; the catalog's of that partition too.
        self.run(control.invalidate(partition=PARTITIONS[principal], soft=soft))
        self.acknowledge([principal], soft)

    @rule(process=st.integers(0, PROCESSES - 1), soft=st.booleans())
    def purge_upstreams(self, process: int, soft: bool) -> None:
        """Both upstreams (a catalog entry is built from account data)."""
        self.step += 1
        for name in ("account-service", "catalog-service"):
            self.run(self.controls[process].invalidate(upstream=name, soft=soft))
        self.acknowledge(list(PARTITIONS), soft)

    @rule(process=st.integers(0, PROCESSES - 1))
    def refresh(self, process: int) -> None:
        """The operator's refresh of both upstreams, from a request of the operator's own
        partition (the one uncredentialed callers of the host share)."""
        self.step += 1
        with use_collector(AdvisoryCollector(partition=OPERATOR)):
            for name in ("account-service", "catalog-service"):
                self.run(self.controls[process].refresh(upstream=name))
            self.settle()  # the re-run calls land
        self.acknowledge(list(PARTITIONS), soft=True)

    def acknowledge(self, principals: list[str], soft: bool) -> None:
        for principal in principals:
            self.purged[principal] = (self.step, self.version[principal])
            if not soft:
                self.forgotten.add(principal)

    # The invariants, on every answer.

    def check(self, principal: str, make: Any, started: int | None = None) -> None:
        try:
            value, errors, began, now = self.run(make())
        except UpstreamUnavailable:
            return  # a failure is never wrong here (availability is not an invariant)
        began = started if started is not None else began
        assert value["p"] == principal, f"{principal} was served {value['p']}'s data"
        stale = [e for e in errors if e["code"] == "STALE_RESPONSE"]
        names = [e["details"]["upstream"]["name"] for e in stale]
        assert len(names) == len(set(names)), "one advisory per upstream"
        age = now - value["t"]
        purge = self.purged.get(principal)
        after_purge = purge is not None and began > purge[0]
        if not stale:
            assert age < TARGET, f"served {age:g}s old data as fresh (target {TARGET})"
            if after_purge:
                assert value["v"] >= purge[1], (
                    f"fresh answer carries version {value['v']} superseded before the purge "
                    f"(version {purge[1]} then)"
                )
        for advisory in stale:
            details = advisory["details"]
            stated, target = details["cache_age_seconds"], details["freshness_target_seconds"]
            if details["upstream"]["name"] == "account-service":  # the data's own entry
                assert stated >= math.floor(age), f"age understated: {stated} for {age:g}s"
            assert target <= stated <= TARGET + MAX_STALE, (stated, target)
        assert not (after_purge and principal in self.forgotten), (
            f"{principal}'s data served after a hard purge, before any newer answer"
        )
        assert principal in self.ever_answered, "data served that no upstream ever answered"

    @invariant()
    def flights_bounded(self) -> None:
        if hasattr(self, "flights"):
            assert len(self.flights) <= 3


Simulation.TestCase.settings = settings(
    max_examples=int(os.environ.get("SIMULATION_EXAMPLES", "400")),
    stateful_step_count=30,
    deadline=None,
)
test_simulation = Simulation.TestCase
