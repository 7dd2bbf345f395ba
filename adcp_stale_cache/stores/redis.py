"""A Redis store (``redis.asyncio``), shared by every worker and host of a seller.

Entry format (version 3), under ``{prefix}:v3:{<key>}`` (the braces are a Cluster hash tag:
an entry and its refresh lease, ``{prefix}:v3:lease:{<key>}``, share a slot)::

    b"\\x03" | stored_at (8 bytes, big-endian IEEE double, Unix seconds)
          | CRC-32 of terms + labels + data (4)
          | flags (1: soft-purged, 2: tombstone, 4: terms follow) | labels length (2)
          | terms (32, when flagged: see Entry.terms) | labels (UTF-8, newline-separated) | data

An unreadable value (another format, truncated, foreign, a ``stored_at`` that is not a
finite time) is no entry: the key is then refreshed from the upstream and overwritten.

Each label of an entry (see :mod:`adcp_stale_cache.core.labels`) is a set of keys,
``{prefix}:label:{label}``, expiring with the longest-lived entry it names: invalidations
intersect these sets instead of scanning the keyspace. Every purge (one that found nothing
too) increments ``{prefix}:generation``, which processes' memory tiers and flights watch
(:class:`~adcp_stale_cache.stores.TieredStore`).

``stored_at`` is the writer's wall clock, so every process computes the same age (up to the
clock skew between hosts, which NTP keeps small; ages are clamped at zero, so a reader behind
the writer never sees a negative age). Keys carry the format version: a future format uses
``v2`` keys and never misreads a ``v1`` value. Redis expires each entry at target + max-stale.

Redis faults never fail a request: every operation has short socket timeouts and a deadline
of its own (``deadline_seconds``, four socket timeouts by default), and after a failure the
store stays away from Redis for ``retry_after_seconds`` (answering "no entry"), then tries
again; the client reconnects by itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import struct
import sys
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from ..core.entry import TERMS_SIZE, Entry, Terms
from .label_index import selected_by
from .redis_urls import LoopClients, client_from_url

if sys.version_info >= (3, 11, 3):  # as redis-py itself chooses (async-timeout is its need)
    from asyncio import timeout as _deadline  # type: ignore[attr-defined,unused-ignore]
else:  # pragma: no cover
    from async_timeout import timeout as _deadline  # type: ignore[import-not-found,no-redef,unused-ignore]

logger = logging.getLogger("adcp_stale_cache.redis")

FORMAT_VERSION = 3
_HEADER = struct.Struct(">BdIBH")
_REVALIDATE, _TOMBSTONE, _TERMS = 1, 2, 4  # flags: soft-purged, hard-purged, terms follow
# Mark an entry for revalidation only if it is still the value that was read (a refresh that
# landed meanwhile is not marked), keeping its expiry.
_MARK = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('set', KEYS[1], ARGV[2], 'KEEPTTL') end return 0"
)
# The entry and its label sets in one step; a set lives as long as its longest-lived entry.
_SET = (
    "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "for i = 2, #KEYS do redis.call('sadd', KEYS[i], ARGV[3]) "
    "if redis.call('pttl', KEYS[i]) < tonumber(ARGV[2]) then "
    "redis.call('pexpire', KEYS[i], ARGV[2]) end end return 1"
)
# _SET, only while the purge count (KEYS[1]) is still ARGV[4]: the check and the write are
# one step, so no purge slips between them (see purges).
_SET_UNLESS_PURGED = (
    "if (redis.call('get', KEYS[1]) or '0') ~= ARGV[4] then return 0 end "
    "redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[2]) "
    "for i = 3, #KEYS do redis.call('sadd', KEYS[i], ARGV[3]) "
    "if redis.call('pttl', KEYS[i]) < tonumber(ARGV[2]) then "
    "redis.call('pexpire', KEYS[i], ARGV[2]) end end return 1"
)
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
#: Each script's SHA-1: scripts are sent by it (EVALSHA), their text only when the server's
#: script cache lacks it (a restart, a failover): a write then sends its key and value, not
#: a few hundred bytes of Lua besides.
_SHA = {script: hashlib.sha1(script.encode()).hexdigest() for script in (_MARK, _SET,
        _SET_UNLESS_PURGED, _RELEASE)}  # fmt: skip


class RedisStore:
    """Entries in Redis; ``clock`` is the wall clock (``time.time``) every process shares.
    Capabilities: ``Purgeable``, ``PurgeCounting``, ``GuardedWrites``, ``Leasing``,
    ``SharedBreakerStore``, ``Clocked``, ``FailureCounting``."""

    clock = staticmethod(time.time)

    def __init__(
        self,
        client: Any = None,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        prefix: str = "adcp-stale-cache",
        socket_timeout: float = 0.25,
        retry_after_seconds: float = 1.0,
        deadline_seconds: float | None = None,
    ) -> None:
        self._make_client: Callable[[], Any] | None = None
        if client is None:

            def make_client() -> Any:
                return client_from_url(url, socket_timeout=socket_timeout)

            self._make_client, client = make_client, make_client()
        self._clients = LoopClients(client, self._make_client)
        # A cluster spreads keys over slots: no command or script may span two of them.
        self.cluster = type(client).__name__ == "RedisCluster"
        self._warned_loop = False
        self.prefix = f"{prefix}:v{FORMAT_VERSION}"
        self.retry_after_seconds = retry_after_seconds
        # A whole operation's bound (4 socket timeouts by default): socket timeouts bound
        # each read, not an operation. A Cluster out of reach queues every operation behind
        # its client's one re-initialisation at a time (each asks every startup node), and a
        # seller cut off from it answered in 8 s, then 15 s and more as requests queued.
        self.deadline_seconds = deadline_seconds if deadline_seconds else 4 * socket_timeout
        self.failures = 0  # Redis operations that failed (and were answered as "no entry")
        self._down_until = 0.0
        self._count_down_until = 0.0  # the purge count's own: see generation

    def _key(self, key: str) -> str:
        # The braces are a hash tag: an entry and its lease share a Cluster slot.
        return f"{self.prefix}:{{{key}}}"

    def _lease(self, key: str) -> str:
        return f"{self.prefix}:lease:{{{key}}}"

    def _label(self, label: str) -> str:
        return f"{self.prefix}:label:{label}"

    @property
    def available(self) -> bool:
        """False while the store stays away from Redis after a failure, or when called from
        an event loop the client cannot serve (see :meth:`_client_here`)."""
        return time.monotonic() >= self._down_until and self._client_here() is not None

    def answered(self, failures_before: int) -> bool:
        """Whether every operation since ``failures`` was ``failures_before`` was asked and
        answered (see :class:`~adcp_stale_cache.stores.FailureCounting`)."""
        return self.available and self.failures == failures_before

    @property
    def client(self) -> Any:
        """The client of the running loop (outside one: any loop's)."""
        return self._clients.any()

    def _client_here(self) -> Any | None:
        """The running loop's client (see :class:`~.redis_urls.LoopClients`); a client passed
        in serving another loop answers "no entry" here, with one ERROR line, rather than
        break that loop's connections."""
        client = self._clients.here()
        if client is not None:
            return client
        if not self._warned_loop:
            self._warned_loop = True
            logger.error(
                "redis_other_event_loop: this RedisStore's client belongs to another event "
                "loop; answering 'no entry' here (build one store per loop, or pass a URL)"
            )
        return None

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key``; None when absent, unreadable or Redis is down."""
        raw = await self._call("get", None, lambda client: client.get(self._key(key)))
        return decode(raw) if raw else None

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Write ``entry`` with its expiry; a Redis fault is logged, not raised."""
        if not self.available:
            return
        ttl = max(1, int(ttl_seconds * 1000))
        raw = encode(entry)  # before Redis is asked: an unwritable entry is no Redis fault
        await self._call(
            "set", None, lambda client: self._write(client, key, raw, ttl, entry.labels)
        )

    async def _write(self, client: Any, key: str, raw: bytes, ttl: int, labels: Any) -> None:
        if labels and self.cluster:  # label sets live in other slots: one by one
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(self._key(key), raw, px=ttl)
                for label in labels:  # a set lives as long as its longest entry
                    name = self._label(label)
                    pipe.sadd(name, key).pexpire(name, ttl, nx=True).pexpire(name, ttl, gt=True)
                await pipe.execute()
        elif labels:
            names = [self._key(key), *(self._label(label) for label in labels)]
            await _script(client, _SET, len(names), *names, raw, ttl, key)
        else:
            await client.set(self._key(key), raw, px=ttl)

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """:meth:`set`, in one script with the check that the purge count is still ``count``
        (see purges); False when a purge landed since (the write refused). A fault loses the
        write as :meth:`set` does (True: nothing was refused). On a Cluster the count lives
        in a slot of its own, out of a script's reach: the check then runs just before the
        write (purges count before they mark, so only a purge starting in between slips)."""
        if self.cluster or not isinstance(count, int):
            current = await self.generation()
            if current is not None and current != count:
                return False
            await self.set(key, entry, ttl_seconds)
            return True
        ttl = max(1, int(ttl_seconds * 1000))
        names = [f"{self.prefix}:generation", self._key(key),
                 *(self._label(label) for label in entry.labels)]  # fmt: skip
        raw = encode(entry)  # as in set: not a fault of Redis
        args = (*names, raw, ttl, key, str(count))
        kept = await self._call(
            "set", True, lambda c: _script(c, _SET_UNLESS_PURGED, len(names), *args)
        )
        return bool(kept)

    async def delete(self, key: str) -> None:
        """Forget ``key``."""
        await self._call("delete", None, lambda client: client.delete(self._key(key)))

    @asynccontextmanager
    async def lease(self, key: str, seconds: float) -> AsyncIterator[bool]:
        """A cross-process lock on refreshing ``key``: yields True to the one holder.

        The lease expires by itself after ``seconds``, so a holder that dies never blocks the
        others for longer. Yields True too when Redis is down (no coordination possible: each
        process refreshes for itself).
        """
        lock, token, ttl = self._lease(key), uuid.uuid4().hex, max(1, int(seconds * 1000))
        acquired = bool(
            await self._call("lease", True, lambda c: c.set(lock, token, nx=True, px=ttl))
        )
        try:
            yield acquired
        finally:
            if acquired:
                await self._call("release", None, lambda c: _script(c, _RELEASE, 1, lock, token))

    async def lease_active(self, key: str) -> bool:
        """Whether some process holds the refresh lease of ``key``."""
        return bool(await self._call("lease_active", False, lambda c: c.exists(self._lease(key))))

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Invalidate the entries ``match`` selects: mark them for revalidation (``soft``,
        expiry kept) or leave a tombstone. A selection with labels (a
        :class:`~adcp_stale_cache.ops.control.Selection`) reads the intersection of their sets,
        one with a key that key alone; any other ``match`` scans this store's keys (an
        operator's action, not a request's). Tried even while the store stays away from Redis
        after a failure; a failure is counted in ``failures`` (the caller reports it)."""
        client = self._client_here()
        if client is None:
            self.failures += 1
            return 0
        count, marking, generation = 0, False, f"{self.prefix}:generation"
        try:
            # Counted before it marks: a flight that read the count before this purge and
            # stores while it marks finds it moved (see purges). Every purge counts, one
            # that finds nothing too.
            await client.incr(generation)
            marking = True
            async for batch in self._candidates(client, match):
                names = [self._key(key) for key in batch]
                values = await (client.mget_nonatomic if self.cluster else client.mget)(names)
                marks = []
                for name, key, raw in zip(names, batch, values, strict=True):
                    entry = decode(raw) if raw else None
                    if entry is None or entry.tombstone or not match(key, entry):
                        continue
                    if soft and entry.revalidate:
                        count += 1
                        continue
                    # Hard: a tombstone, not a gap (see Entry): processes drop their copies.
                    # Stamped with the purge's time: newer than every copy stored before it.
                    marked = encode(
                        dataclasses.replace(entry, revalidate=True)
                        if soft
                        else Entry(b"", self.clock(), entry.labels, tombstone=True)
                    )
                    marks.append((name, raw, marked))
                count += await self._marked(client, marks)
            # Counted again once marked: a memory tier that read an entry between the first
            # count and its mark (and noted its copy as matching, see TieredStore) hears of
            # the purge after that read, never before it only.
            marking = False
            await client.incr(generation)
        except Exception as exc:
            self._failed("purge", exc)
            if marking:  # what it marked before it failed is heard of too, if Redis answers
                await _count_again(client, generation, self.deadline_seconds)
        return count

    async def _marked(self, client: Any, marks: list[tuple[str, bytes, bytes]]) -> int:
        """Mark a batch of entries (each only if it is still the value read), in one
        pipeline: one round trip per batch, not one per entry; how many were marked."""
        if not marks:
            return 0
        async with client.pipeline(transaction=False) as pipe:
            for name, raw, marked in marks:
                pipe.eval(_MARK, 1, name, raw, marked)
            return sum(bool(done) for done in await pipe.execute())

    async def _candidates(
        self, client: Any, match: Callable[[str, Entry], bool]
    ) -> AsyncIterator[list[str]]:
        """The keys ``match`` may select, in batches."""
        labels, store_key, label = selected_by(match) or ([], None, None)
        if store_key is not None:  # the entry, and those built from it (see Selection)
            built = await client.smembers(self._label(label)) if label is not None else ()
            yield [store_key, *sorted(member.decode() for member in built)]
            return
        if labels and self.cluster:  # the sets live in several slots: intersect here
            sets = [set(await client.smembers(self._label(label))) for label in labels]
            keys = sorted(member.decode() for member in set.intersection(*sets))
        elif labels:
            members = await client.sinter([self._label(label) for label in labels])
            keys = sorted(member.decode() for member in members)
        else:
            entries = f"{self.prefix}:{{"
            keys = [
                name.decode()[len(entries) : -1]
                async for name in client.scan_iter(match=f"{entries}*", count=500)
            ]
        for start in range(0, len(keys), 500):
            yield keys[start : start + 500]

    async def breaker_state(self, name: str) -> bytes | None:
        """What another process published about its open breaker on ``name`` (None: closed,
        or Redis down)."""
        state: bytes | None = await self._call(
            "breaker_state", None, lambda client: client.get(f"{self.prefix}:breaker:{name}")
        )
        return state

    async def breaker_opened(self, name: str, state: str, seconds: float) -> None:
        """Publish this process's open breaker on ``name`` for ``seconds``."""
        name, ms = f"{self.prefix}:breaker:{name}", max(1, int(seconds * 1000))
        await self._call("breaker_opened", None, lambda c: c.set(name, state, px=ms))

    async def breaker_closed(self, name: str) -> None:
        """Withdraw the open breaker published on ``name``."""
        await self._call("breaker_closed", None,
                         lambda client: client.delete(f"{self.prefix}:breaker:{name}"))  # fmt: skip

    async def generation(self) -> int | None:
        """How many purges this Redis has seen so far (None when it is down):
        processes' memory tiers watch it to hear of other processes' invalidations."""
        client = self._client_here()
        if client is None or not self.available or time.monotonic() < self._count_down_until:
            return None
        try:
            async with _deadline(self.deadline_seconds):
                return int(await client.get(f"{self.prefix}:generation") or 0)
        except Exception as exc:
            # Not a reason to stay away from the whole store: the count lives in one slot,
            # and every miss reads it (see purges); the entries' own reads and writes decide.
            # But a failing read (a cluster failing over retries for a while) is not tried
            # again for a moment: a request would pay it on every miss.
            self._count_down_until = time.monotonic() + self.retry_after_seconds
            logger.debug("redis_generation_unreadable error=%s", type(exc).__name__)
            return None

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()

    async def _call(self, op: str, default: Any, command: Callable[[Any], Awaitable[Any]]) -> Any:
        """``command(client)`` within the deadline; ``default`` while the store stays away
        from Redis, or when it fails (counted and logged: the store then stays away)."""
        if not self.available:
            return default
        try:
            async with _deadline(self.deadline_seconds):
                return await command(self._client_here())
        except Exception as exc:
            self._failed(op, exc)
            return default

    def _failed(self, op: str, exc: Exception) -> None:
        self.failures += 1
        self._down_until = time.monotonic() + self.retry_after_seconds
        logger.warning("redis_unavailable op=%s error=%s", op, type(exc).__name__)


async def _count_again(client: Any, generation: str, seconds: float) -> None:
    """Count a purge once more, if Redis answers within ``seconds`` (a purge that failed
    after it marked some entries: see purge)."""
    with contextlib.suppress(Exception):
        async with _deadline(seconds):
            await client.incr(generation)


async def _script(client: Any, script: str, keys: int, *args: object) -> Any:
    """Run ``script`` by its SHA-1 (one round trip), or by its text when the server does
    not have it cached yet (two: its text also caches it)."""
    from redis.exceptions import NoScriptError

    try:
        return await client.evalsha(_SHA[script], keys, *args)
    except NoScriptError:
        return await client.eval(script, keys, *args)


def encode(entry: Entry) -> bytes:
    """The stored form of an entry."""
    labels = "\n".join(entry.labels).encode()
    terms = entry.terms.pack() if entry.terms is not None else b""
    body = terms + labels + entry.data
    flags = (
        (_REVALIDATE if entry.revalidate else 0)
        | (_TOMBSTONE if entry.tombstone else 0)
        | (_TERMS if terms else 0)
    )
    header = _HEADER.pack(FORMAT_VERSION, entry.stored_at, zlib.crc32(body), flags, len(labels))
    return header + body


def decode(raw: bytes) -> Entry | None:
    """An entry from its stored form; None for anything else (never a misread)."""
    if len(raw) < _HEADER.size or raw[0] != FORMAT_VERSION:
        return None
    _, stored_at, checksum, flags, size = _HEADER.unpack_from(raw)
    body = bytes(raw[_HEADER.size :])
    if not math.isfinite(stored_at) or zlib.crc32(body) != checksum:
        return None  # truncated, foreign, or a time that is no time: no entry
    terms = None
    if flags & _TERMS:
        terms = Terms.unpack(body[:TERMS_SIZE])
        if terms is None:
            return None
        body = body[TERMS_SIZE:]
    if size > len(body):
        return None
    labels = tuple(body[:size].decode().split("\n")) if size else ()
    return Entry(
        body[size:], stored_at, labels, bool(flags & _REVALIDATE), bool(flags & _TOMBSTONE),
        terms,
    )  # fmt: skip
