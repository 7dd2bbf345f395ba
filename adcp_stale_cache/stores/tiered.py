"""Two tiers: a bounded memory store in front of a shared one (a file, Redis).

Reads take the memory copy while it is young (``near_max_age_seconds``), else ask the shared
store and keep the newer of the two, so a process sees what another process refreshed. When
the shared store is down or empty, the memory copy is still served: a process keeps its
stale fallback through a Redis outage, and a cold process finds one in Redis through an
upstream outage. Writes go to both tiers.

Tiers nest: memory in front of a file in front of Redis is
``TieredStore(TieredStore(redis, near=file), near=memory)``; the file then answers while
Redis is down, and after a restart while Redis is unreachable.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from ..entry import Entry
from .base import Store
from .memory import MemoryStore


class TieredStore:
    """Memory in front of ``far``; both keep entries on the shared wall clock."""

    clock = staticmethod(time.time)

    def __init__(
        self,
        far: Store,
        near: Store | None = None,
        *,
        near_max_age_seconds: float = 1.0,
        near_ttl_seconds: float = 3600.0,
    ) -> None:
        self.far = far
        self.near: Store = near if near is not None else MemoryStore()
        self.near_max_age_seconds = near_max_age_seconds
        self.near_ttl_seconds = near_ttl_seconds

    async def get(self, key: str) -> Entry | None:
        """The newer of the memory and shared copies (memory alone while it is young)."""
        near = await self.near.get(key)
        if near is not None and self.clock() - near.stored_at < self.near_max_age_seconds:
            return near
        far = await self.far.get(key)
        # The newer copy wins; on a tie the shared one when it carries another process's purge.
        if far is None or (near is not None and near.stored_at > far.stored_at):
            return near
        if near is not None and near.stored_at == far.stored_at and _same_marks(near, far):
            return near  # the same entry: no rewrite of the memory copy
        if far.tombstone:  # hard-purged by some process: drop this process's copy too
            await self.near.delete(key)
            return far
        await self.near.set(key, far, self.near_ttl_seconds)
        return far

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Write both tiers."""
        await self.near.set(key, entry, ttl_seconds)
        await self.far.set(key, entry, ttl_seconds)

    async def delete(self, key: str) -> None:
        """Forget ``key`` in both tiers."""
        await self.near.delete(key)
        await self.far.delete(key)

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Invalidate in both tiers; the count is the shared tier's (the near one's when the
        shared one cannot purge)."""
        near = await _purge(self.near, match, soft)
        far = await _purge(self.far, match, soft)
        return far if far is not None else near or 0

    @asynccontextmanager
    async def lease(self, key: str, seconds: float) -> AsyncIterator[bool]:
        """The shared store's lease (True, no coordination, when it has none)."""
        lease: Any = getattr(self.far, "lease", None)
        if lease is None:
            yield True
            return
        async with lease(key, seconds) as holder:
            yield holder

    async def lease_active(self, key: str) -> bool:
        """Whether another process holds the refresh lease of ``key``."""
        active: Any = getattr(self.far, "lease_active", None)
        return bool(await active(key)) if active is not None else False


def _same_marks(near: Entry, far: Entry) -> bool:
    return near.revalidate == far.revalidate and near.tombstone == far.tombstone


async def _purge(store: Any, match: Callable[[str, Entry], bool], soft: bool) -> int | None:
    purge = getattr(store, "purge", None)
    return int(await purge(match, soft=soft)) if purge is not None else None


def tiers(store: object) -> list[Any]:
    """``store`` and, for tiered stores, every store beneath it (nearest first)."""
    if store is None:
        return []
    return [store, *tiers(getattr(store, "near", None)), *tiers(getattr(store, "far", None))]
