"""HTTP's caching contract with real processes (issue 15): the example seller in front of
the example inventory service, revalidating with ETags over loopback."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from adcp_stale_cache import (
    CachingTransport,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
)
from adcp_stale_cache.core.entry import Entry, Terms
from adcp_stale_cache.demo.processes import App, free_port

from ..servers import START_SECONDS

pytestmark = pytest.mark.e2e


def stats(inventory: App) -> dict[str, int]:
    answer: dict[str, int] = httpx.get(f"{inventory.url}/stats", timeout=5).json()
    return answer


def test_past_the_target_the_seller_revalidates_with_304s_and_no_body() -> None:
    inventory = App("inventory-service", free_port(), "--products", "5", quiet=True)
    seller = App("seller", free_port(), "--inventory-service", inventory.url,
                 "--freshness-target", "1", quiet=True)  # fmt: skip
    try:
        for app in (inventory, seller):
            app.start()
        for app in (inventory, seller):
            app.wait(START_SECONDS)
        warmed = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10).json()
        before = stats(inventory)
        assert before == {"200": 1, "304": 0}
        for _ in range(3):
            time.sleep(1.1)  # past the 1 s target
            answer = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
            body = answer.json()
            assert answer.status_code == 200 and body["products"] == warmed["products"]
            assert "errors" not in body or not body["errors"]  # no advisory: revalidated
        assert stats(inventory) == {"200": 1, "304": 3}
    finally:
        for app in (inventory, seller):
            app.stop()


def test_the_seller_honours_the_inventorys_max_age_within_its_policy() -> None:
    inventory = App("inventory-service", free_port(), "--max-age", "1", quiet=True)
    seller = App("seller", free_port(), "--inventory-service", inventory.url,
                 "--freshness-target", "60", "--honor-cache-control", quiet=True)  # fmt: skip
    try:
        for app in (inventory, seller):
            app.start()
        for app in (inventory, seller):
            app.wait(START_SECONDS)
        httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        assert stats(inventory) == {"200": 1, "304": 0}  # fresh within max-age=1
        time.sleep(1.1)  # past the upstream's 1 s, well within the policy's 60 s
        answer = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10).json()
        assert answer["products"] and not answer.get("errors")
        assert stats(inventory) == {"200": 1, "304": 1}
    finally:
        for app in (inventory, seller):
            app.stop()


async def test_a_304_after_the_upstream_restarted_with_the_same_body() -> None:
    port = free_port()
    inventory = (
        App("inventory-service", port, "--max-age", "1", quiet=True).start().wait(START_SECONDS)
    )
    surface = SurfacePolicy(name="get_products", freshness_target_seconds=60,
                            max_stale_seconds=600, honor_cache_control=True)  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(surface))
    transport = CachingTransport(cache, Upstream(name="inventory-service"), surface="get_products")
    client = httpx.AsyncClient(base_url=inventory.url, transport=transport)
    try:
        first = (await client.get("/products")).json()
        inventory.stop()
        inventory = (
            App("inventory-service", port, "--max-age", "1", quiet=True).start().wait(START_SECONDS)
        )
        await asyncio.sleep(1.1)  # past the upstream's max-age=1 (the policy allows 60)
        with collect_advisories() as advisories:
            again = await client.get("/products")
        assert again.status_code == 200 and again.json() == first and not advisories.errors()
        assert stats(inventory) == {"200": 0, "304": 1}  # the new process: one 304, no body
    finally:
        await client.aclose()
        inventory.stop()


def test_stores_keep_an_entrys_terms(tmp_path: Path) -> None:
    import asyncio

    from adcp_stale_cache.stores.redis import decode, encode
    from adcp_stale_cache.stores.sqlite import SqliteStore

    terms = Terms(max_age=5.0, stale_if_error=None, stale_while_revalidate=30.0, age=2.0)
    entry = Entry(b"{}", 1000.0, ("upstream=x",), terms=terms)
    assert decode(encode(entry)) == entry
    assert decode(encode(Entry(b"{}", 1000.0))) == Entry(b"{}", 1000.0)  # terms optional
    corrupt = bytearray(encode(entry))
    corrupt[-3] ^= 0xFF
    assert decode(bytes(corrupt)) is None

    async def round_trip() -> Any:
        store = SqliteStore(tmp_path / "c.db")
        await store.set("k", entry, 60)
        got = await store.get("k")
        store.close()
        return got

    assert asyncio.run(round_trip()) == entry
