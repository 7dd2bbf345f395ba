"""force_upstream_unavailable: test mode only, exact forced age, one response, seeds a cold cache."""

from __future__ import annotations

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

from ..conftest import FakeClock

PRODUCTS = SurfacePolicy(
    name="get_products", field="products", upstreams=("inventory-service", "pricing"),
    freshness_target_seconds=60, max_stale_seconds=3600,
)  # fmt: skip
INVENTORY = Upstream(name="inventory-service")
PRICING = Upstream(name="pricing")


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError
        return {"products": [{"product_id": "p1"}]}


@pytest.fixture
def cache(clock: FakeClock) -> UpstreamCache:
    return UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock, test_mode=True
    )


def test_refused_outside_test_mode() -> None:
    with pytest.raises(RuntimeError, match="test_mode"):
        UpstreamCache().force_upstream_unavailable("get_products")


def test_unknown_tool_is_a_clear_error(cache: UpstreamCache) -> None:
    with pytest.raises(KeyError, match="unknown surface"):
        cache.force_upstream_unavailable("get_prodcts")


async def test_forced_age_appears_exactly_then_upstream_is_healthy_again(
    cache: UpstreamCache, clock: FakeClock, assert_valid_advisory: Any
) -> None:
    upstream = Counting()
    await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    cache.force_upstream_unavailable("get_products", "inventory-service", cache_age_seconds=1234)
    with collect_advisories() as forced:
        value = await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
        await cache.fetch(INVENTORY, "k2", upstream, surface="get_products")  # same response
    assert value == {"products": [{"product_id": "p1"}]}
    [advisory] = forced.errors()
    assert_valid_advisory(advisory)
    assert advisory["details"]["cache_age_seconds"] == 1234
    assert advisory["details"]["upstream"]["name"] == "inventory-service"
    with collect_advisories() as later:
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    assert not later  # one-shot: the next response sees a healthy upstream (and a fresh entry)


@pytest.mark.parametrize("age", [10**400, 1e308, 2**31 + 1, -1, 1.5, "120", True])
async def test_a_forced_age_no_advisory_can_state_exactly_is_refused(
    cache: UpstreamCache, age: Any
) -> None:
    """A buyer's ``cache_age_seconds`` (sandbox only, but a buyer's): one no clock holds
    would crash the stale serve, so it is refused up front (INVALID_PARAMS to the buyer)."""
    with pytest.raises(ValueError, match="whole number"):
        cache.force_upstream_unavailable("get_products", cache_age_seconds=age)


async def test_a_forced_age_read_as_a_double_is_its_whole_number(
    cache: UpstreamCache, assert_valid_advisory: Any
) -> None:
    upstream = Counting()
    await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    cache.force_upstream_unavailable("get_products", cache_age_seconds=120.0)  # A2A: a double
    with collect_advisories() as forced:
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    [advisory] = forced.errors()
    assert_valid_advisory(advisory)
    assert advisory["details"]["cache_age_seconds"] == 120


async def test_cold_cache_is_seeded_and_default_upstream_is_the_first(cache: UpstreamCache) -> None:
    upstream = Counting()
    cache.force_upstream_unavailable("get_products")
    with collect_advisories() as forced:
        await cache.fetch(PRICING, "k", upstream, surface="get_products")  # not the default
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    [advisory] = forced.errors()
    assert advisory["details"]["upstream"]["name"] == "inventory-service"
    assert advisory["details"]["cache_age_seconds"] == 60  # default: the freshness target
    assert upstream.calls == 2  # pricing for real, inventory once to seed


async def test_wildcard_tool_and_max_stale_still_bound(cache: UpstreamCache) -> None:
    upstream = Counting()
    cache.force_upstream_unavailable("*", "inventory-service", cache_age_seconds=60 + 3600 + 1)
    with collect_advisories() as forced, pytest.raises(UpstreamUnavailable):
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    assert not forced


async def test_cold_cache_with_upstream_really_down_fails(cache: UpstreamCache) -> None:
    upstream = Counting()
    upstream.down = True
    cache.force_upstream_unavailable("get_products")
    with pytest.raises(UpstreamUnavailable):
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")


async def test_empty_cache_answers_as_if_nothing_were_cached(clock: FakeClock) -> None:
    """This library's extension: the failure stays a failure, even with a warm entry."""
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          test_mode=True)  # fmt: skip
    up = Counting()
    await cache.fetch(INVENTORY, "k", up, surface="get_products")
    cache.force_upstream_unavailable("get_products", empty_cache=True)
    with collect_advisories() as advisories, pytest.raises(UpstreamUnavailable) as raised:
        await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert raised.value.failure.code == "SERVICE_UNAVAILABLE" and advisories.errors() == []
    assert up.calls == 1  # the upstream was not called
    with collect_advisories() as advisories:  # one response only: healthy again
        await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert advisories.errors() == []


async def test_a_seeded_entry_carries_its_labels_so_purges_select_it(
    cache: UpstreamCache,
) -> None:
    """Issue 22, Low: a forced outage seeded a cold cache with an entry without labels: no
    purge by upstream, surface or tag selected it, so it stayed fresh through every purge."""
    from adcp_stale_cache.ops.control import CacheControl

    upstream = Counting()
    cache.force_upstream_unavailable("get_products")
    await cache.fetch(INVENTORY, "k", upstream, surface="get_products", tags=["account:a"])
    assert upstream.calls == 1  # seeded for real
    control = CacheControl(cache)
    assert await control.invalidate(tags=["account:a"]) == 1
    assert await control.invalidate(upstream="inventory-service", soft=False) == 1
    with pytest.raises(UpstreamUnavailable):
        upstream.down = True
        await cache.fetch(INVENTORY, "k", upstream, surface="get_products")


async def test_a_purge_during_the_seeding_call_wins(cache: UpstreamCache) -> None:
    """A forced outage's seeding call is a call in flight like any other: a purge that lands
    while it runs keeps its answer out of the store (see purges)."""
    from adcp_stale_cache.ops.control import CacheControl

    control = CacheControl(cache)
    upstream = Counting()

    async def purged_meanwhile() -> dict[str, Any]:
        value = await upstream()
        await control.invalidate(upstream="inventory-service", soft=False)
        return value

    cache.force_upstream_unavailable("get_products")
    with collect_advisories() as forced:
        await cache.fetch(INVENTORY, "k", purged_meanwhile, surface="get_products")
    assert [e["code"] for e in forced.errors()] == ["STALE_RESPONSE"]  # served, aged
    await cache.fetch(INVENTORY, "k", upstream, surface="get_products")
    assert upstream.calls == 2  # nothing was stored: the next request calls
