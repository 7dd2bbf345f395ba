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

from .entry import Entry


async def purge_count(store: Any) -> object:
    """The store's purge count, or None when it keeps none or cannot be read now (a store
    that cannot be read is no witness: the flight stores as it did before, and the tiers'
    ``unheard_fresh_seconds`` bound what it may then serve)."""
    generation = getattr(store, "generation", None)
    if generation is None:
        return None
    try:
        return await generation()
    except Exception:
        return None


def purged_since(before: object, now: object) -> bool:
    """True when a purge landed between two readings (both known)."""
    return before is not None and now is not None and now != before


async def store_unless_purged(
    store: Any, key: str, entry: Entry, ttl_seconds: float, before: object
) -> bool:
    """Store ``entry`` unless a purge landed since the count read ``before``: in one step
    with the check where the store offers it, else just after it. False when a purge
    landed (the write refused); a store's fault loses the write as ``set`` does."""
    conditional = getattr(store, "set_unless_purged", None)
    if before is not None and conditional is not None:
        return bool(await conditional(key, entry, ttl_seconds, before))
    if before is not None and purged_since(before, await purge_count(store)):
        return False  # (no count read before: nothing to compare, no second read)
    await store.set(key, entry, ttl_seconds)
    return True
