"""Stores behind one protocol, and their capabilities (``RedisStore``: ``stores.redis``)."""

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
