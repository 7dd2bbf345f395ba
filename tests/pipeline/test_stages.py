"""The fetch pipeline's stages, each on its own (issue 23): look up, admit, fly, serve. And the
shape that keeps the hub readable, checked from the source."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import adcp_stale_cache
from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
)
from adcp_stale_cache.core.advisory import stale_response
from adcp_stale_cache.core.decision import Fresh, Refresh
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.failures import BUDGET_SPENT, CIRCUIT_OPEN, Failure, UpstreamUnavailable
from adcp_stale_cache.core.policy import FailureKind
from adcp_stale_cache.core.values import JSON, JsonCodec, Unreadable
from adcp_stale_cache.ops.control import CacheControl
from adcp_stale_cache.pipeline import collector as collector_module
from adcp_stale_cache.pipeline.admission import Admitted, Breakers, Refused
from adcp_stale_cache.pipeline.breaker import Breaker, BreakerPolicy
from adcp_stale_cache.pipeline.collector import AdvisoryCollector, current_collector, use_collector
from adcp_stale_cache.pipeline.flight import Answer, Flights, Refreshed, as_made
from adcp_stale_cache.pipeline.lookup import MAX_CLOCK_SKEW_SECONDS, Hit, Lookup, Lookups
from adcp_stale_cache.pipeline.metrics import CacheMetrics, Fanout
from adcp_stale_cache.pipeline.serving import Serving
from adcp_stale_cache.pipeline.settings import Settings
from adcp_stale_cache.stores.sqlite import SqliteStore

from ..conftest import FakeClock

PRODUCTS = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=60,
                         max_stale_seconds=600, shared_across_callers=False)  # fmt: skip
FORMATS = SurfacePolicy(name="list_creative_formats", field="formats",
                        freshness_target_seconds=60, max_stale_seconds=600,
                        shared_across_callers=True)  # fmt: skip
SURFACES = Surfaces.of(PRODUCTS, FORMATS)
INVENTORY = Upstream(name="inventory")
PACKAGE = Path(__file__).resolve().parents[2] / "adcp_stale_cache"


class Counting(CacheMetrics):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def hit(self, surface: str, upstream: str) -> None:
        self.seen.append(("hit", surface))

    def miss(self, surface: str, upstream: str) -> None:
        self.seen.append(("miss", surface))


def settings(clock: FakeClock, store: Any = None, **options: Any) -> Settings:
    options = {"namespace": "ns", "breaker_clock": clock, **options}
    return Settings(store or MemoryStore(clock=clock), clock, SURFACES, **options)


def lookups(clock: FakeClock, store: Any = None) -> Lookups:
    return Lookups(settings(clock, store))


# 1. Look up.


async def test_look_up_keys_per_caller_unless_a_named_surface_shares(clock: FakeClock) -> None:
    stages = lookups(clock)
    with use_collector(AdvisoryCollector(partition="tenant-a")):
        mine = await stages.look_up(INVENTORY, "k", "get_products", ["t"], JSON)
        shared = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
        unnamed = await stages.look_up(INVENTORY, "k", None, [], JSON)
    assert mine.partition == "tenant-a" and not mine.shared
    assert shared.partition is None and shared.shared
    assert unnamed.partition == "tenant-a"  # the default policy never widens sharing
    assert mine.store_key != shared.store_key
    assert "tag=t" in mine.labels and mine.entry is None and isinstance(mine.step, Refresh)


def test_remembered_store_keys_are_the_keys_made_afresh(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store_key remembers keys by what an upstream is made of and through the object that
    made them: every remembered key is the one made afresh, whichever object asks, and a
    copy with another URL or credentials never takes another's key."""
    import adcp_stale_cache.pipeline.lookup as lookup_module

    monkeypatch.setattr(lookup_module, "_MAX_REMEMBERED_KEYS", 8)
    monkeypatch.setattr(lookup_module, "_MAX_REMEMBERED_UPSTREAMS", 3)
    stages, fresh = lookups(clock), lookups(clock)
    upstreams = [
        INVENTORY,
        Upstream(name="inventory"),  # the same, built again (as per request)
        INVENTORY.model_copy(update={"url": "https://other.example/mcp"}),
        Upstream(name="inventory", url="https://inv.example/mcp?tenant=a"),
        Upstream(name="inventory", url="https://inv.example/mcp?tenant=b"),
        Upstream(name="inventory", credentials="token-a"),
        Upstream(name="inventory", credentials="token-b"),
        Upstream(name="creative"),
    ]
    made = set()
    for _ in range(3):  # past both bounds, so remembered keys are forgotten and remade
        for upstream in upstreams:
            for key in ("k", "j", "x" * 2000):
                for partition in (None, "tenant-a", "tenant-b"):
                    fresh._by_made_of, fresh._seen = {}, {}  # never remembered
                    expected = fresh.store_key(upstream, key, partition)
                    assert stages.store_key(upstream, key, partition) == expected
                    made.add((id(upstream), key, partition, expected))
    assert stages.store_key(INVENTORY, "k") == stages.store_key(upstreams[1], "k")
    assert len({key for *_, key in made}) == 3 * 3 * (len(upstreams) - 1)  # 0 and 1 alike
    assert stages.store_key(INVENTORY, 1) != stages.store_key(INVENTORY, True)


async def test_a_mutable_upstream_subclass_never_keeps_a_tenants_key(clock: FakeClock) -> None:
    """Found by a hostile review: one Upstream object reused across requests, its credentials
    set per tenant (a subclass that is not frozen), was keyed as the first tenant once its
    keys were remembered through the object: tenant B read tenant A's entry."""
    from pydantic import ConfigDict, SecretStr

    class TenantUpstream(Upstream):
        model_config = ConfigDict(frozen=False, validate_assignment=True)

    stages, fresh = lookups(clock), lookups(clock)
    upstream = TenantUpstream(name="inventory", url="https://inv.example/mcp")
    for credentials in (None, "token-a", "token-b", None):
        upstream.credentials = None if credentials is None else SecretStr(credentials)
        fresh._by_made_of, fresh._seen = {}, {}
        assert stages.store_key(upstream, "accounts") == fresh.store_key(upstream, "accounts")
    upstream.url = "https://other.example/mcp"
    fresh._by_made_of, fresh._seen = {}, {}
    assert stages.store_key(upstream, "accounts") == fresh.store_key(upstream, "accounts")


async def test_look_up_plans_a_fresh_hit_and_a_refresh_with_its_fallback(clock: FakeClock) -> None:
    stages = lookups(clock)
    key = stages.store_key(INVENTORY, "k")
    await stages.store.set(key, Entry(b'{"products": []}', clock()), 3600)
    hit = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    assert isinstance(hit, Hit) and isinstance(hit.step, Fresh) and hit.value == {"products": []}
    clock.advance(61)
    stale = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
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


async def test_a_memory_store_subclass_get_is_what_a_look_up_awaits(clock: FakeClock) -> None:
    """Look-ups read the memory store in place (no coroutine), but never a subclass's: its
    ``get`` may add what a seller needs (a fault, a count), and is awaited."""
    read: list[str] = []

    class Counting(MemoryStore):
        async def get(self, key: str) -> Entry | None:
            read.append(key)
            return await super().get(key)

    for store in (MemoryStore(clock=clock), Counting(clock=clock)):
        stages = lookups(clock, store)
        await store.set(stages.store_key(INVENTORY, "k"), Entry(b'{"a": 1}', clock()), 60)
        hit = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
        assert isinstance(hit, Hit) and hit.value == {"a": 1}
        miss = await stages.look_up(INVENTORY, "other", "list_creative_formats", [], JSON)
        assert isinstance(miss, Lookup) and miss.entry is None
    assert read == [stages.store_key(INVENTORY, "k"), stages.store_key(INVENTORY, "other")]


# 2. Admit.


async def looked_up(clock: FakeClock, budget: float | None = None, held: bool = False) -> Any:
    """A look-up of PRODUCTS (a miss, or with a stale entry ``held``), in a request with
    ``budget`` seconds left (None: no budget)."""
    policy = PRODUCTS
    collector = None
    stages = lookups(clock)
    if held:
        store_key = stages.store_key(INVENTORY, "k", None)
        await stages.store.set(store_key, Entry(b"{}", clock() - 120), 3600)
    if budget is not None:
        policy = PRODUCTS.model_copy(update={"request_budget_seconds": 10.0})
        collector = AdvisoryCollector(policy)
        collector.context.budget.started_at = time.monotonic() - (10.0 - budget)  # spent the rest
    with use_collector(collector):
        return await stages.look_up(INVENTORY, "k", policy, [], JSON)


async def test_each_re_run_of_a_remembered_refresh_has_a_budget_of_its_own() -> None:
    policy = PRODUCTS.model_copy(update={"request_budget_seconds": 10.0})
    origin = AdvisoryCollector(policy, partition="tenant-a")
    origin.context.budget.started_at = time.monotonic() - 10.0  # its request spent it all
    seen: list[tuple[str | None, float]] = []

    async def refresh(before: object = None) -> None:
        context = current_collector().context  # type: ignore[union-attr]
        left = context.budget_left(policy)
        assert left is not None
        seen.append((context.partition, left))
        context.budget.started_at = time.monotonic() - 10.0  # this run spends all of it

    again = as_made(origin, refresh)
    await again(None)
    await again(None)
    assert [partition for partition, _ in seen] == ["tenant-a", "tenant-a"]
    assert all(left > 9.0 for _, left in seen), seen


async def test_a_spent_budget_refuses_before_the_breaker_and_a_budget_bounds_the_call(
    clock: FakeClock,
) -> None:
    breakers = Breakers(settings(clock, breaker=BreakerPolicy(failure_threshold=1)))
    spent = await looked_up(clock, budget=0, held=True)
    assert await breakers.admit(spent) == Refused(BUDGET_SPENT)
    short = await looked_up(clock, budget=0.5, held=True)
    admitted = await breakers.admit(short)
    assert isinstance(admitted, Admitted) and admitted.timeout <= 0.5 and admitted.probe is None


async def test_with_nothing_to_serve_a_spent_budget_still_calls_within_the_deadline(
    clock: FakeClock,
) -> None:
    breakers = Breakers(settings(clock, breaker=BreakerPolicy(failure_threshold=1)))
    cold = await looked_up(clock, budget=0)
    admitted = await breakers.admit(cold)
    assert isinstance(admitted, Admitted) and admitted.timeout == cold.timeout


async def test_an_open_breaker_refuses_then_lets_one_probe_through(clock: FakeClock) -> None:
    policy = BreakerPolicy(failure_threshold=1, cooldown_seconds=5)
    breakers = Breakers(settings(clock, breaker=policy))
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
    assert isinstance(await Breakers(settings(clock, breaker=None)).admit(found), Admitted)

    class Elsewhere:
        async def open_elsewhere(self, upstream: Upstream) -> Failure:
            return CIRCUIT_OPEN

    shared = Breakers(settings(clock, shared_breakers=Elsewhere()))
    assert await shared.admit(found) == Refused(CIRCUIT_OPEN)


async def test_look_up_misses_a_fresh_entry_it_cannot_read(clock: FakeClock) -> None:
    stages = lookups(clock)
    await stages.store.set(stages.store_key(INVENTORY, "k"), Entry(b"\xff not json", clock()), 60)
    torn = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    assert not isinstance(torn, Hit) and torn.miss and torn.fallback is None
    assert torn.entry is not None  # as held: what an injected outage ages (see testing)
    again = await stages.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    assert not isinstance(again, Hit) and again.step is not torn.step  # each its own plan


async def test_test_mode_wraps_the_pipeline_from_outside(clock: FakeClock) -> None:
    from adcp_stale_cache.testing import FORCED_FAILURE, ComplianceFetch, ForcedOutages

    plain, sandbox = hub(clock), hub(clock, test_mode=True)
    assert "fetch" not in vars(plain) and plain.outages is None  # the pipeline, as it is
    assert type(sandbox).fetch.__module__ == "adcp_stale_cache.testing"  # between, not inside
    assert isinstance(sandbox._compliance, ComplianceFetch)  # type: ignore[attr-defined]
    assert (
        isinstance(sandbox.outages, ForcedOutages) and FORCED_FAILURE.code == "SERVICE_UNAVAILABLE"
    )

    class Audited(UpstreamCache):
        fetched = 0

        async def fetch(self, *args: Any, **kwargs: Any) -> Any:
            self.fetched += 1
            return await super().fetch(*args, **kwargs)

    cache = Audited(MemoryStore(clock=clock), surfaces=Surfaces.of(SWR), test_mode=True)

    async def call() -> dict[str, Any]:
        return {"products": [1]}

    assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {"products": [1]}
    assert cache.fetched == 1  # no outage claimed it: the subclass's own fetch answered
    cache.force_upstream_unavailable("get_products", "inventory", cache_age_seconds=70)
    with collect_advisories() as advisories:
        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {"products": [1]}
    assert cache.fetched == 2  # the subclass's fetch first, then the outage under it
    assert advisories.errors()[0]["details"]["cache_age_seconds"] == 70


# 3. Fly.


def flights(clock: FakeClock, store: Any = None) -> Flights:
    built = settings(clock, store, breaker=None)
    return Flights(built, Lookups(built).read, Breakers(built))


async def test_a_flight_stores_its_answer_and_callers_share_it(clock: FakeClock) -> None:
    stages, calls = flights(clock), []
    found = await looked_up(clock)

    async def call() -> dict[str, Any]:
        calls.append(1)
        await asyncio.sleep(0.01)
        return {"products": [1]}

    answer = Answer(call, JSON)
    both = [(await stages.fly(found, Admitted(5.0), answer))[0] for _ in range(2)]
    results = await asyncio.gather(*both)
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

    flight, behind = await stages.fly(found, Admitted(5.0), Answer(call, JSON))
    assert not behind
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
        found = await looks.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    breaker = Breaker(BreakerPolicy())

    async def call() -> dict[str, Any]:
        return {"formats": []}

    _, behind = await stages.fly(found, Admitted(5.0, probe=breaker), Answer(call, JSON))
    assert behind
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
        from adcp_stale_cache.pipeline.collector import current_collector

        collector = current_collector()
        seen.append(collector.partition if collector is not None else None)
        return {"products": []}

    with use_collector(AdvisoryCollector(partition="tenant-a")):
        found = await lookups(clock, stages.store).look_up(INVENTORY, "k", "get_products", [], JSON)
        await (await stages.fly(found, Admitted(5.0), Answer(call, JSON)))[0]
    ((key, refresh, weight),) = remembered
    assert key == found.store_key and weight > len(key)
    with use_collector(AdvisoryCollector(partition="operator")):
        await stages.run_now(key, refresh)
    assert seen == ["tenant-a", "tenant-a"]  # never the operator's partition


# 4. Serve.


async def test_serving_a_hit_counts_it_and_an_unreadable_entry_behind_is_no_answer(
    clock: FakeClock,
) -> None:
    metrics = Counting()
    serving, looks = Serving(settings(clock, metrics=Fanout(metrics))), lookups(clock)
    await looks.store.set(looks.store_key(INVENTORY, "k"), Entry(b'{"formats": [1]}', clock()), 60)
    with use_collector(None):
        hit = await looks.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    assert isinstance(hit, Hit) and serving.hit(hit, JSON) == {"formats": [1]}
    assert metrics.seen == [("hit", "list_creative_formats")]
    clock.advance(61)
    await looks.store.set(looks.store_key(INVENTORY, "k"), Entry(b"\xff", clock() - 61), 60)
    with use_collector(None):
        torn = await looks.look_up(INVENTORY, "k", "list_creative_formats", [], JSON)
    assert isinstance(torn, Lookup) and torn.fallback is not None
    with pytest.raises(Unreadable):  # then the refresh behind it is the answer
        serving.behind(torn, None, JSON)
    with pytest.raises(UpstreamUnavailable):  # with nothing after it, the failure
        serving.from_cache(torn, torn.fallback, None, JSON)


async def test_serving_from_cache_tells_the_buyer_or_fails(clock: FakeClock) -> None:
    serving = Serving(settings(clock))
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


async def test_every_caller_of_a_flight_gets_its_advisories_and_its_own_copy(
    clock: FakeClock,
) -> None:
    down = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "refused")
    advisory = stale_response(INVENTORY, PRODUCTS, 90, down, 60)
    refreshed = Refreshed(JSON, {"products": []}, b'{"products": []}', (("account", advisory),))
    collector, serving = AdvisoryCollector(), Serving(settings(clock))
    with use_collector(collector):
        first = serving.flown(await lookups(clock).look_up(INVENTORY, "k", PRODUCTS, [], JSON),
                              refreshed, JSON)  # fmt: skip
    second = serving.flown(await looked_up(clock), refreshed, JSON)
    assert first == second == {"products": []} and first is not second
    assert collector.advisories() == [advisory]


# The hub as users extend and reconfigure it (what a hostile review of the stages found).

SWR = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=10,
                    max_stale_seconds=1000, stale_while_revalidate=True)  # fmt: skip


def hub(clock: FakeClock, policy: SurfacePolicy = SWR, **options: Any) -> UpstreamCache:
    return UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(policy), clock=clock,
                         **options)  # fmt: skip


async def test_a_reused_tags_list_labels_each_entry_as_of_its_call(clock: FakeClock) -> None:
    cache, tags = hub(clock), []

    async def call() -> dict[str, Any]:
        return {"products": [clock()]}

    for _ in range(2):
        for account in ("acct-1", "acct-2"):
            tags[:] = [account]  # one list, reused
            await cache.fetch(INVENTORY, account, call, surface="get_products", tags=tags)
        clock.advance(20)  # the second pass refreshes behind each answer
    await asyncio.gather(*cache.flights.tasks)
    entry = await cache.store.get(cache.store_key(INVENTORY, "acct-1"))
    assert entry is not None and "tag=acct-1" in entry.labels
    assert await CacheControl(cache).invalidate(tags=["acct-1"], soft=False) == 1


async def test_a_subclass_store_key_keys_every_fetch_and_purge(clock: FakeClock) -> None:
    region: dict[str, str] = {}

    class Regional(UpstreamCache):
        def store_key(self, upstream: Upstream, key: object, partition: str | None = None) -> str:
            return super().store_key(upstream, (region["now"], key), partition)

    cache = Regional(MemoryStore(clock=clock), surfaces=Surfaces.of(SWR), clock=clock)
    for name in ("eu", "us"):
        region["now"] = name

        async def call(name: str = name) -> dict[str, Any]:
            return {"products": [name]}

        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {
            "products": [name]
        }
    assert await CacheControl(cache).invalidate(key="k", upstream=INVENTORY) == 1


async def test_settings_given_at_construction_reach_every_stage(clock: FakeClock) -> None:
    class Gone(Exception):
        pass

    class Seen(CacheMetrics):
        def __init__(self) -> None:
            self.failures: list[str] = []

        def upstream_failure(self, upstream: str, code: str) -> None:
            self.failures.append(code)

    seen, meaning = Seen(), {Gone: "SERVICE_UNAVAILABLE"}
    cache = hub(clock, PRODUCTS, metrics=seen, failure_types=meaning, tracing=False)
    assert cache.lookups.store is cache.flights.store is cache.store
    answers = iter([{"products": [1]}])

    async def call() -> dict[str, Any]:
        answer = next(answers, None)
        if answer is None:
            raise Gone
        return answer

    with use_collector(AdvisoryCollector(partition="p")):
        await cache.fetch(INVENTORY, "k", call, surface="get_products")
        clock.advance(61)
        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {"products": [1]}
    assert len(await cache.store.scan()) == 1  # type: ignore[attr-defined]
    assert seen.failures == ["SERVICE_UNAVAILABLE"]  # the flight classified it with the mapping


# The hub's settings (every keyword it is built with: a new one cannot be forgotten), and the
# names some had before the stages had modules.
SETTINGS = ["settings", *list(inspect.signature(UpstreamCache.__init__).parameters)[1:]]
OLD_NAMES = "breaker_policy coordinate_refreshes strict_advisories refreshers"


@pytest.mark.parametrize("name", [*SETTINGS, *OLD_NAMES.split()])
def test_a_setting_assigned_after_construction_fails_loudly(clock: FakeClock, name: str) -> None:
    """A stage took each setting when it was built: an assignment would reach none of them."""
    cache = hub(clock, PRODUCTS)
    with pytest.raises(AttributeError):
        setattr(cache, name, None)


@pytest.mark.parametrize("name", ["lookups", "breakers", "flights", "serving", "lanes"])
def test_a_stage_is_never_replaced_after_construction(clock: FakeClock, name: str) -> None:
    cache = hub(clock, PRODUCTS)
    with pytest.raises(AttributeError, match="is fixed: a stage, built once from the settings"):
        setattr(cache, name, None)


def test_the_old_names_are_gone_and_their_settings_read_where_they_live(
    clock: FakeClock,
) -> None:
    cache = hub(clock, PRODUCTS, coordinate_refreshes=True, strict_advisories=True, breaker=None)
    for old in [*OLD_NAMES.split(), "refresh_soon_all"]:
        assert not hasattr(cache, old), old
    assert cache.settings.coordinate_refreshes and cache.flights.lease
    assert cache.settings.strict_advisories and cache.serving.strict_advisories
    assert cache.settings.breaker is None and cache.breakers.policy is None
    assert not hasattr(adcp_stale_cache, "attributes")
    for moved in ("FORCED_FAILURE", "ForcedOutage", "ForcedOutages"):  # now in testing only
        assert not hasattr(adcp_stale_cache.pipeline.cache, moved), moved
    with pytest.raises(ImportError):
        importlib.import_module("adcp_stale_cache.attributes")


async def test_a_sink_reported_to_hears_every_stage_and_the_metrics_stay(
    clock: FakeClock,
) -> None:
    class Heard(CacheMetrics):
        def __init__(self) -> None:
            self.events: list[str] = []

        def hit(self, surface: str, upstream: str) -> None:
            self.events.append("hit")  # served fresh (bound straight to a lone sink)

        def miss(self, surface: str, upstream: str) -> None:
            self.events.append("miss")  # looked up (serving reports it)

        def upstream_failure(self, upstream: str, code: str) -> None:
            self.events.append("failure")  # the flight's

        def breaker(self, upstream: str, is_open: bool) -> None:
            self.events.append("breaker")  # the breakers'

        def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
            self.events.append("stale")  # served

    given, attached = Heard(), Heard()
    cache = hub(clock, PRODUCTS, metrics=given, tracing=False)
    cache.report_to(attached)
    down = {"now": False}

    async def call() -> dict[str, Any]:
        if down["now"]:
            raise ConnectionRefusedError
        return {"products": [1]}

    with use_collector(AdvisoryCollector(partition="p")):
        await cache.fetch(INVENTORY, "k", call, surface="get_products")
        await cache.fetch(INVENTORY, "k", call, surface="get_products")
        clock.advance(61)
        down["now"] = True
        await cache.fetch(INVENTORY, "k", call, surface="get_products")
    assert {"hit", "miss", "failure", "breaker", "stale"} <= set(attached.events)
    assert attached.events == given.events


def _reachable(root: object, stop: tuple[type, ...]) -> list[object]:
    """Every object ``root`` keeps alive, short of modules, classes and ``stop``'s."""
    import gc
    import sys

    modules = {id(m.__dict__) for m in list(sys.modules.values()) if m is not None}
    seen, stack, found = set(), [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, *stop)) or id(obj) in modules:
            continue
        seen.add(id(obj))
        found.append(obj)
        stack.extend(gc.get_referents(obj))
    return found


async def test_a_remembered_refresh_keeps_no_request_or_held_entry_alive(
    clock: FakeClock,
) -> None:
    from adcp_stale_cache.pipeline.flight import Flights
    from adcp_stale_cache.pipeline.lookup import Lookups

    cache = hub(clock, PRODUCTS)
    control = CacheControl(cache)

    async def call() -> dict[str, Any]:
        return {"products": ["x" * 100_000]}

    for _ in range(2):  # the second round refreshes a held entry
        with use_collector(AdvisoryCollector(partition="p")):
            await cache.fetch(INVENTORY, "k", call, surface="get_products")
        clock.advance(61)
    kept = _reachable(control.recent, (UpstreamCache, Flights, Lookups, Serving, MemoryStore))
    assert not [o for o in kept if isinstance(o, AdvisoryCollector)]
    assert sum(len(o) for o in kept if isinstance(o, bytes)) < 10_000  # no held entry


async def test_a_probe_cancelled_before_its_flight_gives_its_slot_back(clock: FakeClock) -> None:
    class SlowCount(MemoryStore):
        slow = False

        async def generation(self) -> object:
            if self.slow:
                await asyncio.sleep(0.05)
            return await super().generation()

    store = SlowCount(clock=clock)
    cache = UpstreamCache(store, surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=5))  # fmt: skip
    state = {"down": False}

    async def call() -> dict[str, Any]:
        if state["down"]:
            raise ConnectionError
        return {"products": [1]}

    with use_collector(AdvisoryCollector(partition="p")):
        await cache.fetch(INVENTORY, "k", call, surface="get_products")
        clock.advance(61)
        state["down"] = True
        await cache.fetch(INVENTORY, "k", call, surface="get_products")  # opens the breaker
        clock.advance(10)
        state["down"], store.slow = False, True
        probe = asyncio.ensure_future(cache.fetch(INVENTORY, "k", call, surface="get_products"))
        await asyncio.sleep(0.01)
        probe.cancel()  # the buyer hangs up while the probe reads the purge count
        await asyncio.gather(probe, return_exceptions=True)
        store.slow = False
        await cache.fetch(INVENTORY, "k", call, surface="get_products")  # the next one probes
        await asyncio.gather(*cache.flights.tasks)
    assert not cache.breaker_open(INVENTORY)


async def test_an_unreadable_entry_behind_a_revalidation_waits_for_the_refresh(
    clock: FakeClock,
) -> None:
    class Drifting:
        broken = False

        def dumps(self, value: Any) -> bytes:
            return json.dumps(value).encode()

        def loads(self, data: bytes) -> Any:
            if self.broken:
                raise ValueError("schema drift")
            return json.loads(data)

    cache, codec = hub(clock), Drifting()

    async def call() -> dict[str, Any]:
        return {"products": [clock()]}

    await cache.fetch(INVENTORY, "k", call, surface="get_products", codec=codec)  # type: ignore[arg-type]
    codec.broken = True  # the held entry can no longer be read; the upstream is healthy
    clock.advance(20)
    answer = await cache.fetch(INVENTORY, "k", call, surface="get_products", codec=codec)  # type: ignore[arg-type]
    assert answer == {"products": [clock()]}  # the refresh's own answer, never "unavailable"


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
    hub = classes["pipeline/cache.py:UpstreamCache"]
    assert hub.end_lineno - hub.lineno + 1 <= 280  # type: ignore[operator]
    assert len((PACKAGE / "pipeline/cache.py").read_text().splitlines()) <= 280  # its module too
    fetch = next(n for n in hub.body if getattr(n, "name", "") == "fetch")
    body = fetch.body[1:]  # type: ignore[attr-defined]  # without its docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 45
    long = {name: n.end_lineno - n.lineno + 1 for name, n in classes.items()}  # type: ignore[operator]
    assert {name: lines for name, lines in long.items() if lines > 300} == {}


def _imports_of_testing() -> set[str]:
    """Where the package imports its compliance harness: "module:function" ("" at the top)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        owner = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if (module or "").endswith("testing") or any(n.endswith(".testing") for n in names):
                scope: ast.AST = node
                while scope in owner and not isinstance(scope, ast.FunctionDef):
                    scope = owner[scope]
                found.add(f"{path.relative_to(PACKAGE)}:{getattr(scope, 'name', '')}")
    return found


def test_only_test_mode_reaches_the_compliance_harness_lazily() -> None:
    assert _imports_of_testing() == {"pipeline/cache.py:_test_mode"}  # never __init__, nor a stage
    script = "import sys, adcp_stale_cache as a; a.UpstreamCache(); print('.testing' in str(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "False"


def _module(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name).read_text())


def _function(tree: ast.AST, name: str) -> ast.AST:
    return next(n for n in ast.walk(tree) if getattr(n, "name", None) == name)


def test_fetch_runs_one_way_with_no_sentinel() -> None:
    fetch = _function(_module("pipeline/cache.py"), "fetch")
    identity = [n for n in ast.walk(fetch) if isinstance(n, (ast.Is, ast.IsNot))]
    assert identity == []  # each stage's result taken as it is, never tested against a marker
    serving = _module("pipeline/serving.py")
    imports = [n for n in ast.walk(serving) if isinstance(n, ast.ImportFrom)]
    from_flight = {a.name for n in imports if n.module == "flight" for a in n.names}
    assert from_flight <= {"Refreshed"}  # the flight's result, never the stage
    called = {n.attr for n in ast.walk(serving) if isinstance(n, ast.Attribute)}
    named = {n.id for n in ast.walk(serving) if isinstance(n, ast.Name)}
    named |= {n.arg for n in ast.walk(serving) if isinstance(n, ast.arg)}
    assert not called & {"flights", "seed", "fly", "latest"} and not named & {"Flights", "flights"}


def test_no_stage_changes_the_look_up_it_was_handed() -> None:
    for name in (
        "pipeline/admission.py",
        "pipeline/flight.py",
        "pipeline/serving.py",
        "pipeline/cache.py",
        "testing.py",
    ):
        for node in ast.walk(_module(name)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name):
                        assert part.value.id != "found", f"{name}: found.{part.attr} assigned"


# Interleavings the simulation (tests/e2e/test_simulation.py) found, as plain examples.


async def test_purging_what_a_composite_was_built_from_purges_the_composite(
    clock: FakeClock,
) -> None:
    accounts = SurfacePolicy(name="accounts", field="accounts", freshness_target_seconds=60,
                             max_stale_seconds=600)  # fmt: skip
    catalog = SurfacePolicy(name="catalog", field="catalog", freshness_target_seconds=60,
                            max_stale_seconds=600)  # fmt: skip
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(accounts, catalog),
                          clock=clock, breaker=None)  # fmt: skip
    version = {"now": 0}

    async def account() -> dict[str, Any]:
        return {"v": version["now"]}

    async def composite() -> dict[str, Any]:
        return {"built_from": await cache.fetch(INVENTORY, "me", account, surface="accounts")}

    async def ask() -> Any:
        with use_collector(AdvisoryCollector(partition="tenant-c")):
            return await cache.fetch(Upstream(name="catalog"), "all", composite, surface="catalog")

    with use_collector(AdvisoryCollector(partition="tenant-c")):
        await cache.fetch(INVENTORY, "me", account, surface="accounts")  # warmed first
    assert await ask() == {"built_from": {"v": 0}}  # built from the warmed entry
    version["now"] = 1
    assert await CacheControl(cache).invalidate(surface="accounts", soft=False) == 2
    assert await ask() == {"built_from": {"v": 1}}  # never the composite of purged data


@pytest.mark.parametrize("kind", ["memory", "file", "redis"])
async def test_a_hard_purge_of_a_key_takes_what_was_built_from_it(
    kind: str, tmp_path: Path
) -> None:
    """Found by the simulation on Redis: an operator's hard purge of one account entry (by
    key) left the catalog answer built from it a fresh hit: a key selected that key alone,
    while purges by surface, upstream, partition or tag reached the composite by the labels
    it carries. Entries built from others now carry ``from=<their key>`` too."""
    server = None
    if kind == "redis":
        pytest.importorskip("redis.asyncio", reason="the redis extra is needed")
        from adcp_stale_cache.stores.redis import RedisStore

        from ..redis_server import RedisServer

        server = RedisServer().start()
        store: Any = RedisStore(url=server.url)
    else:
        store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "cache.db")
    accounts = SurfacePolicy(name="accounts", freshness_target_seconds=600, max_stale_seconds=600)
    catalog = SurfacePolicy(name="catalog", freshness_target_seconds=600, max_stale_seconds=600)
    cache = UpstreamCache(store, surfaces=Surfaces.of(accounts, catalog), breaker=None)
    account_service, version = Upstream(name="account-service"), {"now": 1}

    async def account() -> dict[str, Any]:
        return {"v": version["now"]}

    async def composite() -> dict[str, Any]:
        return {"acct": await cache.fetch(account_service, "me", account, surface="accounts")}

    async def ask(partition: str) -> Any:
        with use_collector(AdvisoryCollector(partition=partition)):
            return await cache.fetch(Upstream(name="catalog"), "all", composite, surface="catalog")

    try:
        assert await ask("pc") == await ask("pd") == {"acct": {"v": 1}}
        version["now"] = 2
        taken = await CacheControl(cache).invalidate(
            upstream=account_service, key="me", partition="pc", soft=False
        )
        assert taken == 2  # the account entry and the catalog answer built from it
        assert await ask("pc") == {"acct": {"v": 2}}  # never the composite of purged data
        assert await ask("pd") == {"acct": {"v": 1}}  # another caller's: not selected
    finally:
        if server is not None:
            await store.aclose()
            server.kill()
        elif kind == "file":
            store.close()


async def test_a_flight_that_could_not_read_the_purge_count_never_stores_over_a_purge(
    clock: FakeClock,
) -> None:
    class Unreachable(MemoryStore):
        down = False

        async def generation(self) -> object:
            return None if self.down else await super().generation()

    store = Unreachable(clock=clock)
    cache = UpstreamCache(store, surfaces=Surfaces.of(PRODUCTS), clock=clock, breaker=None)
    gate, version = asyncio.Event(), {"now": 0}

    async def held() -> dict[str, Any]:
        read = version["now"]
        await gate.wait()
        return {"products": [read]}

    async def call() -> dict[str, Any]:
        return {"products": [version["now"]]}

    store.down = True  # the store's count cannot be read as the flight starts
    with use_collector(AdvisoryCollector(partition="p")):
        flight = asyncio.ensure_future(cache.fetch(INVENTORY, "k", held, surface="get_products"))
        await asyncio.sleep(0.01)
        store.down = False  # back: the operator purges, a newer answer is stored
        version["now"] = 1
        await CacheControl(cache).invalidate(upstream=INVENTORY, soft=False)
        clock.advance(1)
        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {"products": [1]}
        gate.set()
        assert await flight == {"products": [0]}  # its own callers get what it read
        clock.advance(1)
        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {"products": [1]}


async def test_an_answer_built_from_a_fresh_hit_is_as_old_as_that_hit(clock: FakeClock) -> None:
    """Found by the simulation (in-process, 15,000 sequences): a catalog answer built, at
    9.5 s, from an account entry stored at 0 s (a fresh hit, target 10 s) was stored as 0 s
    old, and served as fresh until 19.5 s: data up to twice the target old, as fresh. It is
    now stored as old as the oldest entry it read (its terms' age, as an upstream's ``Age``
    would say): fresh while that data is within the target."""
    accounts = SurfacePolicy(name="accounts", freshness_target_seconds=10, max_stale_seconds=600)
    catalog = SurfacePolicy(name="catalog", freshness_target_seconds=10, max_stale_seconds=600)
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(accounts, catalog),
                          breaker=None, clock=clock)  # fmt: skip
    account_service, calls = Upstream(name="account-service"), {"account": 0, "catalog": 0}

    async def account() -> dict[str, Any]:
        calls["account"] += 1
        return {"read_at": clock.now}

    async def composite() -> dict[str, Any]:
        calls["catalog"] += 1
        return {"acct": await cache.fetch(account_service, "me", account, surface="accounts")}

    async def ask() -> Any:
        return await cache.fetch(Upstream(name="catalog"), "all", composite, surface="catalog")

    await cache.fetch(account_service, "me", account, surface="accounts")  # at 0 s
    clock.advance(9.5)
    assert await ask() == {"acct": {"read_at": 1000.0}}  # built from the fresh hit
    clock.advance(1.0)  # the account data is 10.5 s old: past the target
    answer = await ask()
    assert calls["catalog"] == 2, "data past its target served as a fresh hit"
    assert clock.now - answer["acct"]["read_at"] < 10


def test_no_module_imports_a_private_name_from_another() -> None:
    crossing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if _private(a.name)]
                crossing += [f"{path.relative_to(PACKAGE)}: {name}" for name in private]
    assert crossing == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def test_no_codec_or_store_is_probed_with_getattr() -> None:
    # What they may offer is declared as protocols (core/values.py, stores/base.py): isinstance.
    probed = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr"):
                subject = ast.unparse(node.args[0]).split(".")[-1]
                if subject in {"codec", "store", "tier", "far", "near"}:
                    probed.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert probed == []


#: The layers, bottom up (docs/concepts.md, Layers): a module imports its own folder and the
#: layers below; folders of one layer import each other only at the top ("." is the top level).
LAYERS = (
    "core",
    "codecs stores",
    "pipeline",
    "adcp asgi ops",
    "integrations",
    ". conformance demo",
)
#: Test mode loads its harness lazily, only when a cache asks for it (see the test above).
AGAINST_THE_LAYERS = {"pipeline/cache.py -> adcp_stale_cache.testing"}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else "."


def _imports(path: Path) -> list[str]:
    """The package's modules ``path`` imports, relative imports resolved."""
    relative = path.relative_to(PACKAGE)
    package = ["adcp_stale_cache", *relative.parts[:-1]]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.append(".".join([*base, *([node.module] if node.module else [])]))
    return [name for name in found if name.split(".")[0] == "adcp_stale_cache"]


def test_imports_go_down_the_layers_only() -> None:
    rank = {folder: i for i, layer in enumerate(LAYERS) for folder in layer.split()}
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert folders <= set(rank)  # a new folder takes its place in LAYERS
    against = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.relative_to(PACKAGE)
        mine = source.parts[0] if len(source.parts) > 1 else "."
        for module in _imports(path):
            theirs = _folder(module)
            if theirs == mine or rank[theirs] < rank[mine] or rank[mine] == len(LAYERS) - 1:
                continue
            against.add(f"{source.as_posix()} -> {module}")
    assert against == AGAINST_THE_LAYERS


def test_the_request_state_is_split_by_owner() -> None:
    # The advisories, the request's context (its front door's) and what was served (the trace).
    slots = set(AdvisoryCollector.__slots__)
    assert slots == {"_by_upstream", "closed", "context", "trace", "unsettled"}
    front_doors = {"pipeline/collector.py", "asgi/middleware.py", "asgi/peek.py"}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() in front_doors:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            for target in node.targets if isinstance(node, ast.Assign) else ():
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute):
                    assert target.value.attr != "context", f"{path.name} writes a context"


def test_a_trace_is_made_on_its_first_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # Most requests are served nothing to trace: they share one blank, which no write reaches.
    first, second = AdvisoryCollector(), AdvisoryCollector()
    assert first.trace is second.trace and not first.trace.served_context
    with pytest.raises(AttributeError, match="traced"):
        first.trace.served_context = True
    first.traced().served_context = True
    assert first.traced() is first.trace and first.trace.served_context
    assert not second.trace.served_context and not AdvisoryCollector().trace.served_context

    # Threads of one request writing at once make one trace: no write lands on a lost one.
    class SlowTrace(collector_module.Trace):
        def __init__(self) -> None:
            time.sleep(0.002)  # every thread between its look and its write

    monkeypatch.setattr(collector_module, "Trace", SlowTrace)
    shared, start = AdvisoryCollector(), threading.Barrier(8)

    def write() -> Any:
        start.wait(timeout=10)
        return shared.traced()

    with ThreadPoolExecutor(8) as pool:
        traces = list(pool.map(lambda _: write(), range(8)))
    assert all(trace is shared.trace for trace in traces)


#: The package's folders as tests/ names them: a tests/adcp package would hide the adcp SDK.
TESTS_OF = {"adcp": "protocol"}
#: Test folders beyond the package's: whole stacks end to end, and the project itself.
BEYOND_THE_PACKAGE = {"e2e", "project"}


def test_the_tests_mirror_the_layers() -> None:
    tests = Path(__file__).resolve().parents[1]
    package = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    folders = {path.name for path in tests.iterdir() if (path / "__init__.py").exists()}
    assert sorted(tests.glob("test_*.py")) == []  # each test module lives in its layer's folder
    assert folders == {TESTS_OF.get(name, name) for name in package} | BEYOND_THE_PACKAGE


async def test_callers_joining_a_revalidation_decode_nothing_of_the_held_value(
    clock: FakeClock,
) -> None:
    class CountingCodec(JsonCodec[Any]):
        def __init__(self) -> None:
            self.loads_count = 0

        def loads(self, data: bytes) -> Any:
            self.loads_count += 1
            return super().loads(data)

    codec, release, held_seen = CountingCodec(), asyncio.Event(), []
    cache = hub(clock, PRODUCTS)

    async def call() -> dict[str, Any]:
        return {"products": [1]}

    async def revalidate(held: dict[str, Any]) -> dict[str, Any]:
        held_seen.append(held)
        await release.wait()
        return {"products": [2]}

    fetch = {"surface": "get_products", "codec": codec, "revalidate": revalidate}
    await cache.fetch(INVENTORY, "k", call, **fetch)
    clock.advance(61)  # past the target: refreshed in front, by revalidating the held value
    codec.loads_count = 0
    callers = [asyncio.ensure_future(cache.fetch(INVENTORY, "k", call, **fetch)) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert codec.loads_count == 1 and held_seen == [{"products": [1]}]  # the flight's alone
    release.set()
    values = await asyncio.gather(*callers)
    assert values == [{"products": [2]}] * 5
    assert len({id(value) for value in values}) == 5  # each caller a value of its own
    # The write read back (no round-trip promise), handed to one caller; copies for the rest.
    assert codec.loads_count == 1 + 1 + 4


async def test_callers_of_one_call_each_get_a_value_of_their_own(clock: FakeClock) -> None:
    """The callers sharing one upstream call each get a stored value of their own: one
    caller's change reaches no other, whoever takes the spare."""
    cache, release = hub(clock, PRODUCTS), asyncio.Event()

    async def call() -> dict[str, Any]:
        await release.wait()
        return {"products": [1]}

    callers = [
        asyncio.ensure_future(cache.fetch(INVENTORY, "k", call, surface="get_products"))
        for _ in range(3)
    ]
    await asyncio.sleep(0.01)
    callers[0].cancel()  # the starter leaves: a joiner takes the spare
    release.set()
    values = await asyncio.gather(*callers[1:])
    assert len({id(value) for value in values}) == 2
    values[0]["products"].append("changed by the first")
    assert values[1] == {"products": [1]}


async def test_a_caller_joining_with_its_own_codec_reads_with_it(clock: FakeClock) -> None:
    """The spare is read with the starter's codec: a caller joining with another codec, the
    starter gone, reads its value with its own, as its hit would."""

    class Boxed(JsonCodec[Any]):
        def loads(self, data: bytes) -> Any:
            return ("boxed", super().loads(data))

    cache, release = hub(clock, PRODUCTS), asyncio.Event()

    async def call() -> dict[str, Any]:
        await release.wait()
        return {"products": [1]}

    starter = asyncio.ensure_future(cache.fetch(INVENTORY, "k", call, surface="get_products"))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(
        cache.fetch(INVENTORY, "k", call, surface="get_products", codec=Boxed())
    )
    await asyncio.sleep(0.01)
    starter.cancel()
    release.set()
    assert await joiner == ("boxed", {"products": [1]})


async def test_callers_of_a_value_not_stored_share_it_as_the_call_returned_it(
    clock: FakeClock,
) -> None:
    """A value not stored is its call's own: the callers sharing the call share it, as it is
    (a copy read back could be another type: a tuple as a list). A lone caller's is never
    written."""

    class Counting(JsonCodec[Any]):
        writes = 0

        def dumps(self, value: Any) -> bytes:
            Counting.writes += 1
            return super().dumps(value)

    cache, release = hub(clock, PRODUCTS), asyncio.Event()

    async def call() -> dict[str, Any]:
        await release.wait()
        return {"products": (1, 2)}

    def fetch() -> Any:
        return cache.fetch(
            INVENTORY, "k", call, surface="get_products", codec=Counting(), cacheable=never
        )

    def never(value: Any) -> bool:
        return False

    release.set()
    alone = await fetch()
    assert alone == {"products": (1, 2)} and Counting.writes == 0
    release.clear()
    callers = [asyncio.ensure_future(fetch()) for _ in range(3)]
    await asyncio.sleep(0.01)
    release.set()
    values = await asyncio.gather(*callers)
    assert all(value is values[0] for value in values) and values[0] == {"products": (1, 2)}
