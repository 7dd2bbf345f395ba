"""A bounded in-process store: least recently used entries go first, by count and by bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import Cache, TLRUCache

from ..core.entry import Entry
from .label_index import LabelIndex, selected_by

_Item = tuple[Entry, float]  # (entry, expiry time)


class MemoryStore:
    """In-memory store, bounded by entry count and by total bytes; safe to share between threads.

    ``clock`` must be the clock the cache stamps entries with."""

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("max_entries and max_bytes must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._data = _IndexedCache(max_bytes, clock)
        self._lock = threading.RLock()  # reentrant: see set_unless_purged
        self._purges = 0

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key`` if it has not expired."""
        try:  # one lookup: TLRUCache.get would check expiry twice (``in``, then ``[]``)
            with self._lock:
                return self._data[key][0]
        except KeyError:  # absent, or expired
            return None

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Keep ``entry``; evicts least recently used entries past either bound."""
        with self._lock:
            if entry.size > self.max_bytes:
                self._data.pop(key, None)  # too large to keep: never serve an older value
                return
            self._data[key] = (entry, self.clock() + ttl_seconds)
            while len(self._data) > self.max_entries:
                self._data.popitem()

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """Keep ``entry`` unless a purge landed since the purge count was ``count`` (False)."""
        # The lock spans the check and the write (neither awaits): a purge by another
        # thread lands before or after, never in between.
        with self._lock:  # reentrant: set takes it too
            if await self.generation() != count:
                return False
            await self.set(key, entry, ttl_seconds)
            return True

    async def delete(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            self._data.pop(key, None)

    async def scan(self) -> list[tuple[str, Entry]]:
        """Every unexpired (key, entry), for inspection (recency order left as it was)."""
        with self._lock:
            return [(key, item[0]) for key, item in self._items()]

    def _items(self) -> list[tuple[str, tuple[Entry, float]]]:
        """Unexpired items, read without touching their recency."""
        self._data.expire()
        return [(key, Cache.__getitem__(self._data, key)) for key in list(self._data)]

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Mark the entries ``match`` selects for revalidation (``soft``) or forget them; how
        many."""
        with self._lock:
            found = [(key, item) for key, item in self._selectable(match) if match(key, item[0])]
            for key, (entry, expires_at) in found:
                if soft:  # the same size, labels and expiry: rewritten in place
                    self._data.mark(key, (dataclasses.replace(entry, revalidate=True), expires_at))
                else:
                    with contextlib.suppress(KeyError):  # expired meanwhile: gone all the same
                        del self._data[key]
            self._purges += 1  # every purge, one that found nothing too
        return len(found)

    def _selectable(self, match: Callable[[str, Entry], bool]) -> list[tuple[str, _Item]]:
        named = selected_by(match)
        if named is None:
            return self._items()
        labels, store_key, built = named
        self._data.expire()
        index = self._data.index
        if store_key is None:
            keys = index.candidates(labels)
        else:  # the entry, and those built from it (see Selection)
            keys = [store_key, *(index.candidates([built]) if built is not None else ())]
        held = ((key, self._data.held(key)) for key in keys)
        return [(key, item) for key, item in held if item is not None]

    async def generation(self) -> int:
        """How many purges this store has seen."""
        return self._purges

    @property
    def entries(self) -> int:
        """How many entries are held (expired ones may linger until touched)."""
        return len(self._data)

    @property
    def bytes(self) -> int:
        """Bytes accounted against ``max_bytes``."""
        return int(self._data.currsize)


class _IndexedCache(TLRUCache[str, _Item]):
    """The store's items, with a label index kept exact through writes, deletes, evictions
    (``popitem``) and expiries (``expire``, which cachetools calls on every write)."""

    def __init__(self, max_bytes: int, clock: Callable[[], float]) -> None:
        super().__init__(maxsize=max_bytes, ttu=_expires_at, timer=clock, getsizeof=_sizeof)
        self.index = LabelIndex()

    def __setitem__(self, key: str, value: _Item) -> None:
        old = self.held(key)
        if old is not None:  # replaced (or, expired, dropped): its labels go first
            self.index.remove(key, old[0].labels)
        try:
            super().__setitem__(key, value)
        finally:  # indexed as held: a value too large or already expired is not
            new = self.held(key)
            if new is not None:
                self.index.add(key, new[0].labels)

    def __delitem__(self, key: str) -> None:
        held = self.held(key)
        try:
            super().__delitem__(key)  # (raises KeyError for an expired key, once deleted)
        finally:
            if held is not None and not Cache.__contains__(self, key):
                self.index.remove(key, held[0].labels)

    def expire(self, time: float | None = None) -> list[tuple[str, _Item]]:
        expired = list(super().expire(time))
        for key, (entry, _) in expired:
            self.index.remove(key, entry.labels)
        return expired

    def clear(self) -> None:
        super().clear()
        self.index.clear()

    def held(self, key: str) -> _Item | None:
        """The item held under ``key`` (expired or not), read without touching its recency."""
        return Cache.__getitem__(self, key) if Cache.__contains__(self, key) else None

    def mark(self, key: str, value: _Item) -> None:
        """Rewrite a held item with one of the same size, labels and expiry, keeping its
        recency: a purge is not a use."""
        Cache.__setitem__(self, key, value)


def _expires_at(_key: str, item: _Item, now: float) -> float:
    return item[1]


def _sizeof(item: Any) -> int:
    return int(item[0].size)
