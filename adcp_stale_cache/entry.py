"""A cached upstream answer: its serialised bytes, when it was stored, and what it is of."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached value.

    ``stored_at`` is a reading of the cache's clock (monotonic in memory, the wall clock in
    shared and file stores). ``labels`` say what the entry is of (``upstream=NAME``,
    ``surface=NAME``, ``partition=P``, ``tag=T``): invalidations select entries by them.
    ``revalidate`` marks an entry soft-purged: past its freshness target whatever its age,
    still the outage fallback. A ``tombstone`` stands for an entry hard-purged in a store
    shared by processes: no entry, and it tells a process's memory tier to drop its copy.
    """

    data: bytes
    stored_at: float
    labels: tuple[str, ...] = ()
    revalidate: bool = False
    tombstone: bool = False

    def age(self, now: float) -> float:
        """Seconds since the entry was stored, never negative."""
        return max(0.0, now - self.stored_at)

    @property
    def size(self) -> int:
        """Bytes this entry accounts for in a store's byte bound."""
        return len(self.data) + sum(len(label) for label in self.labels) + _OVERHEAD


# Rough per-entry bookkeeping (object headers, key, dict slot) counted against the byte bound.
_OVERHEAD = 120
