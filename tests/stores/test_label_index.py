"""The label index of the memory and file stores (issue 26): a purge by labels reads only
the entries that carry them, and selects exactly what a scan of every entry selects.

A hypothesis test runs random writes, overwrites, deletes, expiries, evictions and purges on
two stores side by side: one purges by :class:`~adcp_stale_cache.ops.control.Selection` (the
index), the other by a plain callable asking the same question of every entry (the scan).
After every step both hold the same entries with the same marks, every purge counts the
same, and the index holds exactly the (label, key) pairs of the entries held.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.labels import built_from
from adcp_stale_cache.ops.control import Selection
from adcp_stale_cache.stores import MemoryStore
from adcp_stale_cache.stores import sqlite as sqlite_store
from adcp_stale_cache.stores.label_index import LabelIndex, selected_by
from adcp_stale_cache.stores.sqlite import SqliteStore

from ..conftest import FakeClock

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis (dev extra) is needed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEYS = [f"k{i}" for i in range(8)]
# With from= labels: an entry may be built from another, or from itself.
LABELS = ["upstream=a", "upstream=b", "surface=s", "tag=x", "tag=y", "partition=p",
          built_from("k0"), built_from("k1")]  # fmt: skip


def memory_pairs(store: MemoryStore) -> set[tuple[str, str]]:
    """The (label, key) pairs of every item the memory store holds, expired or not."""
    return {(label, key) for key, (entry, _) in store._items.items() for label in entry.labels}


def scanned(match: Callable[[str, Entry], bool]) -> Callable[[str, Entry], bool]:
    """The same question as ``match``, as a plain callable: the store must scan."""
    return lambda key, entry: match(key, entry)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS),
                  st.lists(st.sampled_from(LABELS), unique=True, max_size=4),
                  st.integers(0, 300), st.sampled_from([5.0, 50.0, 500.0])),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 10.0, 100.0])),
        st.tuples(st.just("purge"),
                  st.lists(st.sampled_from(LABELS), unique=True, min_size=1, max_size=2),
                  st.one_of(st.none(), st.sampled_from(KEYS)), st.booleans()),
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_memory_purge_by_index_selects_what_a_scan_selects(ops: list[tuple[Any, ...]]) -> None:
    asyncio.run(_memory_twins(ops))


async def _twin_step(op: tuple[Any, ...], clock: FakeClock, indexed: Any, scanning: Any) -> Any:
    """One operation on both twins (a purge through the index in one, by scanning in the
    other, counting alike); the purge's selection, or None."""
    if op[0] == "set":
        _, key, labels, size, ttl = op
        entry = Entry(b"x" * size, clock(), tuple(labels))
        for store in (indexed, scanning):
            await store.set(key, entry, ttl)
    elif op[0] == "delete":
        for store in (indexed, scanning):
            await store.delete(op[1])
    elif op[0] == "advance":
        clock.advance(op[1])
    else:
        _, labels, store_key, soft = op
        selection = Selection(frozenset(labels), store_key)
        counted = await indexed.purge(selection, soft=soft)
        assert counted == await scanning.purge(scanned(selection), soft=soft)
        return selection
    return None


async def _memory_twins(ops: list[tuple[Any, ...]]) -> None:
    clock = FakeClock()
    # Small bounds: writes evict by count and by bytes.
    indexed, scanning = (MemoryStore(max_entries=5, max_bytes=1500, clock=clock) for _ in "ab")
    for op in ops:
        selection = await _twin_step(op, clock, indexed, scanning)
        if selection is not None and not op[3]:  # a hard purge leaves nothing it selected
            assert not [e for k, e in await indexed.scan() if selection(k, e)]
        assert sorted(await indexed.scan(), key=str) == sorted(await scanning.scan(), key=str)
        assert indexed._index.pairs() == memory_pairs(indexed)
        assert await indexed.generation() == await scanning.generation()


async def test_memory_index_follows_overwrite_eviction_expiry_and_delete() -> None:
    clock = FakeClock()
    store = MemoryStore(max_entries=2, clock=clock)
    index = store._index
    await store.set("a", Entry(b"1", clock(), ("tag=x",)), 10)
    await store.set("a", Entry(b"2", clock(), ("tag=y",)), 10)  # overwrite: new labels
    assert index.pairs() == {("tag=y", "a")}
    await store.set("b", Entry(b"3", clock(), ("tag=y",)), 100)
    await store.set("c", Entry(b"4", clock(), ("tag=z",)), 100)  # evicts a (least recent)
    assert index.pairs() == {("tag=y", "b"), ("tag=z", "c")}
    clock.advance(200)
    await store.set("d", Entry(b"5", clock(), ("tag=w",)), 100)  # b, c expire on this write
    assert index.pairs() == {("tag=w", "d")}
    await store.delete("d")
    assert index.pairs() == set() and len(index) == 0
    # A value already expired when written, and one too large to keep, are not indexed.
    await store.set("e", Entry(b"6", clock(), ("tag=v",)), 0)
    await store.set("f", Entry(b"x" * (store.max_bytes + 1), clock(), ("tag=v",)), 10)
    assert index.pairs() == set()


async def test_memory_purge_by_tag_reads_only_the_tagged_entries() -> None:
    store = MemoryStore(max_entries=10_000)
    for i in range(1000):
        await store.set(
            f"k{i}", Entry(b"v", 0.0, ("upstream=u", *(["tag=t"] if i % 10 == 0 else []))), 1e9
        )
    asked: list[str] = []

    class Counting(Selection):
        def __call__(self, key: str, entry: Entry) -> bool:
            asked.append(key)
            return super().__call__(key, entry)

    assert await store.purge(Counting(frozenset({"tag=t"})), soft=True) == 100
    assert len(asked) == 100  # the scan asked all 1,000
    assert await store.purge(Counting(frozenset({"tag=nothing"})), soft=True) == 0
    assert len(asked) == 100 and await store.generation() == 2  # counted all the same
    revalidating = {k for k, e in await store.scan() if e.revalidate}
    assert revalidating == {f"k{i}" for i in range(0, 1000, 10)}


async def test_memory_index_does_not_grow_with_churn() -> None:
    """Entries with ever new tags pass through a bounded store: the index holds what the
    entries hold, and the bytes it takes after a second round of churn are those after the
    first."""
    store = MemoryStore(max_entries=1000)

    async def churn(start: int) -> None:
        for i in range(start, start + 20_000):
            await store.set(f"k{i}", Entry(b"v", 0.0, (f"tag=t{i}", "upstream=u")), 1e9)

    await churn(0)
    tracemalloc.start()  # it counts what is allocated while it runs: two rounds are compared
    await churn(20_000)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    await churn(40_000)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(store._index) == 1001  # 1,000 tags of the entries held, and the upstream
    assert len(store._index.pairs()) == 2000
    assert grown < 50_000, grown  # 20,000 more entries went through: nothing piled up


def test_a_selection_names_labels_narrowest_first_and_a_callable_names_none() -> None:
    selection = Selection(frozenset({"upstream=u", "tag=t", "surface=s"}))
    assert selected_by(selection) == (["tag=t", "surface=s", "upstream=u"], None, None)
    # A key names the label of the entries built from it too (see Selection.from_key).
    assert selected_by(Selection(frozenset(), "key")) == ([], "key", "from=key")
    assert selected_by(lambda key, entry: True) is None
    index = LabelIndex()
    index.add("a", ["tag=t", "upstream=u"])
    index.add("b", ["upstream=u"])
    assert index.candidates(["tag=t", "upstream=u"]) == ["a"]
    assert index.candidates(["tag=none", "upstream=u"]) == []


def file_rows(path: Path) -> list[tuple[Any, ...]]:
    """What a file holds, as a purge leaves it (a tombstone's time is the purge's own)."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT key, flags, labels, data, CASE WHEN flags & 2 THEN 0 ELSE stored_at END "
            "FROM entries ORDER BY key"
        ).fetchall()
    return rows


def file_index_is_exact(path: Path) -> None:
    """Every entry's labels are indexed (or queued to be), and nothing else is."""
    with sqlite3.connect(path) as db:
        pairs = set(db.execute("SELECT label, key FROM labels"))
        queued = {key for (key,) in db.execute("SELECT key FROM unindexed")}
        entries = dict(db.execute("SELECT key, labels FROM entries"))
    expected = {
        (label, key) for key, labels in entries.items() if key not in queued
        for label in (labels.split("\n") if labels else ())
    }  # fmt: skip
    assert pairs == expected and queued <= set(entries)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(operations)
def test_file_purge_by_index_selects_what_a_scan_selects(
    tmp_path: Path, ops: list[tuple[Any, ...]]
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    asyncio.run(_file_twins(folder, ops))


class _FakeTime:
    """``time`` for the file store's module: its wall clock is the test's."""

    def __init__(self, clock: FakeClock) -> None:
        self.time = clock
        self.monotonic = time.monotonic
        self.perf_counter = time.perf_counter


async def _file_twins(folder: Path, ops: list[tuple[Any, ...]]) -> None:
    clock = FakeClock(1_000_000.0)
    # A generous bound on each query: on a loaded machine the default (0.6 s with the queue)
    # dropped writes in one twin and not the other, which is the store's fault handling, not
    # what this compares.
    stores = [SqliteStore(folder / f"{name}.db", max_entries=5, max_bytes=1500, busy_timeout_seconds=5)
              for name in ("indexed", "scanning")]  # fmt: skip
    try:
        with mock.patch("adcp_stale_cache.stores.sqlite.time", _FakeTime(clock)):
            for store in stores:
                store.clock = clock  # type: ignore[method-assign]
                assert await store.generation() == 0  # the file opened
            await _run_file_twins(clock, folder, stores, ops)
    finally:
        for store in stores:
            store.close()


async def _run_file_twins(
    clock: FakeClock, folder: Path, stores: list[SqliteStore], ops: list[tuple[Any, ...]]
) -> None:
    indexed, scanning = stores
    for op in ops:
        await _twin_step(op, clock, indexed, scanning)
        assert file_rows(folder / "indexed.db") == file_rows(folder / "scanning.db")
        file_index_is_exact(folder / "indexed.db")
    assert indexed.failures == scanning.failures == 0


def old_file(path: Path, rows: list[tuple[str, tuple[str, ...]]]) -> None:
    """A file as the release before the index wrote it (format 3, no label index)."""
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(f"{sqlite_store._SCHEMA} PRAGMA user_version = 3;")
        for key, labels in rows:
            old_write(db, key, labels)
    db.close()


def old_write(db: sqlite3.Connection, key: str, labels: tuple[str, ...]) -> None:
    """One write as the release before the index made it (its very statement)."""
    data, now = b'{"products": []}', time.time()
    db.execute(sqlite_store._UPSERT, (key, now, now + 3600, len(data) + 120, zlib.crc32(data),
                                      "\n".join(labels), 0, None, data))  # fmt: skip


async def test_a_file_from_before_the_index_opens_indexed_and_its_entries_purge(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old_file(path, [(f"k{i}", ("upstream=u", f"tag=t{i % 3}")) for i in range(30)])
    store = SqliteStore(path)
    try:
        assert await store.get("k0") is not None  # opened, not emptied
        file_index_is_exact(path)
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT count(*) FROM labels").fetchone() == (60,)
        assert await store.purge(Selection(frozenset({"tag=t0"})), soft=False) == 10
        assert await store.get("k0") is not None and (await store.get("k0")).tombstone  # type: ignore[union-attr]
        assert not (await store.get("k1")).tombstone  # type: ignore[union-attr]
        # A process of the release before keeps writing the file: its entries purge too.
        with sqlite3.connect(path, isolation_level=None) as db:
            old_write(db, "late", ("upstream=u", "tag=t0"))
            old_write(db, "k1", ("upstream=u", "tag=t0"))  # relabelled by it
        assert await store.purge(Selection(frozenset({"tag=t0"})), soft=True) == 2
        file_index_is_exact(path)
        assert (await store.get("late")).revalidate  # type: ignore[union-attr]
        assert (await store.get("k1")).revalidate  # type: ignore[union-attr]
    finally:
        store.close()


async def test_file_purge_by_tag_reads_only_the_tagged_entries(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "cache.db")
    try:
        for i in range(300):
            labels = ("upstream=u", *(["tag=t"] if i % 10 == 0 else []))
            await store.set(f"k{i}", Entry(b"v", time.time(), labels), 3600)
        asked: list[str] = []

        class Counting(Selection):
            def __call__(self, key: str, entry: Entry) -> bool:
                asked.append(key)
                return super().__call__(key, entry)

        assert await store.purge(Counting(frozenset({"tag=t", "upstream=u"})), soft=True) == 30
        assert len(asked) == 30  # a scan asks all 300
        await store.delete("k0")
        await store.set("k10", Entry(b"v", time.time(), ("upstream=u",)), 3600)  # untagged
        assert await store.purge(Counting(frozenset({"tag=t"})), soft=True) == 28
        file_index_is_exact(tmp_path / "cache.db")
    finally:
        store.close()


@pytest.mark.parametrize("soft", [False, True])
async def test_a_key_purge_selects_an_entry_built_from_itself_once(
    tmp_path: Path, soft: bool
) -> None:
    """A flight that read its own key's entry labels it built from itself: a purge of that
    key lists it twice (the key, and what is built from it) and must count and drop it once
    (a hard purge raised KeyError, before counting, in the memory store)."""
    file = SqliteStore(tmp_path / "cache.db")
    try:
        for store in (MemoryStore(), file):
            await store.set("K", Entry(b"v", 0.0, (built_from("K"),)), 60)
            before = await store.generation()
            assert await store.purge(Selection(frozenset(), store_key="K"), soft=soft) == 1
            assert await store.generation() != before
            held = await store.get("K")
            assert (held is not None and held.revalidate) if soft else not held or held.tombstone
    finally:
        file.close()
