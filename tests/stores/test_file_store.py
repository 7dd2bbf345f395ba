"""The file store (SQLite): bounds, sharing between processes, faults, restarts (issue 13)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache, collect_advisories
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.demo.processes import App, free_port
from adcp_stale_cache.stores import MemoryStore, TieredStore
from adcp_stale_cache.stores.sqlite import SqliteStore

from ..conftest import CountingUpstream
from ..servers import START_SECONDS

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=1,
                       max_stale_seconds=600, upstream_timeout_seconds=2)  # fmt: skip
INVENTORY = Upstream(name="inventory-service")


def remove_wal(path: Path, including_the_file: bool = False) -> bytes:
    """Remove the WAL files (and the database file too); the database's bytes before."""
    content = path.read_bytes() if path.exists() else b""
    for suffix in ("-wal", "-shm", *([""] if including_the_file else [])):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return content


def remount(fs: Path, mode: str) -> None:
    # A file the store's thread is still closing keeps the filesystem busy for a moment
    # (exit status 32): try again, for at most 10 s.
    for _ in range(100):
        if subprocess.run(["mount", "-o", f"remount,{mode}", str(fs)]).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["mount", "-o", f"remount,{mode}", str(fs)], check=True)


@pytest.fixture(params=[False, True], ids=["reads-in-thread", "reads-on-loop"])
def store(tmp_path: Path, request: Any) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "cache.db", retry_after_seconds=0.05, read_on_loop=request.param)
    yield s
    s.close()


async def test_roundtrip_expiry_and_wall_clock_ages(store: SqliteStore) -> None:
    entry = Entry(b'{"products": [1]}', time.time() - 30)
    await store.set("k", entry, 60)
    assert await store.get("k") == entry
    await store.set("gone", entry, 0.01)
    await asyncio.sleep(0.02)
    assert await store.get("gone") is None and await store.get("absent") is None
    await store.delete("k")
    assert await store.get("k") is None


async def test_bounded_by_entries_and_bytes_oldest_first(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db", max_entries=10, max_bytes=10 * (1000 + 120))
    for i in range(25):
        await store.set(f"k{i}", Entry(b"x" * 1000, 1000.0 + i), 3600)
    count, size = await store.totals()
    assert count <= 10 and size <= store.max_bytes
    assert await store.get("k24") is not None and await store.get("k0") is None
    await store.set("big", Entry(b"x" * 20_000, 2000.0), 3600)  # over the byte bound alone
    assert await store.get("big") is None
    store.close()


async def test_two_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    writer, reader = SqliteStore(path), SqliteStore(path)
    entry = Entry(b"{}", time.time())
    await writer.set("k", entry, 60)
    assert await reader.get("k") == entry
    writer.close()
    reader.close()


async def test_a_restart_keeps_serving_stale_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    inventory = CountingUpstream()
    first = UpstreamCache(TieredStore(SqliteStore(path)), surfaces=Surfaces.of(POLICY))
    await first.fetch(INVENTORY, "k", inventory, surface=POLICY)
    inventory.down = True
    await asyncio.sleep(1.1)
    restarted = UpstreamCache(TieredStore(SqliteStore(path)), surfaces=Surfaces.of(POLICY))
    with collect_advisories() as advisories:
        value = await restarted.fetch(INVENTORY, "k", inventory, surface=POLICY)
    assert value == {"products": [1]}
    assert advisories.errors()[0]["details"]["cache_age_seconds"] >= 1


async def test_the_first_open_has_its_own_bound_and_a_reopen_the_lock_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI's run at 5671eb8: a restarted store's first operation, the file's open, took past
    the 0.6 s a request waits on a loaded host; the store stayed away and the restart served
    no stale entry. The first open is bounded by ``open_timeout_seconds`` instead."""
    path = tmp_path / "cache.db"
    store = SqliteStore(path, retry_after_seconds=0.01)
    opened = store._open

    def slow_open() -> Any:
        time.sleep(1.0)  # past two lock waits (0.6 s), within the open's 5 s
        return opened()

    monkeypatch.setattr(store, "_open", slow_open)
    try:
        await store.set("k", Entry(b"{}", time.time()), 60)
        assert store.failures == 0 and await store.get("k") is not None
        remove_wal(path, including_the_file=True)  # the next write reopens: a lock wait's bound
        started = time.monotonic()
        await store.set("k2", Entry(b"{}", time.time()), 60)
        assert store.failures == 1
        assert time.monotonic() - started < 1.0
    finally:
        store.close()


async def test_another_schema_version_is_never_read(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    calls: list[int] = []

    async def inventory() -> dict[str, Any]:
        calls.append(1)
        return {"products": [len(calls)]}

    v1 = UpstreamCache(SqliteStore(path), surfaces=Surfaces.of(POLICY), schema_version="1")
    await v1.fetch(INVENTORY, "k", inventory, surface=POLICY)
    v2 = UpstreamCache(SqliteStore(path), surfaces=Surfaces.of(POLICY), schema_version="2")
    assert await v2.fetch(INVENTORY, "k", inventory, surface=POLICY) == {"products": [2]}
    again = UpstreamCache(SqliteStore(path), surfaces=Surfaces.of(POLICY), schema_version="2")
    assert await again.fetch(INVENTORY, "k", inventory, surface=POLICY) == {"products": [2]}


async def test_garbage_and_truncated_files_are_replaced(tmp_path: Path, caplog: Any) -> None:
    for name, content in (("garbage.db", os.urandom(4096)), ("truncated.db", None)):
        path = tmp_path / name
        if content is None:  # a real database cut short
            whole = SqliteStore(path)
            for i in range(200):
                await whole.set(f"k{i}", Entry(b"x" * 500, time.time()), 60)
            whole.close()
            content = remove_wal(path)[: path.stat().st_size // 2]
        path.write_bytes(content)
        store = SqliteStore(path, busy_timeout_seconds=5)  # replaces the file: see below
        entry = Entry(b"{}", time.time())
        await store.get("k")  # never raises, whatever the file holds
        await store.set("k", entry, 60)
        assert await store.get("k") == entry, name
        store.close()
    assert "file_store_replaced" in caplog.text


@pytest.mark.parametrize("read_on_loop", [False, True], ids=["reads-in-thread", "reads-on-loop"])
async def test_deleted_while_running_is_recreated(tmp_path: Path, read_on_loop: bool) -> None:
    # Closing the deleted file and making a new one outlasted a request's 0.6 s wait in CI's
    # 3.10 lane, beside the main tests: this test gives the store time, as an operator would.
    store = SqliteStore(tmp_path / "cache.db", busy_timeout_seconds=5, read_on_loop=read_on_loop)
    try:
        await store.set("k", Entry(b"{}", time.time()), 60)
        remove_wal(store.path, including_the_file=True)
        await store.set("k2", Entry(b"{}", time.time()), 60)
        assert store.path.exists() and await store.get("k2") is not None
        assert store.failures == 0
    finally:
        store.close()


async def test_an_unusable_path_degrades_to_no_entry_with_one_line(
    tmp_path: Path, caplog: Any
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    store = SqliteStore(tmp_path / "a-file" / "cache.db", retry_after_seconds=0.01)
    cache = UpstreamCache(TieredStore(store), surfaces=Surfaces.of(POLICY))

    async def inventory() -> dict[str, Any]:
        return {"products": [1]}

    assert await cache.fetch(INVENTORY, "k", inventory, surface=POLICY) == {"products": [1]}
    for _ in range(5):
        await asyncio.sleep(0.02)
        assert await store.get("k") is None
        await store.set("k", Entry(b"{}", time.time()), 60)
    assert store.failures >= 5
    assert caplog.text.count("file_store_unavailable") == 1
    store.close()


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None,
    reason="mounts a tmpfs (root; CI runs as root)",
)


@needs_root
async def test_read_only_and_full_filesystems_degrade_and_recover(tmp_path: Path) -> None:
    memory = MemoryStore(clock=time.time)
    with small_filesystem(tmp_path / "fs", "256k") as fs:
        # Full and read-only filesystems fail at once; the wait covers the file's recreation.
        store = SqliteStore(fs / "cache.db", retry_after_seconds=0.01, busy_timeout_seconds=5)
        cache = UpstreamCache(TieredStore(store, memory), surfaces=Surfaces.of(POLICY))
        served = 0

        async def inventory() -> dict[str, Any]:
            return {"products": ["x" * 4000]}

        for i in range(200):  # fills the 256 KiB filesystem: writes fail, answers do not
            await cache.fetch(INVENTORY, f"k{i}", inventory, surface=POLICY)
            served += 1
        assert served == 200 and store.failures > 0
        # Linux refuses a read-only remount while a file is open for writing, and the last
        # write may have fitted: one that cannot fit fails, and the store closes its file.
        await asyncio.sleep(store.retry_after_seconds * 2)  # past the stay away from the file
        assert store.available
        failures = store.failures
        await store.set("too-big", Entry(b"x" * 300_000, time.time()), 60)
        assert store.failures == failures + 1
        remount(fs, "ro")
        await asyncio.sleep(0.02)
        for i in range(5):
            await cache.fetch(INVENTORY, f"ro{i}", inventory, surface=POLICY)
        remount(fs, "rw")
        remove_wal(store.path, including_the_file=True)
        await asyncio.sleep(0.02)
        await store.set("back", Entry(b"{}", time.time()), 60)
        assert await store.get("back") is not None  # recovered on a fresh file
        store.close()


# Real processes: the example seller restarted on its file (the acceptance of issue 13).
def stale(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body.get("errors", []) if e["code"] == "STALE_RESPONSE"]


def test_seller_sigkilled_and_restarted_serves_stale_from_its_file(tmp_path: Path) -> None:
    inventory = App("inventory-service", free_port(), "--products", "4").start().wait(START_SECONDS)
    cache_file = str(tmp_path / "seller.db")
    flags = ("--inventory-service", inventory.url, "--freshness-target", "1",
             "--max-stale", "3600", "--upstream-timeout", "1", "--cache-file", cache_file)  # fmt: skip
    seller = App("seller", free_port(), *flags).start().wait(START_SECONDS)
    other: App | None = None
    try:
        warm = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        stored = time.time()
        products = warm.json()["products"]
        assert warm.status_code == 200 and len(products) == 4 and not stale(warm.json())
        inventory.kill()
        seller.kill()  # SIGKILL: no shutdown, no flush
        time.sleep(1.2)
        seller = App("seller", seller.port, *flags).start().wait(START_SECONDS)
        answer = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        [advisory] = stale(answer.json())
        assert answer.status_code == 200 and answer.json()["products"] == products
        assert advisory["details"]["cache_age_seconds"] >= int(time.time() - stored) - 1 >= 0
        # A second process on the same file, never warmed, serves the first one's entry.
        other = App("seller", free_port(), *flags).start().wait(START_SECONDS)
        cold = httpx.post(f"{other.url}/api/get_products", json={}, timeout=10)
        assert cold.status_code == 200 and cold.json()["products"] == products
        assert len(stale(cold.json())) == 1
        # Another schema version never reads it: the spec's failure, no stale data.
        v2 = App("seller", free_port(), *flags, "--schema-version", "2").start().wait(START_SECONDS)
        try:
            failed = httpx.post(f"{v2.url}/api/get_products", json={}, timeout=10)
            assert failed.status_code == 503 and "products" not in failed.json()
        finally:
            v2.stop()
    finally:
        for app in (seller, other, inventory):
            if app is not None:
                app.stop()


def test_a_garbage_cache_file_does_not_stop_the_seller(tmp_path: Path) -> None:
    cache_file = tmp_path / "seller.db"
    cache_file.write_bytes(os.urandom(10_000))
    inventory = App("inventory-service", free_port()).start().wait(START_SECONDS)
    seller = App("seller", free_port(), "--inventory-service", inventory.url,
                 "--cache-file", str(cache_file)).start().wait(START_SECONDS)  # fmt: skip
    try:
        answer = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        assert answer.status_code == 200 and answer.json()["products"]
    finally:
        seller.stop()
        inventory.stop()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"store": "sqlite:///var/cache/seller.db"}, "/var/cache/seller.db"),
        ({"store": {"file_path": "/tmp/x.db"}}, "/tmp/x.db"),
    ],
)
def test_config_builds_memory_over_the_file(setting: dict[str, Any], expected: str) -> None:
    from adcp_stale_cache.ops.config import StaleCacheConfig

    config = StaleCacheConfig.from_mapping({**setting, "schema_version": "7"})
    store = config.build_store()
    assert isinstance(store, TieredStore) and isinstance(store.near, MemoryStore)
    assert isinstance(store.far, SqliteStore) and str(store.far.path) == expected
    assert config.build_cache(store=store).settings.schema_version == "7"


def test_store_urls_from_the_environment_and_bad_ones(tmp_path: Path) -> None:
    from adcp_stale_cache.ops.config import ConfigError, load_config

    config = load_config(environ={"ADCP_STALE_CACHE_STORE": f"sqlite://{tmp_path}/c.db"})
    assert config.store.file_path == f"{tmp_path}/c.db"
    with pytest.raises(ConfigError, match="not a store URL"):
        load_config(environ={"ADCP_STALE_CACHE_STORE": "sqlite:/relative.db"})


def test_three_workers_share_the_file_through_an_outage(tmp_path: Path) -> None:
    inventory = App("inventory-service", free_port(), "--products", "3").start().wait(START_SECONDS)
    seller = App("seller", free_port(), "--inventory-service", inventory.url,
                 "--freshness-target", "1", "--upstream-timeout", "1",
                 "--cache-file", str(tmp_path / "seller.db"), "--workers", "3").start().wait(START_SECONDS)  # fmt: skip
    try:
        warm = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
        products = warm.json()["products"]
        inventory.kill()
        time.sleep(1.2)
        for _ in range(12):  # a new connection each: the workers take turns
            answer = httpx.post(f"{seller.url}/api/get_products", json={}, timeout=10)
            assert answer.status_code == 200 and answer.json()["products"] == products
            assert len(stale(answer.json())) == 1
    finally:
        seller.stop()
        inventory.stop()


def test_store_failures_are_a_metric(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from adcp_stale_cache.ops.metrics import PrometheusMetrics

    (tmp_path / "a-file").write_text("")
    file = SqliteStore(tmp_path / "a-file" / "c.db")
    store = TieredStore(file, MemoryStore())
    registry = CollectorRegistry()
    PrometheusMetrics(registry, store=store)

    async def use() -> None:
        await store.set("k", Entry(b"{}", time.time()), 60)

    asyncio.run(use())
    text = generate_latest(registry).decode()
    assert 'adcp_stale_cache_store_failures{store="SqliteStore"} 1.0' in text
    assert "adcp_stale_cache_store_entries 1.0" in text
    file.close()


async def test_a_file_locked_by_another_process_costs_a_bounded_wait(store: SqliteStore) -> None:
    import sqlite3

    await store.set("k", Entry(b"{}", time.time()), 60)
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another worker holds the write lock
    try:
        started = time.monotonic()
        await store.set("k2", Entry(b"{}", time.time()), 60)  # waits, then gives up
        assert time.monotonic() - started < 2 * store.busy_timeout_seconds + 0.5
        assert store.failures == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    await asyncio.sleep(store.retry_after_seconds)
    await store.set("k3", Entry(b"{}", time.time()), 60)
    assert await store.get("k3") is not None  # and it carries on


async def test_a_purge_at_the_default_bound_reports_what_it_did(tmp_path: Path) -> None:
    """Issue 22, item 12: a purge of every row of a full file (100,000 entries, 5 tags each)
    outlived the per-query deadline. It raised PurgeIncomplete ("0 entries taken") and kept
    the store away for a second, while the store's thread went on to commit it."""
    from adcp_stale_cache.ops.control import CacheControl

    path = tmp_path / "cache.db"
    store = SqliteStore(path)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY))
    assert await store.generation() == 0  # the schema is in place
    now, tags = time.time(), [f"tag=t{i}" for i in range(4)]
    rows = [
        (f"k{i}", now, now + 600, 40, 0, "\n".join(["upstream=inventory-service", *tags]), 0,
         None, b"")
        for i in range(100_000)
    ]  # fmt: skip
    with contextlib.closing(__import__("sqlite3").connect(path)) as db:
        from adcp_stale_cache.stores.sqlite import _UPSERT

        db.executemany(_UPSERT, rows)
        db.commit()
    assert (await store.totals())[0] == 100_000
    purged = await CacheControl(cache).invalidate(tags=["t1"], soft=False)
    assert purged == 100_000
    assert store.available and store.failures == 0
    assert await store.generation() == 1
    store.close()


async def replaced_under(reader: SqliteStore) -> SqliteStore:
    """Replace the file ``reader`` reads ("k": "old file") as an operator's rm or another
    process's swap would, with "k": "new file"; ``reader`` reads the old file or the new one
    within its ``replaced_file_check_seconds``, the new one after. The new file's writer."""
    remove_wal(reader.path, including_the_file=True)
    writer = SqliteStore(reader.path, busy_timeout_seconds=5)
    await writer.set("k", Entry(b"new file", time.time()), 600)
    early = await reader.get("k")  # within the period: the file it opened, or the new one
    assert early is None or early.data in (b"old file", b"new file")
    await asyncio.sleep(reader.replaced_file_check_seconds + 0.05)
    found = await reader.get("k")
    assert found is not None and found.data == b"new file"
    assert reader.failures == 0
    return writer


async def test_a_reader_on_the_loop_notices_a_replaced_file_and_a_busy_read_is_no_outage(
    tmp_path: Path,
) -> None:
    """Issue 22, Low: with ``read_on_loop`` a process that only read kept reading a file that
    another process had replaced (deleted and recreated), and one busy read kept the whole
    store away for a second. Reads on the loop check the file every
    ``replaced_file_check_seconds`` (a stat each read was a sixth of a file hit)."""
    path = tmp_path / "cache.db"
    reader = SqliteStore(path, read_on_loop=True, busy_timeout_seconds=5)  # reopens a new file
    reader.replaced_file_check_seconds = 0.2
    await reader.set("k", Entry(b"old file", time.time()), 600)
    assert (await reader.get("k")).data == b"old file"  # type: ignore[union-attr]
    writer = await replaced_under(reader)

    class Busy:  # the on-loop connection answers "database is locked" once
        def __init__(self, connection: Any) -> None:
            self.connection, self.busy = connection, True

        def execute(self, *args: Any) -> Any:
            if self.busy:
                self.busy = False
                raise __import__("sqlite3").OperationalError("database is locked")
            return self.connection.execute(*args)

        def close(self) -> None:
            self.connection.close()

    reader._reader = Busy(reader._reader)  # type: ignore[assignment]
    found = await reader.get("k")
    assert found is not None and found.data == b"new file"  # read through the thread
    assert reader.available and reader.failures == 0
    reader.close()
    writer.close()


async def test_reads_in_the_thread_check_the_file_once_a_period_and_writes_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a read through the store's thread checked the file (a stat) every time, 6%
    of a hit there. It now trusts a check made within ``replaced_file_check_seconds``, as
    reads on the loop do; a write still checks each time."""
    import adcp_stale_cache.stores.sqlite as sqlite_module

    stats: list[Path] = []
    real_inode = sqlite_module._inode

    def counted(path: Path) -> int | None:
        stats.append(path)
        return real_inode(path)

    monkeypatch.setattr(sqlite_module, "_inode", counted)
    path = tmp_path / "cache.db"
    reader = SqliteStore(path, read_on_loop=False, busy_timeout_seconds=5)
    reader.replaced_file_check_seconds = 0.3
    await reader.set("k", Entry(b"old file", time.time()), 600)
    stats.clear()
    for _ in range(20):
        found = await reader.get("k")
        assert found is not None and found.data == b"old file"
    assert len(stats) <= 1, len(stats)  # the write's check still stands
    await reader.set("k2", Entry(b"{}", time.time()), 600)
    await reader.set("k3", Entry(b"{}", time.time()), 600)
    assert len(stats) >= 2  # each write checks
    writer = await replaced_under(reader)
    reader.close()
    writer.close()


async def test_a_slow_read_on_the_loop_sends_reads_to_the_thread_for_a_while(
    tmp_path: Path,
) -> None:
    """Issue 26: hits are read on the loop by default; reads that hold the loop longer than
    ``slow_read_seconds`` on average (a cold disk) send the next reads through the store's
    thread until ``slow_read_pause_seconds`` have passed, then the loop reads again. One
    slow read alone (the machine paused the process) does not."""
    store = SqliteStore(tmp_path / "cache.db")
    assert store.read_on_loop  # the default
    await store.set("k", Entry(b"v", time.time()), 600)
    assert await store.get("k") is not None  # opens the reader
    loop_reads: list[str] = []

    class Slow:  # the on-loop connection, on a disk that takes 10 ms for the next reads
        def __init__(self, connection: Any) -> None:
            self.connection, self.slow = connection, 0

        def execute(self, *args: Any) -> Any:
            loop_reads.append(args[1][0])
            if self.slow:
                self.slow -= 1
                time.sleep(0.01)
            return self.connection.execute(*args)

        def close(self) -> None:
            self.connection.close()

    slow = Slow(store._reader)
    store._reader = slow  # type: ignore[assignment]
    store.slow_read_pause_seconds = 0.3
    slow.slow = 1  # one slow read among fast ones: reads stay on the loop
    for _ in range(10):
        assert await store.get("k") is not None
    assert len(loop_reads) == 10
    slow.slow = 100  # a slow disk: after a few reads, the thread reads
    for _ in range(10):
        found = await store.get("k")
        assert found is not None and found.data == b"v"
    assert 12 <= len(loop_reads) <= 15, len(loop_reads)
    read = len(loop_reads)
    await asyncio.sleep(0.35)
    assert (await store.get("k")) is not None and len(loop_reads) == read + 1  # the loop again
    assert store.failures == 0
    store.close()


@pytest.mark.parametrize("round_", range(8))  # a lost read shows in about one round of three
def test_a_store_shared_by_threads_reads_on_each_loop(tmp_path: Path, round_: int) -> None:
    """Sellers that run each request on a loop of its own in a worker thread share one
    store: its reader connection is then used by several threads at once (SQLite's own
    serialised mode), and each thread reads what it has just written. A read begun in
    another thread held the connection's snapshot, from before that write: a miss."""
    import threading

    # Each operation is bounded at twice busy_timeout: on a busy machine four threads' queued
    # writes outran the default 0.25 s, the store went unavailable and every read missed. A
    # long bound leaves only the miss this test is about.
    store = SqliteStore(tmp_path / "cache.db", busy_timeout_seconds=30)
    asyncio.run(store.set("seed", Entry(b"seed", time.time()), 600))
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        async def run() -> None:
            for i in range(100):
                await store.set(f"{n}-{i}", Entry(f"{n}-{i}".encode(), time.time()), 600)
                for _ in range(3):
                    found = await store.get(f"{n}-{i}")
                    assert found is not None and found.data == f"{n}-{i}".encode(), (n, i)

        try:
            asyncio.run(run())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert store.failures == 0
    store.close()


async def test_a_read_on_the_loop_survives_the_thread_reopening_the_file_under_it(
    tmp_path: Path,
) -> None:
    """A read on the loop takes the reader connection, then the store's thread reopens the
    file (replaced by another process, noticed by another loop's write; or closed after
    another operation's failure) before that read runs. Before, the thread closed the reader
    under it: the read failed ("Cannot operate on a closed database"), was counted as a
    failure of the file and kept the whole store away for ``retry_after_seconds`` (every
    request a miss, the stale fallback unreachable), while the file was fine."""
    path = tmp_path / "cache.db"
    store = SqliteStore(path)
    await store.set("k", Entry(b"v", time.time()), 600)
    assert await store.get("k") is not None  # opens the reader
    replaced = SqliteStore(tmp_path / "other.db")  # another process's new file
    await replaced.set("k", Entry(b"new", time.time()), 600)
    replaced.close()

    class Reopened:  # the thread reopens the file between the read's taking and its query
        def __init__(self, connection: Any) -> None:
            self.connection, self.first = connection, True

        def execute(self, *args: Any) -> Any:
            if self.first:
                self.first = False
                remove_wal(path)
                os.replace(tmp_path / "other.db", path)
                # Another loop's write: it closes this reader once this read is done (a
                # close mid-query crashed the process), so it is not waited for here.
                self.reopening = store._thread.submit(store._connection)
            return self.connection.execute(*args)

        def close(self) -> None:
            self.connection.close()

    reader = Reopened(store._reader)
    store._reader = reader  # type: ignore[assignment]
    found = await store.get("k")
    assert found is not None  # what the file held when the read began (or the new one)
    await asyncio.wrap_future(reader.reopening)
    assert store.failures == 0 and store.available
    found = await store.get("k")
    assert found is not None and found.data == b"new"
    store.close()


async def test_a_reader_closed_while_the_loop_reads_never_crashes(tmp_path: Path) -> None:
    """The store's thread closes the loop's reader (a replaced file, a failed operation) while
    the loop reads through it: the read retries through the thread; the process never crashes
    (closing a connection mid-query was a SIGSEGV, seen on Python 3.13)."""
    store = SqliteStore(tmp_path / "cache.db", read_on_loop=True)
    entry = Entry(b"x" * 200_000, time.time())
    await store.set("k", entry, 60)
    until = time.monotonic() + 2

    def closes() -> None:  # what a replaced file or a failure does, as often as it can
        while time.monotonic() < until:
            store._thread.submit(store._close).result(5)
            store._thread.submit(store._connection).result(5)

    closer = asyncio.get_running_loop().run_in_executor(None, closes)
    reads = 0
    while time.monotonic() < until:
        assert await store.get("k") in (entry, None)
        reads += 1
    await closer
    assert reads > 0
    store.close()
