"""The store protocol: every store keeps entries by key for a given time, nothing more."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..entry import Entry


@runtime_checkable
class Store(Protocol):
    """An async key-value store of :class:`~adcp_stale_cache.entry.Entry`.

    Stores know bytes, not wires nor policies: ``ttl_seconds`` is how long the entry may be
    kept, after which ``get`` must not return it. A store that fails should raise; the cache
    decides what a failure means.

    Optional, found by name: ``purge(match, soft=)`` (invalidations), ``generation()`` (a
    count of its purges, see :mod:`~adcp_stale_cache.purges`), and, with it,
    ``set_unless_purged(key, entry, ttl_seconds, count) -> bool``: the write, refused
    (False) when the count is no longer ``count``, in one step with that check.
    """

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key``, or None."""
        ...

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Keep ``entry`` under ``key`` for ``ttl_seconds``."""
        ...

    async def delete(self, key: str) -> None:
        """Forget ``key``."""
        ...
