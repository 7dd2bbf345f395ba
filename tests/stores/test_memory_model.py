"""The memory store against a plain model of it: LRU by count and by bytes, expiry, purges;
and its lock-free reads against writers in other threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from adcp_stale_cache import MemoryStore
from adcp_stale_cache.core.entry import Entry

from ..conftest import FakeClock

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis (dev extra) is needed")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEYS = [f"k{i}" for i in range(6)]
MAX_ENTRIES, MAX_BYTES = 4, 900

operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS), st.integers(0, 400),
                  st.sampled_from([-1.0, 5.0, 50.0])),
        st.tuples(st.just("get"), st.sampled_from(KEYS)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 10.0, 60.0])),
        st.tuples(st.just("purge"), st.booleans()),
    ),
    max_size=60,
)  # fmt: skip


class Model:
    """What the store promises, plainly: a list in recency order, least recent first."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.items = clock, []  # type: list[tuple[str, Entry, float]]

    def live(self) -> list[tuple[str, Entry, float]]:
        return [item for item in self.items if self.clock() < item[2]]

    def get(self, key: str) -> Entry | None:
        for item in self.live():
            if item[0] == key:
                self.items.remove(item)
                self.items.append(item)
                return item[1]
        return None

    def set(self, key: str, entry: Entry, ttl: float) -> None:
        self.items = [item for item in self.live() if item[0] != key]
        if entry.size > MAX_BYTES or ttl <= 0:
            return
        self.items.append((key, entry, self.clock() + ttl))
        while len(self.items) > MAX_ENTRIES or sum(i[1].size for i in self.items) > MAX_BYTES:
            self.items.pop(0)

    def purge(self, soft: bool) -> int:
        self.items = self.live()
        if soft:
            self.items = [(k, Entry(e.data, e.stored_at, revalidate=True), t)
                          for k, e, t in self.items]  # fmt: skip
            return len(self.items)
        found, self.items = len(self.items), []
        return found


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_store_behaves_as_its_model(ops: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        clock = FakeClock()
        store = MemoryStore(max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES, clock=clock)
        model = Model(clock)
        for op in ops:
            if op[0] == "set":
                entry = Entry(b"x" * op[2], clock())
                await store.set(op[1], entry, op[3])
                model.set(op[1], entry, op[3])
            elif op[0] == "get":
                assert await store.get(op[1]) == model.get(op[1])
            elif op[0] == "delete":
                await store.delete(op[1])
                model.items = [item for item in model.items if item[0] != op[1]]
            elif op[0] == "advance":
                clock.advance(op[1])
            else:
                assert await store.purge(lambda k, e: True, soft=op[1]) == model.purge(op[1])
            assert [(k, e) for k, e in await store.scan()] == [(k, e) for k, e, _ in model.live()]
            assert store.entries <= MAX_ENTRIES and store.bytes <= MAX_BYTES
            # Every write removes what expired: what is counted is what is held.
            assert store.bytes == sum(e.size for _, (e, _) in store._items.items())

    asyncio.run(run())


def test_reads_without_the_lock_beside_writers_never_fail_or_break_the_bounds() -> None:
    store = MemoryStore(max_entries=50, max_bytes=50 * 100)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        async def read() -> None:
            for i in range(20_000):
                if stop.is_set():
                    return
                entry = await store.get(f"k{i % 80}")
                assert entry is None or entry.data.startswith(b"k")

        try:
            asyncio.run(read())
        except BaseException as exc:  # reported below
            errors.append(exc)

    def writer(n: int) -> None:
        async def write() -> None:
            for i in range(3_000):
                key = f"k{(i * 7 + n) % 80}"
                await store.set(key, Entry(key.encode() + b"." * 90, 0.0), 60)
                if i % 50 == 0:
                    await store.purge(lambda k, e: k.endswith("3"), soft=i % 100 == 0)
                    assert len(await store.scan()) <= 50
                if i % 30 == 0:
                    await store.delete(key)

        try:
            asyncio.run(write())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    threads += [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads[2:]:
        thread.join(timeout=120)
    stop.set()
    for thread in threads[:2]:
        thread.join(timeout=120)
    assert not errors, errors
    assert store.entries <= 50 and store.bytes <= 50 * 100
    assert store.bytes == sum(e.size for _, e in asyncio.run(store.scan()))


class _ReadingLabels(tuple[str, ...]):
    """Labels that, whenever the store reads them mid-write, let another thread read every
    other key without the lock (what a thread switch at that moment does)."""

    read: Any = None

    def __iter__(self) -> Any:
        if type(self).read is not None:
            type(self).read()
        return super().__iter__()


def test_a_read_racing_a_write_never_evicts_the_entry_written() -> None:
    """A lock-free read moves its entry behind the newest: were the newest in the dict before
    the write made room, it was the one evicted, and a set that returned was lost."""
    store = MemoryStore(max_entries=2)
    for key in ("a", "b"):
        asyncio.run(store.set(key, Entry(b"v", 0.0), 60))

    def read_the_others() -> None:
        thread = threading.Thread(target=lambda: [asyncio.run(store.get(k)) for k in "ab"])
        thread.start()
        thread.join(timeout=10)

    _ReadingLabels.read = read_the_others
    try:
        asyncio.run(store.set("c", Entry(b"v", 0.0, _ReadingLabels(("tag=t",))), 60))
    finally:
        _ReadingLabels.read = None
    assert asyncio.run(store.get("c")) is not None
    assert store.entries == 2
