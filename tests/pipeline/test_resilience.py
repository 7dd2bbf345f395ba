"""Circuit breaking, stale-while-revalidate, request budgets and caller partitions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.core.failures import Failure
from adcp_stale_cache.core.policy import FailureKind
from adcp_stale_cache.pipeline.breaker import Admission, Breaker, BreakerPolicy

from ..conftest import CountingUpstream as Upstreamish
from ..conftest import FakeClock

DOWN = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "Upstream refused the connection")
POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=1000
)
INVENTORY = Upstream(name="inventory-service")


def test_breaker_table() -> None:
    breaker = Breaker(BreakerPolicy(failure_threshold=3, window_seconds=10, cooldown_seconds=5))
    assert breaker.admit(0) is Admission.CALL
    breaker.on_failure(0, DOWN)
    breaker.on_failure(1, DOWN)
    breaker.on_failure(12, DOWN)  # the first two left the window
    assert not breaker.is_open
    breaker.on_failure(13, DOWN)
    breaker.on_failure(14, DOWN)
    assert breaker.is_open
    assert breaker.admit(18.9) is Admission.REJECT
    assert breaker.admit(19) is Admission.PROBE  # cooldown over: one probe
    assert breaker.admit(19.1) is Admission.REJECT  # and only one
    breaker.on_failure(20, DOWN)  # the probe failed: another cooldown
    assert breaker.admit(24.9) is Admission.REJECT
    assert breaker.admit(25) is Admission.PROBE
    breaker.on_success()
    assert not breaker.is_open and breaker.admit(25.1) is Admission.CALL


def make_cache(clock: FakeClock, **policy: Any) -> UpstreamCache:
    surfaces = Surfaces.of(POLICY.model_copy(update=policy))
    breaker = BreakerPolicy(failure_threshold=2, window_seconds=60, cooldown_seconds=30)
    return UpstreamCache(MemoryStore(clock=clock), surfaces=surfaces, clock=clock, breaker=breaker)


async def background_done(cache: UpstreamCache) -> None:
    """Wait for the cache's background work (a probe, a revalidation), however loaded the box."""
    await asyncio.wait_for(asyncio.gather(*cache.flights.tasks), timeout=10)


async def fetch(cache: UpstreamCache, up: Upstreamish) -> tuple[Any, list[dict[str, Any]]]:
    with collect_advisories() as advisories:
        value = await cache.fetch(INVENTORY, "k", up, surface="get_products")
    return value, advisories.errors()


async def test_open_breaker_serves_stale_without_calling_then_probes_behind(
    clock: FakeClock,
) -> None:
    cache, up = make_cache(clock), Upstreamish()
    await fetch(cache, up)
    clock.advance(20)
    up.down = True
    for _ in range(2):
        await fetch(cache, up)
    assert cache.breaker_open("inventory-service") and up.calls == 3
    value, [advisory] = await fetch(cache, up)  # open: no call
    assert up.calls == 3 and value == {"products": [1]}
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"  # the last failure
    clock.advance(30)
    up.down = False
    value, [advisory] = await fetch(cache, up)  # the probe runs behind this stale answer
    await background_done(cache)
    assert up.calls == 4 and not cache.breaker_open("inventory-service")
    value, errors = await fetch(cache, up)  # the probe refreshed the entry: fresh again
    assert value == {"products": [4]} and errors == [] and up.calls == 4


async def test_open_breaker_without_entry_fails_fast(clock: FakeClock) -> None:
    cache, up = make_cache(clock), Upstreamish()
    up.down = True
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            await fetch(cache, up)
    with pytest.raises(UpstreamUnavailable) as raised:
        await fetch(cache, up)
    assert up.calls == 2 and raised.value.failure.code == "CONNECTION_REFUSED"


async def test_stale_while_revalidate_answers_at_once_with_advisory(clock: FakeClock) -> None:
    cache, up = make_cache(clock, stale_while_revalidate=True), Upstreamish()
    await fetch(cache, up)
    clock.advance(15)
    up.delay = 1.0
    started = time.monotonic()
    value, [advisory] = await fetch(cache, up)
    assert time.monotonic() - started < 0.5  # did not wait for the 1 s upstream
    assert value == {"products": [1]}
    assert (
        advisory["details"]["cache_age_seconds"] == 15
        and "original_error" not in advisory["details"]
    )
    assert "refreshing in the background" in advisory["message"]
    await background_done(cache)
    value, errors = await fetch(cache, up)
    assert value == {"products": [2]} and errors == []


async def test_request_budget_bounds_a_fan_out_of_hung_upstreams(clock: FakeClock) -> None:
    cache = make_cache(clock, request_budget_seconds=0.3, upstream_timeout_seconds=5)
    ups = [Upstreamish() for _ in range(4)]
    names = [Upstream(name=f"agent-{i}") for i in range(4)]
    for up, name in zip(ups, names, strict=True):
        await cache.fetch(name, "k", up, surface="get_products")
        up.delay = 10
    clock.advance(20)
    started = time.monotonic()
    with collect_advisories() as advisories:
        await asyncio.gather(
            *(
                cache.fetch(n, "k", u, surface="get_products")
                for u, n in zip(ups, names, strict=True)
            )
        )
    elapsed = time.monotonic() - started
    assert elapsed < 0.6, elapsed
    assert (
        sorted(e["details"]["original_error"]["code"] for e in advisories.errors())
        == ["TIMEOUT"] * 4
    )


async def test_spent_budget_serves_stale_without_calling(clock: FakeClock) -> None:
    cache, up, slow = make_cache(clock, request_budget_seconds=0.05), Upstreamish(), Upstreamish()
    await fetch(cache, up)
    clock.advance(20)
    slow.delay = 0.06
    with collect_advisories() as advisories:
        await cache.fetch(Upstream(name="slow"), "k", slow, surface="get_products")  # a miss
        await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert up.calls == 1 and slow.calls == 1  # the miss called in full: nothing to serve
    [advisory] = advisories.errors()
    assert advisory["details"]["original_error"]["code"] == "TIMEOUT"
    assert advisory["details"]["upstream"]["name"] == INVENTORY.name


async def test_the_budget_counts_the_librarys_waiting_not_the_sellers_queue(
    clock: FakeClock,
) -> None:
    cache, up = make_cache(clock, request_budget_seconds=0.05), Upstreamish()
    await fetch(cache, up)
    clock.advance(20)
    with collect_advisories() as advisories:
        await asyncio.sleep(0.06)  # queued by the seller before it reaches the cache
        value = await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert up.calls == 2 and advisories.errors() == []  # healthy: called, fresh
    assert value == {"products": [2]}


async def test_a_seller_that_serialises_its_calls_is_never_told_stale_of_a_healthy_upstream(
    clock: FakeClock,
) -> None:
    """The reference seller's shape: tool bodies one at a time, each refreshing its own key
    (0.1 s a call), under a 0.25 s budget. Counted from arrival, the 3rd to 5th were served
    stale: the 3rd's call cut at the 0.05 s it had left, the others refused."""
    cache, up = make_cache(clock, request_budget_seconds=0.25), Upstreamish()
    for principal in range(5):
        with collect_advisories(partition=str(principal)):
            await cache.fetch(INVENTORY, "k", up, surface="get_products")
    clock.advance(20)  # every entry past its target: each request calls
    up.delay, one_at_a_time = 0.1, asyncio.Lock()

    async def request(principal: int) -> list[dict[str, Any]]:
        with collect_advisories(partition=str(principal)) as advisories:
            async with one_at_a_time:
                await cache.fetch(INVENTORY, "k", up, surface="get_products")
        return advisories.errors()

    answers = await asyncio.gather(*(request(p) for p in range(5)))
    assert answers == [[]] * 5 and up.calls == 10


async def test_with_nothing_cached_a_spent_budget_still_calls(clock: FakeClock) -> None:
    cache, first, second = (
        make_cache(clock, request_budget_seconds=0.05),
        Upstreamish(),
        Upstreamish(),
    )
    first.delay = 0.06
    with collect_advisories() as advisories:
        await cache.fetch(Upstream(name="first"), "k", first, surface="get_products")
        value = await cache.fetch(Upstream(name="second"), "k", second, surface="get_products")
    assert value == {"products": [1]} and second.calls == 1 and advisories.errors() == []


async def test_partitions_never_share_entries(clock: FakeClock) -> None:
    cache = make_cache(clock)
    seen: list[str] = []

    def call_for(who: str) -> Any:
        async def call() -> dict[str, Any]:
            seen.append(who)
            return {"products": [who]}

        return call

    for who in ("alice", "bob"):
        with collect_advisories(partition=who):
            assert await cache.fetch(INVENTORY, "k", call_for(who), surface="get_products") == {
                "products": [who]
            }
    assert seen == ["alice", "bob"]
    shared = make_cache(clock, shared_across_callers=True)
    for who in ("alice", "bob"):
        with collect_advisories(partition=who):
            assert await shared.fetch(INVENTORY, "k", call_for(who), surface="get_products") == {
                "products": ["alice"]
            }


def test_caller_partition_is_hashed_and_distinct() -> None:
    from adcp_stale_cache.core.keys import caller_partition

    def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
        return {"headers": [(b"host", b"seller.example"), *headers]}

    alice = caller_partition(scope((b"authorization", b"Bearer alice-secret")))
    bob = caller_partition(scope((b"Authorization", b"Bearer bob-secret")))
    tenant = caller_partition(
        scope((b"authorization", b"Bearer alice-secret"), (b"x-adcp-tenant", b"t2"))
    )
    assert len({alice, bob, tenant, caller_partition(scope())}) == 4
    assert "secret" not in alice + bob
    # Workers behind one host name on several ports share entries; another name does not.
    assert caller_partition({"headers": [(b"host", b"seller.example:8001")]}) == caller_partition(
        scope()
    )
    assert caller_partition({"headers": [(b"host", b"other.example")]}) != caller_partition(scope())
