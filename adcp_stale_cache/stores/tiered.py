"""Two tiers: a bounded memory store in front of a shared one (a file, Redis).

The memory copy serves while young or lately seen to match the shared copy; purges are heard
through the shared store's purge count (see docs/operating.md#across-processes)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ..core.entry import Entry
from .base import (
    Bounded,
    FailureCounting,
    Leasing,
    Listening,
    Purgeable,
    SharedBreakerStore,
    Store,
    Tiered,
)
from .memory import MemoryStore
from .purges import UNREADABLE, PurgeWitness


class TieredStore:
    """Memory in front of ``far``, on the shared wall clock. What ``far`` lacks it answers for
    as a store without it would: a lease always held, no breaker shared."""

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
        self._confirmed: dict[str, float] = {}  # wall: when each copy last matched (_confirm)
        near_max = self.near.max_entries if isinstance(self.near, Bounded) else 10_000
        self._confirmed_max = int(near_max)
        self._confirming = threading.Lock()  # the tier may be shared by threads
        self._near_purges, self._far_purges = PurgeWitness(self.near), PurgeWitness(far)
        self._near_purgeable = self.near if isinstance(self.near, Purgeable) else None
        self._far_purgeable = far if isinstance(far, Purgeable) else None
        self._far_failures = far if isinstance(far, FailureCounting) else None
        self._far_leasing = far if isinstance(far, Leasing) else None
        self._far_breakers = far if isinstance(far, SharedBreakerStore) else None
        self._far_listening = far if isinstance(far, Listening) else None

    async def get(self, key: str) -> Entry | None:
        """The newer of the memory and shared copies (memory alone while young or lately seen
        to match, and no purge heard of since)."""
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
            # Hard-purged (its tombstone since gone) reads as evicted: forgotten, never served.
            # A shared store that did not answer says nothing: the copy stays the fallback.
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
        """Note that the memory copy of ``key`` matched the shared one as of ``now``, taken
        before the shared read: a purge heard of after it voids the note."""
        with self._confirming:
            self._confirmed.pop(key, None)
            self._confirmed[key] = now
            if len(self._confirmed) > self._confirmed_max:
                del self._confirmed[next(iter(self._confirmed))]  # the oldest note

    def ask_shared(self, key: str) -> None:
        """Let the next read of ``key`` ask the shared store unless its copy is young (a
        process waits on another's write). Nested tiers pass it on."""
        self._forget(key)
        if self._far_listening is not None:
            self._far_listening.ask_shared(key)

    def listen_soon(self) -> None:
        """Read the purge count on the next read (a tier above heard it move); nested tiers
        pass it on."""
        self._checked_at = float("-inf")
        if self._far_listening is not None:
            self._far_listening.listen_soon()

    def _forget(self, key: str) -> None:
        with self._confirming:
            self._confirmed.pop(key, None)

    async def generation(self) -> object:
        """Both tiers' purge counts (None when one that counts cannot be read)."""
        counts = (await self._near_purges.count(), await self._far_purges.count())
        return None if UNREADABLE in counts else counts

    async def heard_generation(self) -> object:
        """:meth:`generation` from the shared tier's reading of at most ``check_seconds`` ago
        (the near tier's read now), or None. It misses only other processes' purges that this
        process's reads have not heard of either."""
        read_at, heard = self._read_at, self._generation
        if read_at is None or time.monotonic() - read_at >= self.check_seconds:
            return None
        if not isinstance(heard, tuple) or len(heard) != 2:
            return None
        near = await self._near_purges.count()
        return None if near is UNREADABLE else (near, heard[1])

    async def _listen(self, now: float) -> None:
        checked = time.monotonic()
        if checked - self._checked_at < self.check_seconds:
            return
        self._checked_at = checked  # before the read: concurrent gets do not all ask
        current = await self.generation()
        if current is None:
            self._read_at = None  # unreadable: flights read the count themselves
            return
        if current != self._generation:
            # A count that grew is a purge; a first or lower one (Redis restarted empty) only
            # "unsure". Timed from the reading's return, not the lookup's start: another lookup
            # may have noted a copy as matching while this reading was on its way.
            heard = max(now, self.clock())
            if self._generation is not None and _grew(self._generation, current):
                self._purged_at = heard
            self._unsure_at = heard
            self._generation = current
            # A tier beneath, on its own schedule, must not pass its copy off as the shared one.
            if self._far_listening is not None:
                self._far_listening.listen_soon()
        self._heard_at = now
        self._read_at = checked

    def _due(self, near: Entry | None, now: float, *, shared: bool) -> Entry | None:
        """``near``, due for revalidation when a purge may have missed it: purges went unheard
        for ``unheard_fresh_seconds`` and the copy is older, or (``shared`` False: the shared
        copy is older) it predates a purge heard of, and only shared copies carry marks."""
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
        """Write both tiers unless a purge landed in either since ``count`` (False). A shared
        tier that raises leaves the memory copy, as :meth:`set` does; one that loses the write
        to a counted fault leaves none (a copy stamped now could outlive a hard purge)."""
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
        """Invalidate in both tiers; the count is the shared tier's (else the near one's)."""
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
    # Equal times alone are not the same entry (two stores in one clock tick): bytes too.
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
    if not isinstance(store, Tiered):
        return [store]
    return [store, *tiers(store.near), *tiers(store.far)]
