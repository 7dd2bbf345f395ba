"""Stores behind one protocol."""

from .base import Store
from .memory import MemoryStore

__all__ = ["MemoryStore", "Store"]
