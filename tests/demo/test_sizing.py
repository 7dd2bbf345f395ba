"""What a tenant costs the example seller's memory tier (issue 26, docs/sizing.md): the
seller in-process, its inventory service through an in-process transport, ``get_products``
asked once for each of 1,000 tenants (bearer tokens). Measured with ``tracemalloc``, and
written to ``$SIZING_JSON`` (default: ``sizing.json`` in the test's tmp dir) and printed.
Asserts what the figures rest on (one entry per tenant, each holding at least its value's
bytes), never a size."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

from adcp_stale_cache.demo.inventory_service import create_inventory_app
from adcp_stale_cache.demo.seller import create_seller_app
from adcp_stale_cache.stores import MemoryStore

TENANTS, PRODUCTS = 1000, 4


async def test_what_a_tenant_costs_the_example_sellers_memory_tier(tmp_path: Path) -> None:
    store = MemoryStore()
    inventory = httpx.ASGITransport(app=create_inventory_app(count=PRODUCTS))
    seller = create_seller_app(creative_agents={}, inventory_url="http://inventory.internal",
                               store=store, inventory_transport=inventory)  # fmt: skip
    transport = httpx.ASGITransport(app=seller)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:

        async def ask(tenant: int) -> tuple[int, int]:
            """The answer's product count and size (the answer itself is not kept: its
            objects would count as the seller's)."""
            answer = await client.post("/api/get_products", json={},
                                       headers={"authorization": f"Bearer tenant-{tenant}"})  # fmt: skip
            body: dict[str, Any] = answer.raise_for_status().json()
            return len(body["products"]), len(answer.content)

        await ask(-1)  # the first request's one-off allocations (imports, pools) out of the way
        # pytest keeps every log record it captures (httpx logs each request): not the seller's.
        logging.disable(logging.INFO)
        try:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            sizes = [await ask(tenant) for tenant in range(TENANTS)]  # (products, JSON bytes)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
        finally:
            logging.disable(logging.NOTSET)
    entries = [entry for key, entry in await store.scan() if key]
    values = sum(len(entry.data) for entry in entries)
    answer_bytes = sum(size for _, size in sizes) / TENANTS
    result = {
        "tenants": TENANTS,
        "products_per_tenant": PRODUCTS,
        "entries": len(entries),
        "bytes_per_tenant": round((after - before) / TENANTS),
        "value_bytes_per_entry": round(values / max(len(entries), 1)),
        "answer_json_bytes": round(answer_bytes),
    }
    out = Path(os.environ.get("SIZING_JSON") or tmp_path / "sizing.json")
    await asyncio.to_thread(out.write_text, json.dumps(result, indent=2))
    print(f"sizing ({out}): {json.dumps(result)}")
    assert len(entries) == TENANTS + 1  # one get_products entry per tenant (and the warm-up's)
    assert all(count == PRODUCTS for count, _ in sizes)
    assert (after - before) / TENANTS >= values / len(entries)
