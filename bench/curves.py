"""How cost grows as the cache grows (``python -m bench --curves``): a fresh hit's cost and
the bytes an entry takes, at 1,000 to 1,000,000 entries, for the memory store.

A hit is timed over keys drawn at random from all those stored, so a large cache is read
as a large cache is (its entries out of the CPU's caches), not one hot key. Bytes per entry
are what ``tracemalloc`` sees the store hold once filled, divided by its entries.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import tracemalloc
from typing import Any

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.entry import Entry

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=3600,
                       max_stale_seconds=3600)  # fmt: skip
UPSTREAM = Upstream(name="inventory", url="https://inventory.example/products")
#: One stored answer: a small product list, about as large as a typical entry's value.
VALUE = {"products": [{"product_id": f"p-{i}", "name": "Run of network display"}
                      for i in range(3)]}  # fmt: skip

SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)


async def filled(n: int) -> tuple[UpstreamCache, int]:
    """A cache whose memory store holds ``n`` entries of :data:`VALUE` (stored as a fetch
    stores them: keys, labels and bytes alike); the bytes the store holds for them."""
    store = MemoryStore(max_entries=n + 1, max_bytes=1 << 40)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY))

    async def call() -> dict[str, Any]:
        return VALUE

    await cache.fetch(UPSTREAM, 0, call, surface="get_products")  # one real entry: its shape
    model = await store.get(cache.store_key(UPSTREAM, 0))
    assert model is not None
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    now = model.stored_at
    for i in range(1, n):
        # A copy of the bytes per entry, as each stored answer has its own.
        entry = Entry(bytes(model.data), now, model.labels, terms=model.terms)
        await store.set(cache.store_key(UPSTREAM, i), entry, 3600)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return cache, held


async def hit_us(cache: UpstreamCache, n: int, hits: int) -> float:
    """Microseconds per fresh hit, over keys drawn at random among the ``n`` stored."""

    async def call() -> dict[str, Any]:
        raise AssertionError("a fresh hit never calls")

    keys = [random.randrange(n) for _ in range(hits)]
    best = float("inf")
    for _ in range(3):  # the best of three passes: the least disturbed by the machine
        started = time.perf_counter()
        for key in keys:
            await cache.fetch(UPSTREAM, key, call, surface="get_products")
        best = min(best, (time.perf_counter() - started) / hits)
    return best * 1e6


async def memory_curves(sizes: tuple[int, ...] = SIZES, hits: int = 20_000) -> dict[str, float]:
    """``hit_us.memory.<n>`` and ``memory_bytes_per_entry.<n>`` for each size."""
    out: dict[str, float] = {}
    for n in sizes:
        cache, held = await filled(n)
        out[f"memory_bytes_per_entry.{n}"] = held / max(1, n - 1)
        out[f"hit_us.memory.{n}"] = await hit_us(cache, n, hits)
        del cache
        gc.collect()
    return out


def curves(quick: bool) -> dict[str, float]:
    """Every curve this run measures (smaller sizes with ``quick``)."""
    sizes = QUICK_SIZES if quick else SIZES
    return asyncio.run(memory_curves(sizes, 2_000 if quick else 20_000))
