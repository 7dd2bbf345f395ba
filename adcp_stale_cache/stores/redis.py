"""A Redis store (``redis.asyncio``), shared by every worker and host of a seller.

Entry format and key layout: docs/redis.md. A Redis fault never fails a request: every operation
has a deadline, and after a failure the store answers "no entry" for ``retry_after_seconds``."""

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
# Mark an entry only if it is still the value read (a refresh meanwhile wins), keeping its TTL.
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
# _SET, only while the purge count (KEYS[1]) is still ARGV[4]: no purge slips between them.
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
#: Scripts go by SHA-1 (EVALSHA): their text only when the server lacks it (a restart).
_SHA = {
    script: hashlib.sha1(script.encode()).hexdigest()
    for script in (_MARK, _SET, _SET_UNLESS_PURGED, _RELEASE)
}


class RedisStore:
    """Entries in Redis; ``clock`` is the wall clock (``time.time``) every process shares."""

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
        # Socket timeouts bound each read, not an operation: a Cluster out of reach queued
        # operations behind its re-initialisation, and answers took 8 s, then 15 s and more.
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
        """False while the store stays away from Redis after a failure, or on an event loop
        the client cannot serve."""
        return time.monotonic() >= self._down_until and self._client_here() is not None

    def answered(self, failures_before: int) -> bool:
        """True when no operation failed or was skipped since ``failures_before``."""
        return self.available and self.failures == failures_before

    @property
    def client(self) -> Any:
        """The client of the running loop (outside one: any loop's)."""
        return self._clients.any()

    def _client_here(self) -> Any | None:
        """The running loop's client; a client passed in that serves another loop answers "no
        entry" here (one ERROR line) rather than break that loop's connections."""
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
        """:meth:`set` unless the purge count is no longer ``count`` (False), in one script.
        A fault loses the write as :meth:`set` does (True). On a Cluster the count is in a
        slot of its own: it is checked just before the write instead."""
        if self.cluster or not isinstance(count, int):
            current = await self.generation()
            if current is not None and current != count:
                return False
            await self.set(key, entry, ttl_seconds)
            return True
        ttl = max(1, int(ttl_seconds * 1000))
        names = [
            f"{self.prefix}:generation",
            self._key(key),
            *(self._label(label) for label in entry.labels),
        ]
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
        """A cross-process lock on refreshing ``key``, expiring after ``seconds``: yields True
        to the one holder, and to every process while Redis is down."""
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
        """Mark the entries ``match`` selects for revalidation (``soft``) or leave tombstones;
        how many. Tried even while the store stays away; a failure counts in ``failures``."""
        client = self._client_here()
        if client is None:
            self.failures += 1
            return 0
        count, marking, generation = 0, False, f"{self.prefix}:generation"
        try:
            # Counted before it marks: a flight that read the count before and stores while
            # it marks finds it moved. Every purge counts, one that finds nothing too.
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
                    # Hard: a tombstone stamped now, newer than any copy, so processes drop theirs.
                    marked = encode(
                        dataclasses.replace(entry, revalidate=True)
                        if soft
                        else Entry(b"", self.clock(), entry.labels, tombstone=True)
                    )
                    marks.append((name, raw, marked))
                count += await self._marked(client, marks)
            # Counted again once marked: a memory tier that read an entry between the first
            # count and its mark hears of the purge after that read.
            marking = False
            await client.incr(generation)
        except Exception as exc:
            self._failed("purge", exc)
            if marking:  # what it marked before it failed is heard of too, if Redis answers
                await _count_again(client, generation, self.deadline_seconds)
        return count

    async def _marked(self, client: Any, marks: list[tuple[str, bytes, bytes]]) -> int:
        """Mark a batch (each only if still the value read) in one pipeline; how many."""
        if not marks:
            return 0
        async with client.pipeline(transaction=False) as pipe:
            for name, raw, marked in marks:
                pipe.eval(_MARK, 1, name, raw, marked)
            return sum(bool(done) for done in await pipe.execute())

    async def _candidates(
        self, client: Any, match: Callable[[str, Entry], bool]
    ) -> AsyncIterator[list[str]]:
        labels, store_key, label = selected_by(match) or ([], None, None)
        if store_key is not None:  # the entry, and those built from it (see Selection)
            built = await client.smembers(self._label(label)) if label is not None else ()
            from_it = sorted(member.decode() for member in built)
            yield list(dict.fromkeys([store_key, *from_it]))  # it may be built from itself
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
        """What another process published of its open breaker on ``name`` (None: closed)."""
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
        await self._call(
            "breaker_closed", None, lambda client: client.delete(f"{self.prefix}:breaker:{name}")
        )

    async def generation(self) -> int | None:
        """How many purges this Redis has seen (None when it cannot be read)."""
        client = self._client_here()
        if client is None or not self.available or time.monotonic() < self._count_down_until:
            return None
        try:
            async with _deadline(self.deadline_seconds):
                return int(await client.get(f"{self.prefix}:generation") or 0)
        except Exception as exc:
            # No reason to stay away from the store (the count lives in one slot), but not
            # tried again for a moment: every miss would pay a failing-over cluster's retries.
            self._count_down_until = time.monotonic() + self.retry_after_seconds
            logger.debug("redis_generation_unreadable error=%s", type(exc).__name__)
            return None

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()

    async def _call(self, op: str, default: Any, command: Callable[[Any], Awaitable[Any]]) -> Any:
        """``command(client)`` within the deadline; ``default`` while away or on a failure."""
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
    """Count a purge that failed midway once more, if Redis answers within ``seconds``."""
    with contextlib.suppress(Exception):
        async with _deadline(seconds):
            await client.incr(generation)


async def _script(client: Any, script: str, keys: int, *args: object) -> Any:
    """Run ``script`` by its SHA-1, or by its text (which caches it) when the server lacks it."""
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
        body[size:],
        stored_at,
        labels,
        bool(flags & _REVALIDATE),
        bool(flags & _TOMBSTONE),
        terms,
    )
