"""The fetch pipeline's stages, each on its own (issue 23): look up, admit, fly, serve. And the
shape that keeps the hub readable, checked from the source."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, collect_advisories
from adcp_stale_cache.admission import (
    FORCED_FAILURE,
    Admitted,
    Breakers,
    Refused,
    compliance_injector,
)
from adcp_stale_cache.advisory import stale_response
from adcp_stale_cache.breaker import BreakerPolicy
from adcp_stale_cache.collector import AdvisoryCollector, use_collector
from adcp_stale_cache.decision import Fresh, Refresh
from adcp_stale_cache.entry import Entry
from adcp_stale_cache.failures import BUDGET_SPENT, CIRCUIT_OPEN, Failure, UpstreamUnavailable
from adcp_stale_cache.flight import Answer, Flights, Refreshed
from adcp_stale_cache.lookup import MAX_CLOCK_SKEW_SECONDS, Lookups
from adcp_stale_cache.metrics import CacheMetrics
from adcp_stale_cache.policy import FailureKind
from adcp_stale_cache.serving import NOT_FRESH, Serving
from adcp_stale_cache.values import JSON

from .conftest import FakeClock

PRODUCTS = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=60,
                         max_stale_seconds=600, shared_across_callers=False)  # fmt: skip
FORMATS = SurfacePolicy(name="list_creative_formats", field="formats",
                        freshness_target_seconds=60, max_stale_seconds=600,
                        shared_across_callers=True)  # fmt: skip
SURFACES = Surfaces.of(PRODUCTS, FORMATS)
INVENTORY = Upstream(name="inventory")
PACKAGE = Path(__file__).resolve().parents[1] / "adcp_stale_cache"


class Counting(CacheMetrics):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def hit(self, surface: str, upstream: str) -> None:
        self.seen.append(("hit", surface))

    def miss(self, surface: str, upstream: str) -> None:
        self.seen.append(("miss", surface))


def lookups(clock: FakeClock, store: Any = None) -> Lookups:
    return Lookups(store or MemoryStore(clock=clock), SURFACES, clock, "ns")


# 1. Look up.


async def test_look_up_keys_per_caller_unless_a_named_surface_shares(clock: FakeClock) -> None:
    stages = lookups(clock)
    with use_collector(AdvisoryCollector(partition="tenant-a")):
        mine = await stages.look_up(INVENTORY, "k", "get_products", ["t"])
        shared = await stages.look_up(INVENTORY, "k", "list_creative_formats", [])
        unnamed = await stages.look_up(INVENTORY, "k", None, [])
    assert mine.partition == "tenant-a" and not mine.shared
    assert shared.partition is None and shared.shared
    assert unnamed.partition == "tenant-a"  # the default policy never widens sharing
    assert mine.store_key != shared.store_key
    assert "tag=t" in mine.labels and mine.entry is None and isinstance(mine.step, Refresh)


async def test_look_up_plans_a_fresh_hit_and_a_refresh_with_its_fallback(clock: FakeClock) -> None:
    stages = lookups(clock)
    key = stages.store_key(INVENTORY, "k")
    await stages.store.set(key, Entry(b'{"products": []}', clock()), 3600)
    assert isinstance(
        (await stages.look_up(INVENTORY, "k", "list_creative_formats", [])).step, Fresh
    )
    clock.advance(61)
    stale = await stages.look_up(INVENTORY, "k", "list_creative_formats", [])
    assert stale.fallback is not None and stale.previous is stale.fallback


async def test_read_finds_no_entry_in_a_tombstone_a_future_time_or_a_broken_store(
    clock: FakeClock,
) -> None:
    stages = lookups(clock)
    await stages.store.set("dead", Entry(b"", clock(), tombstone=True), 60)
    await stages.store.set("ahead", Entry(b"{}", clock() + MAX_CLOCK_SKEW_SECONDS + 1), 60)
    await stages.store.set("nan", Entry(b"{}", float("nan")), 60)
    assert [await stages.read(k) for k in ("dead", "ahead", "nan")] == [None, None, None]

    class Broken(MemoryStore):
        async def get(self, key: str) -> Entry | None:
            raise OSError("disk gone")

    assert await lookups(clock, Broken()).read("any") is None


# 2. Admit.


async def looked_up(clock: FakeClock, budget: float | None = None) -> Any:
    """A miss of PRODUCTS, in a request with ``budget`` seconds left (None: no budget)."""
    policy = PRODUCTS
    collector = None
    if budget is not None:
        policy = PRODUCTS.model_copy(update={"request_budget_seconds": 10.0})
        collector = AdvisoryCollector(policy)
        collector.started_at -= 10.0 - budget  # spent the rest already
    with use_collector(collector):
        return await lookups(clock).look_up(INVENTORY, "k", policy, [])


async def test_a_spent_budget_refuses_before_the_breaker_and_a_budget_bounds_the_call(
    clock: FakeClock,
) -> None:
    breakers = Breakers(BreakerPolicy(failure_threshold=1), clock, CacheMetrics())
    spent = await looked_up(clock, budget=0)
    assert await breakers.admit(spent) == Refused(BUDGET_SPENT)
    short = await looked_up(clock, budget=0.5)
    admitted = await breakers.admit(short)
    assert isinstance(admitted, Admitted) and admitted.timeout <= 0.5 and admitted.probe is None


async def test_an_open_breaker_refuses_then_lets_one_probe_through(clock: FakeClock) -> None:
    breakers = Breakers(
        BreakerPolicy(failure_threshold=1, cooldown_seconds=5), clock, CacheMetrics()
    )
    found = await looked_up(clock)
    down = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "refused")
    await breakers.report(INVENTORY, down, outage=True)
    assert breakers.is_open(INVENTORY) and breakers.is_open("inventory")
    assert await breakers.admit(found) == Refused(down)
    clock.advance(5)
    probe = await breakers.admit(found)
    assert isinstance(probe, Admitted) and probe.probe is not None
    assert probe.last_failure == down
    assert await breakers.admit(found) == Refused(down)  # one probe at a time
    await breakers.report(INVENTORY, None, outage=False)
    assert not breakers.is_open(INVENTORY)


async def test_no_breakers_admit_every_call_and_a_shared_one_refuses(clock: FakeClock) -> None:
    found = await looked_up(clock)
    assert isinstance(await Breakers(None, clock, CacheMetrics()).admit(found), Admitted)

    class Elsewhere:
        async def open_elsewhere(self, upstream: Upstream) -> Failure:
            return CIRCUIT_OPEN

    shared = Breakers(BreakerPolicy(), clock, CacheMetrics(), Elsewhere())  # type: ignore[arg-type]
    assert await shared.admit(found) == Refused(CIRCUIT_OPEN)


def test_the_compliance_harness_installs_test_modes_injector() -> None:
    injector = compliance_injector()
    assert injector is not None and injector is not compliance_injector()  # one per cache
    outage = injector.force("get_products", "inventory", cache_age_seconds=7)
    claimed = injector.claim(PRODUCTS, INVENTORY, None)
    assert claimed is outage and claimed.cache_age_seconds == 7
    assert FORCED_FAILURE.code == "SERVICE_UNAVAILABLE"


# 3. Fly.


def flights(clock: FakeClock, store: Any = None) -> Flights:
    stages = lookups(clock, store)
    return Flights(stages.store, stages.read, clock, CacheMetrics(),
                   Breakers(None, clock, CacheMetrics()), SURFACES)  # fmt: skip


async def test_a_flight_stores_its_answer_and_callers_share_it(clock: FakeClock) -> None:
    stages, calls = flights(clock), []
    found = await looked_up(clock)

    async def call() -> dict[str, Any]:
        calls.append(1)
        await asyncio.sleep(0.01)
        return {"products": [1]}

    answer = Answer(call, JSON)
    both = [await stages.fly(found, Admitted(5.0), answer) for _ in range(2)]
    results = await asyncio.gather(*both)  # type: ignore[arg-type]
    assert len(calls) == 1 and all(isinstance(r, Refreshed) for r in results)
    assert (await stages.read(found.store_key)) is not None


async def test_a_purge_after_the_flight_read_its_count_keeps_the_answer_out(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    stages = flights(clock, store)
    found = await looked_up(clock)
    gate = asyncio.Event()

    async def call() -> dict[str, Any]:
        await gate.wait()
        return {"products": ["before the purge"]}

    flight = await stages.fly(found, Admitted(5.0), Answer(call, JSON))
    assert flight is not None
    await asyncio.sleep(0)
    await store.purge(lambda key, entry: True, soft=False)  # the count moves
    gate.set()
    refreshed = await flight
    assert refreshed.value == {"products": ["before the purge"]} and refreshed.data is None
    assert await stages.read(found.store_key) is None  # the purge won


async def test_a_probe_or_a_revalidation_window_flies_behind_the_entry(clock: FakeClock) -> None:
    stages = flights(clock)
    looks = lookups(clock, stages.store)
    await stages.store.set(looks.store_key(INVENTORY, "k", None), Entry(b"{}", clock()), 3600)
    clock.advance(61)
    with use_collector(None):
        found = await looks.look_up(INVENTORY, "k", "list_creative_formats", [])
    breaker = Breakers(BreakerPolicy(), clock, CacheMetrics()).of(INVENTORY)

    async def call() -> dict[str, Any]:
        return {"formats": []}

    assert await stages.fly(found, Admitted(5.0, probe=breaker), Answer(call, JSON)) is None
    await asyncio.gather(*stages.tasks)
    assert (await stages.read(found.store_key)).data == b'{"formats":[]}'  # type: ignore[union-attr]


async def test_a_flight_remembers_its_refresh_as_the_request_that_made_it(
    clock: FakeClock,
) -> None:
    stages, remembered = flights(clock), []

    class Memory:
        def remember(self, store_key: str, labels: Any, refresh: Any, weight: int) -> None:
            remembered.append((store_key, refresh, weight))

    stages.memory = Memory()
    seen = []

    async def call() -> dict[str, Any]:
        from adcp_stale_cache.collector import current_collector

        collector = current_collector()
        seen.append(collector.partition if collector is not None else None)
        return {"products": []}

    with use_collector(AdvisoryCollector(partition="tenant-a")):
        found = await lookups(clock, stages.store).look_up(INVENTORY, "k", "get_products", [])
        await (await stages.fly(found, Admitted(5.0), Answer(call, JSON)))  # type: ignore[misc]
    ((key, refresh, weight),) = remembered
    assert key == found.store_key and weight > len(key)
    with use_collector(AdvisoryCollector(partition="operator")):
        await stages.run_now(key, refresh)
    assert seen == ["tenant-a", "tenant-a"]  # never the operator's partition


# 4. Serve.


async def test_serving_a_fresh_hit_and_an_unreadable_one(clock: FakeClock) -> None:
    metrics = Counting()
    serving, looks = Serving(clock, metrics), lookups(clock)
    await looks.store.set(looks.store_key(INVENTORY, "k"), Entry(b'{"formats": [1]}', clock()), 60)
    with use_collector(None):
        hit = await looks.look_up(INVENTORY, "k", "list_creative_formats", [])
    assert serving.fresh(hit, JSON) == {"formats": [1]}
    await looks.store.set(looks.store_key(INVENTORY, "k"), Entry(b"\xff not json", clock()), 60)
    with use_collector(None):
        torn = await looks.look_up(INVENTORY, "k", "list_creative_formats", [])
    assert serving.fresh(torn, JSON) is NOT_FRESH and torn.entry is None
    assert metrics.seen == [("hit", "list_creative_formats"), ("miss", "list_creative_formats")]


async def test_serving_from_cache_tells_the_buyer_or_fails(clock: FakeClock) -> None:
    serving = Serving(clock, CacheMetrics())
    found = await looked_up(clock)
    down = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "refused")
    with collect_advisories() as advisories:
        value = serving.from_cache(found, Entry(b'{"products": [1]}', clock() - 90), down, JSON)
    assert value == {"products": [1]}
    ((advisory,),) = [advisories.errors()]
    assert advisory["code"] == "STALE_RESPONSE" and advisory["details"]["cache_age_seconds"] == 90
    with pytest.raises(UpstreamUnavailable):
        serving.from_cache(found, Entry(b"{}", clock() - 10_000), down, JSON)  # past max-stale
    with pytest.raises(UpstreamUnavailable):
        serving.from_cache(found, None, down, JSON)


def test_every_caller_of_a_flight_gets_its_advisories_and_its_own_copy() -> None:
    down = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "refused")
    advisory = stale_response(INVENTORY, PRODUCTS, 90, down, 60)
    refreshed = Refreshed({"products": []}, b'{"products": []}', (("account", advisory),))
    collector = AdvisoryCollector()
    first = Serving.flown(collector, refreshed, JSON)
    second = Serving.flown(None, refreshed, JSON)
    assert first == second == {"products": []} and first is not second
    assert collector.advisories() == [advisory]


# The shape (issue 23's limits).


def _classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.append((f"{path.relative_to(PACKAGE)}:{node.name}", node))
    return found


def test_the_hub_stays_small_and_fetch_reads_as_its_pipeline() -> None:
    classes = dict(_classes())
    hub = classes["cache.py:UpstreamCache"]
    assert hub.end_lineno - hub.lineno + 1 <= 250  # type: ignore[operator]
    fetch = next(n for n in hub.body if getattr(n, "name", "") == "fetch")
    body = fetch.body[1:]  # type: ignore[attr-defined]  # without its docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 45
    long = {name: n.end_lineno - n.lineno + 1 for name, n in classes.items()}  # type: ignore[operator]
    assert {name: lines for name, lines in long.items() if lines > 300} == {}


def test_no_core_module_imports_the_compliance_harness() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("testing.py", "__init__.py") and path.parent == PACKAGE:
            continue  # the harness itself, and the package that loads it
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").endswith("testing"), path
            if isinstance(node, ast.Import):
                assert not any(a.name.endswith(".testing") for a in node.names), path
