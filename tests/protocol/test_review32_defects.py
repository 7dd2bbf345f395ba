"""Reproductions of review 32's defects in issue 32's work, each fixed since."""

from __future__ import annotations

import asyncio
from typing import Any

from adcp_stale_cache import collect_advisories
from adcp_stale_cache.adcp.feeds import answer_list_products
from adcp_stale_cache.adcp.wholesale import canonical

PRODUCTS = [{"product_id": "p1", "name": "Run of site"}]


async def _compose() -> list[Any]:
    return PRODUCTS


def _list(request: dict[str, Any]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with collect_advisories(request=request):
            return await answer_list_products(request, _compose)

    return asyncio.run(asyncio.wait_for(run(), timeout=10))


def test_list_products_default_max_results_shares_the_feed_token() -> None:
    brand = {"domain": "acme.example"}
    omitted = _list({"brand": brand})
    spelled = _list({"brand": brand, "max_results": 25})
    assert spelled["outcome"] == omitted["outcome"] == "listed"
    assert spelled["feed_version"] == omitted["feed_version"]


def test_list_products_channel_order_shares_the_feed_token() -> None:
    def request(channels: list[str]) -> dict[str, Any]:
        return {"brand": {"domain": "a.example"},
                "criteria": {"offer_filters": {"channels": channels}}}  # fmt: skip

    first = _list(request(["olv", "ctv"]))
    second = _list(request(["ctv", "olv"]))
    assert first["feed_version"] == second["feed_version"]


def test_integral_float_default_is_the_default() -> None:
    as_int = canonical({"pagination": {"max_results": 50}}, "get_products", "3.1")
    as_float = canonical({"pagination": {"max_results": 50.0}}, "get_products", "3.1")
    assert as_int == as_float


def test_signals_page_size_is_part_of_the_feed_token() -> None:
    from adcp_stale_cache import Upstream, UpstreamCache
    from adcp_stale_cache.adcp.feeds import answer_signals

    cache = UpstreamCache()
    signals = Upstream(name="signals")
    feed = [{"signal_agent_segment_id": f"s{n}"} for n in range(10)]

    async def load() -> list[Any]:
        return feed

    def request(size: int, **more: Any) -> dict[str, Any]:
        return {"discovery_mode": "wholesale", "pagination": {"max_results": size}, **more}

    async def answer(asked: dict[str, Any]) -> dict[str, Any]:
        size = asked["pagination"]["max_results"]

        async def rows() -> list[Any]:  # one cached feed, sliced to the page asked
            return list(await cache.fetch(signals, "all", load))[:size]

        async with collect_advisories(request=asked):
            return await answer_signals(asked, rows, cache=cache)

    async def run() -> dict[str, Any]:
        one = await answer(request(1))
        assert len(one["signals"]) == 1
        token = one["wholesale_feed_version"]
        return await answer(request(10, if_wholesale_feed_version=token))

    ten = asyncio.run(asyncio.wait_for(run(), timeout=10))
    assert "unchanged" not in ten and len(ten["signals"]) == 10


def test_unpinned_shape_holds_only_defaults_every_release_states() -> None:
    def timezone(release: str | None) -> Any:
        return canonical(
            {"targeting_overlay": {"daypart_targets": [{"timezone": "inventory_local"}]}},
            "get_products",
            release,
        )

    assert timezone("3.1") != timezone("3.2")  # 3.1 states no default: the member stays
    assert timezone(None) == timezone("3.1")


def test_list_products_next_page_is_never_unchanged() -> None:
    from adcp_stale_cache import Upstream, UpstreamCache

    cache = UpstreamCache()
    inventory = Upstream(name="inventory")
    feed = [{"product_id": f"p{n}", "name": f"P{n}"} for n in range(4)]

    async def load() -> list[Any]:
        return feed

    async def answer(asked: dict[str, Any]) -> dict[str, Any]:
        start = 2 if asked.get("cursor") == "page_2" else 0

        async def rows() -> list[Any]:  # one cached feed, paged
            return list(await cache.fetch(inventory, "all", load))[start : start + 2]

        async with collect_advisories(request=asked):
            return await answer_list_products(asked, rows, cache=cache)

    async def run() -> dict[str, Any]:
        first = await answer({"brand": {"domain": "a.example"}, "max_results": 2})
        token = first["feed_version"]
        return await answer({"brand": {"domain": "a.example"}, "max_results": 2,
                             "cursor": "page_2", "if_feed_version": token})  # fmt: skip

    second = asyncio.run(asyncio.wait_for(run(), timeout=10))
    assert second["outcome"] == "listed"
