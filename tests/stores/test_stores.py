"""MemoryStore: bounded by entries and bytes, entries expire."""

from __future__ import annotations

import pytest

from adcp_stale_cache import MemoryStore, Store
from adcp_stale_cache.core.entry import Entry

from ..conftest import FakeClock


def entry(size: int, clock: FakeClock) -> Entry:
    return Entry(b"x" * size, clock())


async def test_protocol_and_roundtrip(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    assert isinstance(store, Store)
    e = entry(10, clock)
    await store.set("k", e, 5)
    assert await store.get("k") == e
    await store.delete("k")
    assert await store.get("k") is None


async def test_expiry(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    await store.set("k", entry(10, clock), 5)
    clock.advance(4.9)
    assert await store.get("k") is not None
    assert store.get_now("k") is await store.get("k")  # read in place: the same entry
    clock.advance(0.2)
    assert await store.get("k") is None
    assert store.get_now("k") is None and store.get_now("never") is None


async def test_entry_count_bound_evicts_least_recently_used(clock: FakeClock) -> None:
    store = MemoryStore(max_entries=3, clock=clock)
    for k in "abc":
        await store.set(k, entry(10, clock), 60)
    await store.get("a")  # a is now more recent than b
    await store.set("d", entry(10, clock), 60)
    assert store.entries == 3
    assert await store.get("b") is None
    assert await store.get("a") is not None


async def test_byte_bound_holds(clock: FakeClock) -> None:
    store = MemoryStore(max_bytes=10_000, clock=clock)
    for i in range(200):
        await store.set(str(i), entry(500, clock), 60)
        assert store.bytes <= 10_000
    assert store.entries == 10_000 // (500 + 120)


async def test_oversized_entry_is_not_kept_and_drops_the_older_one(clock: FakeClock) -> None:
    store = MemoryStore(max_bytes=1_000, clock=clock)
    await store.set("k", entry(10, clock), 60)
    await store.set("k", entry(5_000, clock), 60)
    assert await store.get("k") is None


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        MemoryStore(max_entries=0)
    for bound in ("max_entries", "max_bytes"):  # NaN compares false: it would bound nothing
        with pytest.raises(ValueError, match="positive"):
            MemoryStore(**{bound: float("nan")})  # type: ignore[arg-type]


async def test_a_purge_from_another_thread_between_a_flights_check_and_its_write_wins() -> None:
    """A memory store shared by threads (a loop per worker thread): a flight's write under a
    purge count is checked and made in one step, so another thread's purge lands before the
    check (the write refused) or after the write (the entry purged), never in between.
    Before, the step was one only on one loop: a purge by another thread between the check
    and the write was undone by the write (the purged data served as fresh)."""
    import asyncio
    import threading

    class Racing(MemoryStore):  # another thread purges between the check and the write
        other: threading.Thread | None = None

        async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
            if self.other is None:
                purge = self.purge(lambda key, entry: True, soft=False)
                self.other = threading.Thread(target=asyncio.run, args=(purge,))
                self.other.start()
                self.other.join(0.3)  # done now, unless the check and write hold it off
            await super().set(key, entry, ttl_seconds)

    store = Racing()
    count = await store.generation()
    await store.set_unless_purged("k", Entry(b"read before the purge", 0.0), 60, count)
    assert store.other is not None
    store.other.join(5)
    assert await store.get("k") is None  # the purge won, whichever way
