"""A cached upstream answer: its serialised bytes, when it was stored, and what it is of."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Terms:
    """What the upstream said of an answer's freshness, in seconds (None: nothing); ``max_age``
    is 0 for ``no-cache``, ``age`` the ``Age`` it arrived with."""

    max_age: float | None = None
    stale_if_error: float | None = None
    stale_while_revalidate: float | None = None
    age: float = 0.0

    def pack(self) -> bytes:
        """32 bytes: four big-endian doubles, NaN for None."""
        values = (self.max_age, self.stale_if_error, self.stale_while_revalidate, self.age)
        return _TERMS.pack(*(math.nan if v is None else v for v in values))

    @classmethod
    def unpack(cls, raw: bytes) -> Terms | None:
        """The terms :meth:`pack` wrote; None for anything else (or non-finite numbers)."""
        if len(raw) != _TERMS.size:
            return None
        max_age, stale_if_error, swr, age = (
            None if math.isnan(v) else v for v in _TERMS.unpack(raw)
        )
        if not all(
            v is None or (math.isfinite(v) and v >= 0) for v in (max_age, stale_if_error, swr)
        ):
            return None
        if age is None or not (math.isfinite(age) and age >= 0):
            return None
        return cls(max_age, stale_if_error, swr, age)


_TERMS = struct.Struct(">dddd")
TERMS_SIZE = _TERMS.size


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached value; ``stored_at`` is on the cache's clock (monotonic in memory, wall in
    shared stores). ``revalidate`` marks it soft-purged (past target, still a fallback); a
    ``tombstone`` is a shared store's hard purge, telling memory tiers to drop their copy."""

    data: bytes
    stored_at: float
    labels: tuple[str, ...] = ()
    revalidate: bool = False
    tombstone: bool = False
    terms: Terms | None = None

    def age(self, now: float) -> float:
        """Seconds since stored, plus the ``Age`` it arrived with; never negative."""
        age = max(0.0, now - self.stored_at)
        return age if self.terms is None else age + self.terms.age

    @property
    def size(self) -> int:
        """Bytes this entry accounts for in a store's byte bound."""
        return len(self.data) + sum(map(len, self.labels)) + _OVERHEAD


# Rough per-entry bookkeeping (object headers, key, dict slot).
_OVERHEAD = 120
