"""A cached upstream answer: its serialised bytes and when it was stored."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached value.

    ``stored_at`` is a reading of the cache's clock (monotonic by default, so a wall-clock
    jump never makes an entry look younger or older than it is).
    """

    data: bytes
    stored_at: float

    def age(self, now: float) -> float:
        """Seconds since the entry was stored, never negative."""
        return max(0.0, now - self.stored_at)

    @property
    def size(self) -> int:
        """Bytes this entry accounts for in a store's byte bound."""
        return len(self.data) + _OVERHEAD


# Rough per-entry bookkeeping (object headers, key, dict slot) counted against the byte bound.
_OVERHEAD = 120
