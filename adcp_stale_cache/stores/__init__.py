"""Stores behind one protocol, and the capabilities they declare beside it. ``RedisStore``
lives in ``stores.redis`` (the ``redis`` extra)."""

from .base import (
    Bounded,
    Clocked,
    FailureCounting,
    GuardedWrites,
    Leasing,
    Listening,
    Purgeable,
    PurgeCounting,
    Selecting,
    SharedBreakerStore,
    Store,
)
from .memory import MemoryStore
from .tiered import TieredStore

__all__ = [
    "Bounded",
    "Clocked",
    "FailureCounting",
    "GuardedWrites",
    "Leasing",
    "Listening",
    "MemoryStore",
    "PurgeCounting",
    "Purgeable",
    "Selecting",
    "SharedBreakerStore",
    "Store",
    "TieredStore",
]
