"""The witness that a purge landed while an upstream call was in flight: a flight stores its
answer only if the store's purge count has not moved since it called, or it would undo the purge.
"""

from __future__ import annotations

from typing import Any

from ..core.entry import Entry
from .base import GuardedWrites, Listening, PurgeCounting, Store

#: A purge count the store keeps but could not answer.
UNREADABLE: Any = type("Unreadable", (), {"__repr__": lambda self: "UNREADABLE"})()


class PurgeWitness:
    """The purge count of ``store`` as flights read it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._counting = store if isinstance(store, PurgeCounting) else None
        self._guarded = store if isinstance(store, GuardedWrites) else None
        self._listening = store if isinstance(store, Listening) else None

    async def count(self) -> object:
        """The store's purge count (None: it keeps none; :data:`UNREADABLE`: not now)."""
        if self._counting is None:
            return None
        try:
            count = await self._counting.generation()
        except Exception:
            return UNREADABLE
        return UNREADABLE if count is None else count

    async def flight_count(self) -> object:
        """The purge count a flight starts under: the store's recent reading (no round trip)
        when it keeps one, else :meth:`count`; an older reading only refuses more writes."""
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
        """Store ``entry`` unless a purge landed since the count read ``before`` (in one step
        where the store offers it); False when the write was refused."""
        # Unread at the start but readable now: a purge may have landed unseen.
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
