"""How cost grows as the cache grows (``python -m bench --curves``), for the memory, file
(SQLite) and Redis stores:

- ``hit_us.<store>.<n>``: a fresh hit through ``cache.fetch`` at 1,000 to 1,000,000 entries,
  timed over keys drawn at random from all those stored, so a large cache is read as a large
  cache is (its entries out of the CPU's caches), not one hot key;
- ``memory_bytes_per_entry.<n>``: what ``tracemalloc`` sees the memory store hold once
  filled, divided by its entries (its label index included);
- ``purge_tag_ms.<store>.<share>``: a soft purge by tag through ``CacheControl.invalidate``
  selecting 1% and 10% of 100,000 entries; and ``purge_tag_ms.<store>.<k>_of_<n>``: the same
  count of entries selected in a cache 10x smaller and in the large one (the 1% purge), whose
  ratio, ``purge_tag_growth.<store>``, says whether a purge's cost follows what it selects
  or the cache's size. Each is the best of five, the three purges taking turns;
- Redis round trips per request and a purge's propagation to 2, 5 and 10 processes: see
  :mod:`bench.redis_curves`, whose figures join these.

Every entry is stored as a ``fetch`` stores it (its key, labels, encoding): a model entry is
fetched through the cache into the store, then copied under other keys. Large file and Redis
stores are filled in bulk (one SQLite transaction; Redis pipelines) with exactly the rows
and values the store's own writes make; the file's label index catches up with a bulk fill
on its first purge, which is made (selecting nothing) before any purge is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import shutil
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.ops.control import CacheControl

from .redis_curves import redis_curves, redis_server

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=3600,
                       max_stale_seconds=3600)  # fmt: skip
TTL = 7200.0  # what the cache keeps such an entry for: target + max-stale
UPSTREAM = Upstream(name="inventory", url="https://inventory.example/products")
#: One stored answer: a small product list, about as large as a typical entry's value.
VALUE = {"products": [{"product_id": f"p-{i}", "name": "Run of network display"}
                      for i in range(3)]}  # fmt: skip

SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
PURGE_SIZE, QUICK_PURGE_SIZE = 100_000, 10_000
#: The tags of entry ``i`` (disjoint: 1% of the entries carry one, 10% the other).
ONE_PERCENT, TEN_PERCENT = "one-percent", "ten-percent"


def tags_of(i: int) -> tuple[str, ...]:
    """The tags entry ``i`` of a purge curve's cache is stored with."""
    if i % 100 == 0:
        return (ONE_PERCENT,)
    return (TEN_PERCENT,) if i % 10 == 5 else ()


async def models(cache: UpstreamCache, tagged: bool) -> dict[tuple[str, ...], Entry]:
    """One entry per set of tags, stored by a real ``fetch`` and read back from the store."""

    async def call() -> dict[str, Any]:
        return VALUE

    found = {}
    for tags in [(), (ONE_PERCENT,), (TEN_PERCENT,)] if tagged else [()]:
        key = f"model-{'-'.join(tags)}"
        await cache.fetch(UPSTREAM, key, call, surface="get_products", tags=tags)
        entry = await cache.store.get(cache.store_key(UPSTREAM, key))
        assert entry is not None and entry.labels and not entry.revalidate
        found[tags] = entry
    return found


def entries(
    cache: UpstreamCache, n: int, model: dict[tuple[str, ...], Entry], keys: Iterator[int]
) -> Iterator[tuple[str, Entry]]:
    """(store key, entry) of each of ``keys``, a copy of its model: its own bytes and its
    own labels (a tuple of strings of its own), as each entry a fetch stores has (a fetch
    builds its labels anew: entries sharing their model's would hide their cost)."""
    tagged = len(model) > 1
    for i in keys:
        like = model[tags_of(i) if tagged else ()]
        labels = tuple("".join((label, "")) for label in like.labels)  # equal, not the same
        data = bytes(memoryview(like.data))  # (bytes(b) is b itself: no copy)
        entry = Entry(data, like.stored_at, labels, terms=like.terms)
        yield cache.store_key(UPSTREAM, i), entry


# --- memory ----------------------------------------------------------------------------


async def filled(n: int) -> tuple[UpstreamCache, int]:
    """A cache whose memory store holds ``n`` entries of :data:`VALUE` (stored as a fetch
    stores them: keys, labels and bytes alike); the bytes the store holds for them."""
    store = MemoryStore(max_entries=n + 1, max_bytes=1 << 40)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY))
    model = await models(cache, tagged=False)
    await store.delete(cache.store_key(UPSTREAM, "model-"))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for key, entry in entries(cache, n, model, iter(range(n))):
        await store.set(key, entry, TTL)
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
        out[f"memory_bytes_per_entry.{n}"] = held / n
        out[f"hit_us.memory.{n}"] = await hit_us(cache, n, hits)
        del cache
        gc.collect()
    return out


# --- the file and Redis: bulk fills of exactly what a store's writes make ---------------


class Bench:
    """One store kind: a cache over a new store of it, and a bulk write of entries."""

    name = ""

    async def cache(self, n: int) -> UpstreamCache:
        """A cache over a new, empty store with room for ``n`` entries."""
        raise NotImplementedError

    async def write(self, cache: UpstreamCache, items: Iterator[tuple[str, Entry]]) -> None:
        """Store every (key, entry) as ``set`` would, in bulk."""
        raise NotImplementedError

    async def close(self, cache: UpstreamCache) -> None:
        """Let the store go."""


class MemoryBench(Bench):
    name = "memory"

    async def cache(self, n: int) -> UpstreamCache:
        store = MemoryStore(max_entries=n + 10, max_bytes=1 << 40)
        return UpstreamCache(store, surfaces=Surfaces.of(POLICY))

    async def write(self, cache: UpstreamCache, items: Iterator[tuple[str, Entry]]) -> None:
        for key, entry in items:
            await cache.store.set(key, entry, TTL)


class FileBench(Bench):
    name = "file"

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.made = 0

    async def cache(self, n: int) -> UpstreamCache:
        from adcp_stale_cache.stores.sqlite import SqliteStore

        self.made += 1
        store = SqliteStore(f"{self.folder}/curve-{self.made}.db", max_entries=n + 10,
                            max_bytes=1 << 40)  # fmt: skip
        return UpstreamCache(store, surfaces=Surfaces.of(POLICY))

    async def write(self, cache: UpstreamCache, items: Iterator[tuple[str, Entry]]) -> None:
        from adcp_stale_cache.stores import sqlite

        def rows(now: float) -> Iterator[tuple[Any, ...]]:
            for key, e in items:  # the very row SqliteStore._set writes
                terms = e.terms.pack() if e.terms is not None else None
                yield (key, e.stored_at, now + TTL, e.size, zlib.crc32(e.data),
                       "\n".join(e.labels), sqlite._flags(e), terms, e.data)  # fmt: skip

        def write(db: Any) -> bool:
            # In key order, with a large page cache for the one transaction: a bulk fill
            # appends to the b-trees rather than writing pages back and forth.
            (pages,) = db.execute("PRAGMA cache_size").fetchone()
            db.execute("PRAGMA cache_size = -262144")
            db.execute("BEGIN IMMEDIATE")
            db.executemany(sqlite._UPSERT, sorted(rows(time.time())))
            db.execute("COMMIT")
            db.execute(f"PRAGMA cache_size = {int(pages)}")
            return True

        store: Any = cache.store
        assert await store._run("fill", write, operator=True), "the bulk fill failed"

    async def close(self, cache: UpstreamCache) -> None:
        store: Any = cache.store
        store.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{store.path}{suffix}")


class RedisBench(Bench):
    name = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self.made = 0

    async def cache(self, n: int) -> UpstreamCache:
        from adcp_stale_cache.stores.redis import RedisStore

        self.made += 1  # a prefix of its own: two caches may share the server
        store = RedisStore(url=self.url, prefix=f"curve-{self.made}", socket_timeout=30)
        return UpstreamCache(store, surfaces=Surfaces.of(POLICY))

    async def write(self, cache: UpstreamCache, items: Iterator[tuple[str, Entry]]) -> None:
        from adcp_stale_cache.stores.redis import encode

        store: Any = cache.store
        ttl = int(TTL * 1000)
        while True:
            chunk = [item for _, item in zip(range(5000), items, strict=False)]
            if not chunk:
                return
            members: dict[str, list[str]] = {}
            async with store.client.pipeline(transaction=False) as pipe:
                for key, entry in chunk:  # what RedisStore.set's script writes
                    pipe.set(store._key(key), encode(entry), px=ttl)
                    for label in entry.labels:
                        members.setdefault(store._label(label), []).append(key)
                for name, keys in members.items():
                    pipe.sadd(name, *keys).pexpire(name, ttl)
                await pipe.execute()

    async def close(self, cache: UpstreamCache) -> None:
        store: Any = cache.store
        await store.client.flushall()  # (a run's caches are closed once it is done with them)
        await store.aclose()


async def store_hit_curve(bench: Bench, sizes: tuple[int, ...], hits: int) -> dict[str, float]:
    """``hit_us.<store>.<n>`` for each size."""
    out = {}
    for n in sizes:
        cache = await bench.cache(n)
        model = await models(cache, tagged=False)
        await bench.write(cache, entries(cache, n, model, iter(range(n))))
        out[f"hit_us.{bench.name}.{n}"] = await hit_us(cache, n, hits)
        await bench.close(cache)
        gc.collect()
    return out


class Purged:
    """A cache of ``n`` tagged entries, ready for timed purges."""

    def __init__(self, bench: Bench, n: int) -> None:
        self.bench, self.n = bench, n

    async def __aenter__(self) -> Purged:
        self.cache = await self.bench.cache(self.n)
        self.control = CacheControl(self.cache)
        self.model = await models(self.cache, tagged=True)
        await self.bench.write(
            self.cache, entries(self.cache, self.n, self.model, iter(range(self.n)))
        )
        assert await self.control.invalidate(tags=["absent"]) == 0  # the file's index catches up
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.bench.close(self.cache)
        gc.collect()

    async def purge_seconds(self, tag: str) -> float:
        """One soft purge of the entries tagged ``tag`` through ``CacheControl.invalidate``,
        on entries unmarked again before it."""
        selected = [i for i in range(self.n) if tag in tags_of(i)]
        await self.bench.write(self.cache, entries(self.cache, self.n, self.model, iter(selected)))
        started = time.perf_counter()
        count = await self.control.invalidate(tags=[tag])
        elapsed = time.perf_counter() - started
        # (the model entry of the tag counts too: it was fetched with it)
        assert count == len(selected) + 1, (self.bench.name, count, len(selected))
        return elapsed


async def purge_curve(bench: Bench, n: int, rounds: int = 5) -> dict[str, float]:
    """``purge_tag_ms.<store>.0.01`` and ``.0.1`` in ``n`` entries; the 1% count selected in
    a cache of ``n / 10`` (its 10% tag) beside it; their ratio. Each the best of ``rounds``,
    the three purges taking turns (a shared machine's slow spells hit them alike)."""
    name, few = bench.name, n // 100
    best = {"small": float("inf"), "one": float("inf"), "ten": float("inf")}
    async with Purged(bench, n // 10) as small, Purged(bench, n) as large:
        for _ in range(rounds):
            for point, cache, tag in (("small", small, TEN_PERCENT), ("one", large, ONE_PERCENT),
                                      ("ten", large, TEN_PERCENT)):  # fmt: skip
                best[point] = min(best[point], await cache.purge_seconds(tag))
    ms = {point: seconds * 1000 for point, seconds in best.items()}
    return {
        f"purge_tag_ms.{name}.0.01": ms["one"],
        f"purge_tag_ms.{name}.0.1": ms["ten"],
        f"purge_tag_ms.{name}.{few}_of_{n // 10}": ms["small"],
        f"purge_tag_ms.{name}.{few}_of_{n}": ms["one"],  # the 1% purge: the same measurement
        f"purge_tag_growth.{name}": ms["one"] / ms["small"],
    }


@contextlib.contextmanager
def optional_redis() -> Iterator[str | None]:
    """A redis-server of our own (see redis_curves), or None when none is installed."""
    if shutil.which("redis-server") is None:
        yield None
        return
    with redis_server() as url:
        yield url


async def all_curves(quick: bool) -> dict[str, float]:
    sizes = QUICK_SIZES if quick else SIZES
    hits, store_hits = (2_000, 1_000) if quick else (20_000, 10_000)
    purge_size = QUICK_PURGE_SIZE if quick else PURGE_SIZE
    out = await memory_curves(sizes, hits)
    with tempfile.TemporaryDirectory() as folder, optional_redis() as url:
        benches: list[Bench] = [MemoryBench(), FileBench(folder)]
        if url is not None:
            benches.append(RedisBench(url))
        for bench in benches[1:]:
            out.update(await store_hit_curve(bench, sizes, store_hits))
        for bench in benches:
            out.update(await purge_curve(bench, purge_size))
    return out


def curves(quick: bool) -> dict[str, float]:
    """Every curve this run measures (smaller sizes with ``quick``): the stores' (here), then
    Redis round trips and purge propagation (:mod:`bench.redis_curves`)."""
    measured = asyncio.run(all_curves(quick))
    measured.update(redis_curves(quick))
    return measured
