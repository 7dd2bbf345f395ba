"""Two tiers: a bounded memory store in front of a shared one (a file, Redis).

Reads take the memory copy while it is young or was seen to match the shared copy within
``near_max_age_seconds`` (1 s), else ask the shared store and keep the newer of the two, so a
process sees what another process refreshed within that time; a hot key costs one shared
read per ``near_max_age_seconds``, not one per request once its copy is a second old. When
the shared store is down or empty, the memory copy is still served: a process keeps its
stale fallback through a Redis outage, and a cold process finds one in Redis through an
upstream outage. Writes go to both tiers.

Invalidations reach every process within ``check_seconds`` (50 ms): a shared store that
counts its purges (``generation()``: Redis and the file store do) is asked for that count at
most every ``check_seconds``, and once it moved, memory copies stored before are read
through again (the shared copy carries the purge). A process that cannot read the count
(Redis down, or cut off from it) cannot hear invalidations: once it has not heard for
``unheard_fresh_seconds`` (5 s), memory copies older than that are served as due for
revalidation, never as fresh. So a purge this process missed is served as fresh for at most
``unheard_fresh_seconds`` (plus ``check_seconds``); meanwhile each key is refreshed at most
that often, and an outage still serves the copy stale, with its advisory.

Tiers nest: memory in front of a file in front of Redis is
``TieredStore(TieredStore(redis, near=file), near=memory)``; the file then answers while
Redis is down, and after a restart while Redis is unreachable.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ..core.entry import Entry
from ..pipeline.purges import UNREADABLE, PurgeWitness
from .base import (
    Bounded,
    FailureCounting,
    Leasing,
    Listening,
    Purgeable,
    SharedBreakerStore,
    Store,
)
from .memory import MemoryStore


class TieredStore:
    """Memory in front of ``far``; both keep entries on the shared wall clock.

    Capabilities: every one but ``Bounded`` and ``FailureCounting`` (its tiers have those).
    It answers for those ``far`` lacks as a store without them would: a lease always held
    here, no breaker shared, a purge counted by the memory tier alone."""

    clock = staticmethod(time.time)

    def __init__(
        self,
        far: Store,
        near: Store | None = None,
        *,
        near_max_age_seconds: float = 1.0,
        near_ttl_seconds: float = 3600.0,
        check_seconds: float = 0.05,
        unheard_fresh_seconds: float = 5.0,
    ) -> None:
        self.far = far
        self.near: Store = near if near is not None else MemoryStore()
        self.near_max_age_seconds = near_max_age_seconds
        self.near_ttl_seconds = near_ttl_seconds
        self.check_seconds = check_seconds
        self.unheard_fresh_seconds = unheard_fresh_seconds
        self._generation: object = None  # the shared store's purge count, as last read
        self._checked_at = -check_seconds  # monotonic: when it was last asked
        self._read_at: float | None = None  # monotonic: when its last answer was asked for
        self._heard_at = self.clock()  # wall: when it last answered
        self._purged_at = 0.0  # wall: when it was last seen to grow (a purge)
        self._unsure_at = 0.0  # wall: when it last changed, grown or not (first reading too)
        # Wall: when each memory copy last matched the shared one (see _confirm); bounded.
        self._confirmed: dict[str, float] = {}
        near_max = self.near.max_entries if isinstance(self.near, Bounded) else 10_000
        self._confirmed_max = int(near_max)
        self._confirming = threading.Lock()  # the tier may be shared by threads
        # What each tier can do, decided once (a protocol check walks every member).
        self._near_purges, self._far_purges = PurgeWitness(self.near), PurgeWitness(far)
        self._near_purgeable = self.near if isinstance(self.near, Purgeable) else None
        self._far_purgeable = far if isinstance(far, Purgeable) else None
        self._far_failures = far if isinstance(far, FailureCounting) else None
        self._far_leasing = far if isinstance(far, Leasing) else None
        self._far_breakers = far if isinstance(far, SharedBreakerStore) else None
        self._far_listening = far if isinstance(far, Listening) else None

    async def get(self, key: str) -> Entry | None:
        """The newer of the memory and shared copies (memory alone while it was stored or
        seen to match the shared copy within ``near_max_age_seconds``, and no purge was
        heard of since)."""
        near = await self.near.get(key)
        now = self.clock()
        await self._listen(now)
        if near is not None:
            seen = max(near.stored_at, self._confirmed.get(key, near.stored_at))
            if now - seen < self.near_max_age_seconds and seen > self._unsure_at:
                return self._due(near, now, shared=True)
        counted = self._far_failures
        failures = counted.failures if counted is not None else 0
        far = await self.far.get(key)
        if (
            far is None
            and near is not None
            and near.stored_at <= self._purged_at
            and (counted is None or counted.answered(failures))
        ):
            # No shared copy of a copy stored before a purge: hard-purged (its tombstone since
            # evicted or expired) reads exactly as evicted, so it is forgotten, never served.
            # (A shared store that did not answer says nothing: the copy stays the fallback.)
            self._forget(key)
            await self.near.delete(key)
            return None
        # The newer copy wins; on a tie the shared one when it carries another process's purge.
        if far is None or (near is not None and near.stored_at > far.stored_at):
            return self._due(near, now, shared=False)
        if near is not None and near.stored_at == far.stored_at and _same_marks(near, far):
            self._confirm(key, now)  # the same entry: no rewrite of memory
            return self._due(near, now, shared=True)
        if far.tombstone:  # hard-purged by some process: drop this process's copy too
            self._forget(key)
            await self.near.delete(key)
            return far
        await self.near.set(key, far, self.near_ttl_seconds)
        self._confirm(key, now)
        return far

    def _confirm(self, key: str, now: float) -> None:
        """Note that the memory copy of ``key`` matched the shared one as of ``now`` (a time
        taken before the shared read: a purge heard of after it voids the note, see get).
        A purge marking entries between two counts of it (Redis: see its purge) is heard of
        after such a read, never missed. The notes are bounded like the memory tier."""
        with self._confirming:
            self._confirmed.pop(key, None)
            self._confirmed[key] = now
            if len(self._confirmed) > self._confirmed_max:
                del self._confirmed[next(iter(self._confirmed))]  # the oldest note

    def ask_shared(self, key: str) -> None:
        """Let the next read of ``key`` ask the shared store (unless this process's copy is
        young), whatever was noted of the memory copy: a process waiting on another's
        write to it (see flight). Nested tiers pass it on."""
        self._forget(key)
        if self._far_listening is not None:
            self._far_listening.ask_shared(key)

    def listen_soon(self) -> None:
        """Read the purge count on the next read, whenever it was last read: a tier above
        (nested tiers) heard it move. Nested tiers pass it on."""
        self._checked_at = float("-inf")
        if self._far_listening is not None:
            self._far_listening.listen_soon()

    def _forget(self, key: str) -> None:
        """Drop the note of ``key``: its memory copy is replaced or gone."""
        with self._confirming:
            self._confirmed.pop(key, None)

    async def generation(self) -> object:
        """Both tiers' purge counts (None when one that counts cannot be read)."""
        counts = (await self._near_purges.count(), await self._far_purges.count())
        return None if UNREADABLE in counts else counts

    async def heard_generation(self) -> object:
        """The purge count as :meth:`generation` gives it, from the shared tiers' reading of
        at most ``check_seconds`` ago (the near tier's, in this process, read now): what a
        flight may start under instead of a round trip (see purges). None when the last
        reading is older, or did not answer: the caller reads the count itself.

        A reading earlier than the flight is conservative: a purge after it still refuses
        the flight's write. It misses only another process's purge of the last
        ``check_seconds``, which this process's reads do not know of yet either; its own
        purges move the near tier's count, read now."""
        read_at, heard = self._read_at, self._generation
        if read_at is None or time.monotonic() - read_at >= self.check_seconds:
            return None
        if not isinstance(heard, tuple) or len(heard) != 2:
            return None
        near = await self._near_purges.count()
        return None if near is UNREADABLE else (near, heard[1])

    async def _listen(self, now: float) -> None:
        """Read the shared tiers' purge count, at most every ``check_seconds``."""
        checked = time.monotonic()
        if checked - self._checked_at < self.check_seconds:
            return
        self._checked_at = checked  # before the read: concurrent gets do not all ask
        current = await self.generation()
        if current is None:
            self._read_at = None  # unreadable: flights read the count themselves
            return
        if current != self._generation:
            # Copies stored before are read through once more. A count seen to grow is a
            # purge: such a copy with no shared copy is forgotten (see get). A first reading,
            # or a count that went back (a Redis restarted empty), says only "unsure":
            # copies stored before it (while it could not be read) are revalidated, kept as
            # the fallback. Timed from when the reading came back, not from when this
            # lookup began: another lookup may have read the shared copy, and noted the
            # memory copy as matching, while this reading was on its way (a slow round
            # trip, a queue in the file store's thread), before the purge it brings.
            heard = max(now, self.clock())
            if self._generation is not None and _grew(self._generation, current):
                self._purged_at = heard
            self._unsure_at = heard
            self._generation = current
            # A tier beneath (nested tiers) reads the count on its own schedule and may not
            # have heard this yet: the read through that follows must not take its copy
            # as the shared one (this tier would note it as matching for a second more).
            if self._far_listening is not None:
                self._far_listening.listen_soon()
        self._heard_at = now
        self._read_at = checked

    def _due(self, near: Entry | None, now: float, *, shared: bool) -> Entry | None:
        """``near``, due for revalidation when a purge may have missed it:

        - purges could not be heard of for ``unheard_fresh_seconds`` and the copy is older;
        - the shared store holds an older copy only (``shared`` False: this one was written
          while the store was unreachable) and it was stored before a purge heard of: the
          purge may have selected it, and only shared copies carry marks. (With no shared
          copy at all, a copy from before a purge is forgotten: see ``get``.)
        """
        if near is None or near.revalidate:
            return near
        bound = self.unheard_fresh_seconds
        unheard = now - self._heard_at > bound and now - near.stored_at > bound
        missed = not shared and near.stored_at <= self._unsure_at
        return dataclasses.replace(near, revalidate=True) if unheard or missed else near

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Write both tiers."""
        self._forget(key)
        await self.near.set(key, entry, ttl_seconds)
        await self.far.set(key, entry, ttl_seconds)

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """Write both tiers unless a purge landed in either since their counts were
        ``count`` (as :meth:`generation` gave them): False when one did. The shared tier
        decides first; a shared tier that raises still leaves the memory copy, as :meth:`set`
        does (a copy the shared store never got: see ``_due``). One that loses the write to
        a fault it counts (file, Redis) leaves none: whether a purge landed since ``count``
        is unknown, and a copy stamped now would outlive a hard purge heard of before it,
        or beat its tombstone. (Down when the flight began, it left ``count`` unreadable:
        that write goes as :meth:`set`.)"""
        if not isinstance(count, tuple) or len(count) != 2:
            return False
        near_count, far_count = count
        self._forget(key)
        counted = self._far_failures
        failures = counted.failures if counted is not None else 0
        try:
            kept = await self._far_purges.store_unless_purged(key, entry, ttl_seconds, far_count)
        except Exception:
            await self._near_purges.store_unless_purged(key, entry, ttl_seconds, near_count)
            raise
        if not kept or (counted is not None and not counted.answered(failures)):
            return False
        return await self._near_purges.store_unless_purged(key, entry, ttl_seconds, near_count)

    async def delete(self, key: str) -> None:
        """Forget ``key`` in both tiers."""
        self._forget(key)
        await self.near.delete(key)
        await self.far.delete(key)

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Invalidate in both tiers; the count is the shared tier's (the near one's when the
        shared one cannot purge)."""
        near = await _purge(self._near_purgeable, match, soft)
        far = await _purge(self._far_purgeable, match, soft)
        return far if far is not None else near or 0

    @asynccontextmanager
    async def lease(self, key: str, seconds: float) -> AsyncIterator[bool]:
        """The shared store's lease (True, no coordination, when it has none)."""
        if self._far_leasing is None:
            yield True
            return
        async with self._far_leasing.lease(key, seconds) as holder:
            yield holder

    async def breaker_state(self, name: str) -> bytes | None:
        """The shared store's breaker state (see ``shared_breakers``), if it keeps one."""
        shared = self._far_breakers
        return await shared.breaker_state(name) if shared is not None else None

    async def breaker_opened(self, name: str, state: str, seconds: float) -> None:
        """Publish an open breaker in the shared store, if it keeps them."""
        if self._far_breakers is not None:
            await self._far_breakers.breaker_opened(name, state, seconds)

    async def breaker_closed(self, name: str) -> None:
        """Withdraw a published open breaker, if the shared store keeps them."""
        if self._far_breakers is not None:
            await self._far_breakers.breaker_closed(name)

    async def lease_active(self, key: str) -> bool:
        """Whether another process holds the refresh lease of ``key``."""
        leasing = self._far_leasing
        return bool(await leasing.lease_active(key)) if leasing is not None else False


def _grew(before: object, now: object) -> bool:
    """Whether a purge count moved forward (tiers' counts: each member forward or equal)."""
    if isinstance(before, tuple) and isinstance(now, tuple) and len(before) == len(now):
        pairs = zip(before, now, strict=True)
        return before != now and all(b == n or _grew(b, n) for b, n in pairs)
    return isinstance(before, int) and isinstance(now, int) and now > before


def _same_marks(near: Entry, far: Entry) -> bool:
    # Equal times are not the same entry by themselves (two processes may store within one
    # tick of a coarse clock): the bytes must be the same too, else the shared copy wins.
    return (
        near.revalidate == far.revalidate
        and near.tombstone == far.tombstone
        and near.data == far.data
    )


async def _purge(
    store: Purgeable | None, match: Callable[[str, Entry], bool], soft: bool
) -> int | None:
    return int(await store.purge(match, soft=soft)) if store is not None else None


def tiers(store: Store) -> list[Store]:
    """``store`` and, for tiered stores, every store beneath it (nearest first)."""
    if not isinstance(store, TieredStore):
        return [store]
    return [store, *tiers(store.near), *tiers(store.far)]
