"""A file store (SQLite, stdlib): entries survive restarts, and a host's workers share them.

WAL mode; one thread per store owns the connection, hits are read on the loop; a fault answers
"no entry" and the file is reopened, or replaced when unreadable. Design: docs/durability.md."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..core.callables import bounded
from ..core.entry import Entry, Terms
from .label_index import selected_by

logger = logging.getLogger("adcp_stale_cache.sqlite")

T = TypeVar("T")

# The file's own format (PRAGMA user_version): a file of another format is emptied, not read.
FILE_FORMAT = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    stored_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    size INTEGER NOT NULL,
    checksum INTEGER NOT NULL,
    labels TEXT NOT NULL,
    flags INTEGER NOT NULL,
    terms BLOB,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_age ON entries (stored_at);
CREATE TABLE IF NOT EXISTS totals (
    id INTEGER PRIMARY KEY CHECK (id = 1), entries INTEGER, bytes INTEGER
);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
CREATE TABLE IF NOT EXISTS generation (id INTEGER PRIMARY KEY CHECK (id = 1), purges INTEGER);
INSERT OR IGNORE INTO generation VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS count_insert AFTER INSERT ON entries BEGIN
    UPDATE totals SET entries = entries + 1, bytes = bytes + NEW.size WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS count_update AFTER UPDATE ON entries BEGIN
    UPDATE totals SET bytes = bytes + NEW.size - OLD.size WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS count_delete AFTER DELETE ON entries BEGIN
    UPDATE totals SET entries = entries - 1, bytes = bytes - OLD.size WHERE id = 1;
END;
"""

# The label index, added within format 3 so that older files and releases still work: the
# file's triggers queue entries written with new labels in ``unindexed``, whoever writes; this
# store indexes its own writes in their transaction, and the rest at the next purge.
_INDEX = """
CREATE TABLE IF NOT EXISTS labels (
    label TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (label, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_key ON labels (key);
CREATE TABLE IF NOT EXISTS unindexed (key TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS index_insert AFTER INSERT ON entries BEGIN
    INSERT OR IGNORE INTO unindexed VALUES (NEW.key);
END;
CREATE TRIGGER IF NOT EXISTS index_relabel AFTER UPDATE OF labels ON entries
WHEN OLD.labels IS NOT NEW.labels BEGIN
    DELETE FROM labels WHERE key = OLD.key;
    INSERT OR IGNORE INTO unindexed VALUES (NEW.key);
END;
CREATE TRIGGER IF NOT EXISTS index_delete AFTER DELETE ON entries BEGIN
    DELETE FROM labels WHERE key = OLD.key;
    DELETE FROM unindexed WHERE key = OLD.key;
END;
"""

_UPSERT = (
    "INSERT INTO entries (key, stored_at, expires_at, size, checksum, labels, flags, terms, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
    "stored_at = excluded.stored_at, expires_at = excluded.expires_at, size = excluded.size, "
    "checksum = excluded.checksum, labels = excluded.labels, flags = excluded.flags, "
    "terms = excluded.terms, data = excluded.data"
)
_DROP = (
    "DROP TABLE IF EXISTS entries; DROP TABLE IF EXISTS totals; DROP TABLE IF EXISTS generation; "
    "DROP TABLE IF EXISTS labels; DROP TABLE IF EXISTS unindexed;"
)


class SqliteStore:
    """Entries in one SQLite file, shared by the processes of a host."""

    clock = staticmethod(time.time)
    #: Reads on the loop slower than this on average send reads through the thread a while.
    slow_read_seconds = 0.002
    #: How long reads then go through the thread.
    slow_read_pause_seconds = 1.0
    #: How often reads check that the path is still the file they opened: the check is a
    #: stat, most of a hit's cost on some machines, and only another process's delete or
    #: swap changes it (this process's own writes notice it at once).
    replaced_file_check_seconds = 0.5

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_entries: int = 100_000,
        max_bytes: int = 512 * 1024 * 1024,
        busy_timeout_seconds: float = 0.25,
        open_timeout_seconds: float = 5.0,
        retry_after_seconds: float = 1.0,
        read_on_loop: bool = True,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be positive")
        self.path = Path(path)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.busy_timeout_seconds = busy_timeout_seconds
        self.open_timeout_seconds = open_timeout_seconds
        self.retry_after_seconds = retry_after_seconds
        self.failures = 0  # operations that failed (answered as "no entry")
        self._down_until = 0.0
        self._failing = False  # within a failure episode: logged once
        self.read_on_loop = read_on_loop
        self._thread_reads_until = 0.0  # perf_counter: after slow reads on the loop
        self._read_seconds = 0.0  # the recent reads on the loop, averaged (see _timed_on_loop)
        self._db: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None  # read_on_loop: opened by the thread
        # One read at a time on the reader: a read begun in another thread holds the
        # connection's snapshot, which can predate this caller's own write (a miss).
        self._reader_lock = threading.Lock()
        self._inode: int | None = None
        self._same_file_until = 0.0  # perf_counter: reads on the loop skip the check till then
        # One thread owns the connection: a store shared by threads and loops serialises itself.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite-store")

    @property
    def available(self) -> bool:
        """False while the store stays away from the file after a failure."""
        return time.monotonic() >= self._down_until

    def answered(self, failures_before: int) -> bool:
        """True when no operation failed or was skipped since ``failures_before``."""
        return self.available and self.failures == failures_before

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key`` if present, intact and unexpired; None otherwise."""
        reader = self._reader
        started = time.perf_counter()
        # On the loop unless reads there are slow or the file was replaced (the thread reopens).
        if (
            reader is not None
            and started >= self._thread_reads_until
            and self.available
            and (started < self._same_file_until or self._still_the_file(started))
        ):
            try:
                with self._reader_lock:  # held for one indexed read: never a lock wait
                    row = _get(reader, key)  # on the loop: a WAL read waits for no lock
                self._timed_on_loop(time.perf_counter() - started, started)
            except (sqlite3.Error, OSError) as exc:
                if not _for_the_thread(exc):
                    self._failed("get", exc)
                    return None
                row = await self._run("get", _get, key)  # bounded; the store no less available
        else:
            row = await self._run("get", _get, key)
        if row is None:
            return None
        stored_at, checksum, data, labels, flags, packed = row
        terms = Terms.unpack(packed) if packed is not None else None
        if zlib.crc32(data) != checksum or (packed is not None and terms is None):
            return None  # a torn or foreign row: no entry
        revalidate, tombstone = bool(flags & _REVALIDATE), bool(flags & _TOMBSTONE)
        return Entry(data, stored_at, _split(labels), revalidate, tombstone, terms)

    def _still_the_file(self, now: float) -> bool:
        """Whether the path is still the file the store opened, checked now."""
        if self._inode != _inode(self.path):
            return False  # deleted or swapped: the thread reads, and reopens
        self._same_file_until = now + self.replaced_file_check_seconds
        return True

    def _timed_on_loop(self, seconds: float, now: float) -> None:
        """Weigh a read's time on the loop into an average, each capped at twice the bound: a
        disk slow read after read sends reads to the thread a while, one paused read does not."""
        bound = self.slow_read_seconds
        self._read_seconds += (min(seconds, 2 * bound) - self._read_seconds) * 0.2
        if self._read_seconds > bound:  # a cold or stalled disk holds the loop: a pause
            self._thread_reads_until = now + self.slow_read_pause_seconds
            self._read_seconds = 0.0  # after it, the loop is tried afresh

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Keep ``entry`` until ``ttl_seconds`` from now, evicting the oldest past a bound."""
        await self._run("set", self._set, key, entry, ttl_seconds)

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """:meth:`set` unless the purge count is no longer ``count`` (False), in one
        transaction. A fault loses the write as :meth:`set` does (True)."""
        return await self._run("set", self._set, key, entry, ttl_seconds, count) is not False

    async def delete(self, key: str) -> None:
        """Forget ``key``."""
        await self._run("delete", _delete, key)

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Mark the entries ``match`` selects for revalidation (``soft``) or leave tombstones;
        how many. Tried even while away, awaited to its end; a failure counts in ``failures``."""
        return await self._run("purge", _purge, match, soft, self.clock(), operator=True) or 0

    async def generation(self) -> int | None:
        """How many purges this file has seen (None when the file fails)."""
        return await self._run("generation", _generation)

    async def totals(self) -> tuple[int, int]:
        """(entries, bytes) held, as the file counts them."""
        row = await self._run("totals", _totals)
        return row if row is not None else (0, 0)

    def close(self) -> None:
        """Close the file and stop the store's thread."""
        self._thread.submit(self._close).result()
        self._thread.shutdown()

    async def _run(
        self, op: str, fn: Callable[..., T], *args: Any, operator: bool = False
    ) -> T | None:
        if not (operator or self.available):
            return None
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self._thread, self._guarded, fn, *args)
        # A request waits at most two lock waits, or the first open (a restart on a busy host
        # should find its file); an operator's purge to its end: the thread commits it anyway,
        # so giving up would report a failure that did not happen.
        opened = self._inode is not None  # (set by the first open, kept through reopens)
        bound = self.busy_timeout_seconds * 2 + 0.1 if opened else self.open_timeout_seconds
        try:
            result = await (work if operator else bounded(work, bound))
        except (sqlite3.Error, OSError, asyncio.TimeoutError) as exc:  # 3.10: not builtin
            self._failed(op, exc)
            return None
        if self._failing:
            self._failing = False
            logger.warning("file_store_recovered path=%s", self.path)
        return result

    # Everything below runs in the store's own thread.

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(self._connection(reading=fn is _get), *args)
        except sqlite3.DatabaseError as exc:
            if not _unreadable(exc):
                raise
            self._replace_unreadable()  # garbage or truncated: a new file, then once more
            return fn(self._connection(), *args)

    def _connection(self, reading: bool = False) -> sqlite3.Connection:
        now = time.perf_counter()  # a read trusts a recent check, as reads on the loop do
        if self._db is not None and (
            (reading and now < self._same_file_until) or self._still_the_file(now)
        ):
            return self._db
        self._close()  # first use, or the file was deleted or replaced: open it anew
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._open()
        self._inode = _inode(self.path)
        if self.read_on_loop:
            reader = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            reader.execute("PRAGMA query_only = 1")
            self._reader = reader
        return self._db

    def _replace_unreadable(self) -> None:
        self._close()
        aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
        os.replace(self.path, aside)  # kept for a post-mortem; a new file takes its place
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        logger.warning("file_store_replaced path=%s unreadable_kept_as=%s", self.path, aside)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_seconds,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across process crashes
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version != FILE_FORMAT:  # new, or written by another release: start empty
                db.executescript(f"{_DROP} PRAGMA user_version = {FILE_FORMAT};")
            indexed = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'unindexed'")
            before_the_index = indexed.fetchone() is None
            db.executescript(_SCHEMA + _INDEX)
            if before_the_index:  # a file from before the index: its entries indexed once, now
                _in_transaction(db, _index_everything)
        except BaseException:
            db.close()
            raise
        return db

    def _close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            # Never while the loop reads through it: closing a connection mid-query crashes
            # the process (SIGSEGV); a read that starts after sees it closed, and retries here.
            with self._reader_lock:
                reader.close()
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None

    def _set(
        self, db: sqlite3.Connection, key: str, entry: Entry, ttl: float, unless: object = None
    ) -> bool:
        data = entry.data
        if entry.size > self.max_bytes:
            _delete(db, key)  # never serve an older one
            return True
        now = time.time()

        def check_and_write(db: sqlite3.Connection) -> bool:
            if unless is not None and _generation(db) != unless:
                return False  # a purge landed since the count was read: it wins
            db.execute(
                _UPSERT,
                (
                    key,
                    entry.stored_at,
                    now + ttl,
                    entry.size,
                    zlib.crc32(data),
                    "\n".join(entry.labels),
                    _flags(entry),
                    entry.terms.pack() if entry.terms is not None else None,
                    data,
                ),
            )
            # Queued by the file's trigger when the entry is new or relabelled: indexed now.
            if db.execute("DELETE FROM unindexed WHERE key = ?", (key,)).rowcount:
                db.executemany(_INDEXED, [(label, key) for label in entry.labels])
            count, size = db.execute("SELECT entries, bytes FROM totals WHERE id = 1").fetchone()
            if count > self.max_entries or size > self.max_bytes:
                db.execute("DELETE FROM entries WHERE expires_at <= ?", (now,))
                self._evict_oldest(db)
            return True

        return _in_transaction(db, check_and_write)

    def _evict_oldest(self, db: sqlite3.Connection) -> None:
        while True:
            count, size = db.execute("SELECT entries, bytes FROM totals WHERE id = 1").fetchone()
            excess = count - self.max_entries
            if excess <= 0 and size <= self.max_bytes:
                return
            batch = max(excess, 1, count // 100)  # by the percent: bytes over, say
            db.execute(
                "DELETE FROM entries WHERE key IN "
                "(SELECT key FROM entries ORDER BY stored_at LIMIT ?)",
                (batch,),
            )

    def _failed(self, op: str, exc: BaseException) -> None:
        self.failures += 1
        self._down_until = time.monotonic() + self.retry_after_seconds
        if not self._failing:  # one line per episode, not per request
            self._failing = True
            logger.warning(
                "file_store_unavailable op=%s path=%s error=%s: %s",
                op,
                self.path,
                type(exc).__name__,
                exc,
            )
        self._thread.submit(self._close)  # reopened (or recreated) on the next try


_REVALIDATE, _TOMBSTONE = 1, 2  # the flags column
_TOMBSTONE_SIZE = Entry(b"", 0.0).size  # what a tombstone counts against the byte bound
_INDEXED = "INSERT OR IGNORE INTO labels (label, key) VALUES (?, ?)"
_ENTRY_COLUMNS = "SELECT e.key, e.stored_at, e.labels, e.flags"
_LIVE = f"e.expires_at > ? AND e.flags & {_TOMBSTONE} = 0"  # unexpired, not a tombstone


# Run in the store's own thread, on its connection.


def _get(
    db: sqlite3.Connection, key: str
) -> tuple[float, int, bytes, str, int, bytes | None] | None:
    row = db.execute(
        "SELECT stored_at, checksum, data, labels, flags, terms FROM entries "
        "WHERE key = ? AND expires_at > ?",
        (key, time.time()),
    ).fetchone()
    if row is None:
        return None
    terms = bytes(row[5]) if row[5] is not None else None
    return float(row[0]), int(row[1]), bytes(row[2]), str(row[3]), int(row[4]), terms


def _purge(
    db: sqlite3.Connection, match: Callable[[str, Entry], bool], soft: bool, stamp: float
) -> int:
    # Hard: a tombstone stamped with the purge's time, not a gap (which reads as an expiry).
    statement = (
        f"UPDATE entries SET flags = flags | {_REVALIDATE} WHERE key = ?"
        if soft
        else f"UPDATE entries SET flags = {_TOMBSTONE}, data = x'', checksum = 0, size = "
        f"{_TOMBSTONE_SIZE}, stored_at = {stamp!r} WHERE key = ?"
    )

    def select_and_mark(db: sqlite3.Connection) -> int:  # at once: no refresh slips between
        _index_queued(db)  # entries written by others since: the index is whole again
        keys = [
            (key,)
            for key, stored_at, labels, flags in _selectable(db, match)
            if match(key, Entry(b"", stored_at, _split(labels), bool(flags & _REVALIDATE)))
        ]
        db.executemany(statement, keys)
        # Every purge counts, one that found nothing too (see purges).
        db.execute("UPDATE generation SET purges = purges + 1 WHERE id = 1")
        return len(keys)

    return _in_transaction(db, select_and_mark)


def _delete(db: sqlite3.Connection, key: str) -> None:
    db.execute("DELETE FROM entries WHERE key = ?", (key,))


def _generation(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT purges FROM generation WHERE id = 1").fetchone()[0])


def _totals(db: sqlite3.Connection) -> tuple[int, int]:
    count, size = db.execute("SELECT entries, bytes FROM totals WHERE id = 1").fetchone()
    return int(count), int(size)


def _selectable(
    db: sqlite3.Connection, match: Callable[[str, Entry], bool]
) -> list[tuple[str, float, str, int]]:
    """The unexpired entries ``match`` may select, through the label index when it names any."""
    now = time.time()
    named = selected_by(match)
    args: list[object]
    if named is None:
        query, args = f"{_ENTRY_COLUMNS} FROM entries e WHERE {_LIVE}", [now]
    elif named[1] is not None:  # the entry, and those built from it (see Selection)
        built = "(SELECT key FROM labels WHERE label = ?)"
        query = f"{_ENTRY_COLUMNS} FROM entries e WHERE (e.key = ? OR e.key IN {built}) AND {_LIVE}"
        args = [named[1], named[2], now]
    else:
        first, *rest = named[0]
        others = "".join(
            " AND EXISTS (SELECT 1 FROM labels m WHERE m.label = ? AND m.key = l.key)" for _ in rest
        )
        query = (
            f"{_ENTRY_COLUMNS} FROM labels l JOIN entries e ON e.key = l.key "
            f"WHERE l.label = ?{others} AND {_LIVE}"
        )
        args = [first, *rest, now]
    return [(str(k), float(t), str(ls), int(f)) for k, t, ls, f in db.execute(query, args)]


def _index_queued(db: sqlite3.Connection) -> None:
    """Index the entries the file's triggers queued, within the caller's transaction."""
    rows = db.execute(
        "SELECT u.key, e.labels FROM unindexed u JOIN entries e ON e.key = u.key"
    ).fetchall()
    db.executemany(_INDEXED, [(label, key) for key, labels in rows for label in _split(labels)])
    db.execute("DELETE FROM unindexed")


def _index_everything(db: sqlite3.Connection) -> None:
    db.execute("INSERT OR IGNORE INTO unindexed SELECT key FROM entries")
    _index_queued(db)


def _in_transaction(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(db)`` in one write transaction taken at once, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = fn(db)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return result


def _flags(entry: Entry) -> int:
    return (_REVALIDATE if entry.revalidate else 0) | (_TOMBSTONE if entry.tombstone else 0)


def _split(labels: str) -> tuple[str, ...]:
    return tuple(labels.split("\n")) if labels else ()


def _for_the_thread(exc: BaseException) -> bool:
    """A loop read that failed for no fault of the file, for the thread to redo: busy (a
    recovery, a checkpoint), or its reader closed under it by the store's thread."""
    if isinstance(exc, sqlite3.OperationalError):
        return _busy(exc)
    return isinstance(exc, sqlite3.ProgrammingError)


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes)
    return "locked" in str(exc) or "busy" in str(exc)


def _unreadable(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
