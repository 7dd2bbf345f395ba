"""The witness that a purge landed while an upstream call was in flight.

A flight that read the upstream before a purge and stores after it would undo the purge: the
next requests would be fresh hits on data the operator just invalidated, even when the purge
found no entry to mark (the flight's key was cold). Stores that purge count every purge
(``generation()``: memory, the file, Redis, and tiers of them); a flight reads the count
before it calls and again before it stores, and when the count moved it serves its answer to
the callers that asked before, without storing it. The count is shared by every process on
a shared store, so a purge through any process wins over every flight that started before
it. (It counts purges, not what they selected: a purge of other entries also keeps a
flight's answer out, once, which costs a call, never a wrong answer.)
"""

from __future__ import annotations

from typing import Any

from ..core.entry import Entry
from ..stores.base import GuardedWrites, Listening, PurgeCounting, Store

#: A purge count that could not be read (the store keeps one, but did not answer).
UNREADABLE: Any = type("Unreadable", (), {"__repr__": lambda self: "UNREADABLE"})()


class PurgeWitness:
    """The purge count of ``store`` as flights read it; what the store can do (count its
    purges, write in one step with the check, keep a recent reading) is decided here once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._counting = store if isinstance(store, PurgeCounting) else None
        self._guarded = store if isinstance(store, GuardedWrites) else None
        self._listening = store if isinstance(store, Listening) else None

    async def count(self) -> object:
        """The store's purge count: None when it keeps none, :data:`UNREADABLE` when it
        cannot be read now."""
        if self._counting is None:
            return None
        try:
            count = await self._counting.generation()
        except Exception:
            return UNREADABLE
        return UNREADABLE if count is None else count

    async def flight_count(self) -> object:
        """The purge count a flight starts under: the store's own recent reading when it
        keeps one (a tier's, see :meth:`~adcp_stale_cache.stores.TieredStore.heard_generation`:
        no round trip), else :meth:`count`. A reading taken before the flight is as good as
        one taken at its start, only more cautious: a purge in between refuses its write too."""
        if self._listening is not None:
            try:
                count = await self._listening.heard_generation()
            except Exception:
                count = None
            if count is not None:
                return count
        return await self.count()

    async def store_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, before: object
    ) -> bool:
        """Store ``entry`` unless a purge landed since the count read ``before``: in one step
        with the check where the store offers it, else just after it. False when a purge
        landed (the write refused); a store's fault loses the write as ``set`` does.

        A flight that could not read the count when it started witnessed nothing: if the
        count can be read now, the store came back meanwhile and a purge may have landed
        unseen, so the write is refused; while it still cannot be read, the write goes as
        ``set`` would (the tiers' ``unheard_fresh_seconds`` bound what a process that heard
        nothing serves)."""
        if before is UNREADABLE:
            if await self.count() is not UNREADABLE:
                return False
            await self.store.set(key, entry, ttl_seconds)
            return True
        if before is not None and self._guarded is not None:
            return bool(await self._guarded.set_unless_purged(key, entry, ttl_seconds, before))
        if before is not None and purged_since(before, await self.count()):
            return False  # (no count read before: nothing to compare, no second read)
        await self.store.set(key, entry, ttl_seconds)
        return True


def purged_since(before: object, now: object) -> bool:
    """True when a purge landed between two readings (both known)."""
    known = before is not None and now is not None
    return known and UNREADABLE not in (before, now) and now != before
