"""Stores behind one protocol. ``RedisStore`` lives in ``stores.redis`` (the ``redis`` extra)."""

from .base import Store
from .memory import MemoryStore
from .tiered import TieredStore

__all__ = ["MemoryStore", "Store", "TieredStore"]
