"""A bounded in-process store: least recently used entries go first, by count and by bytes."""

from __future__ import annotations

import dataclasses
import heapq
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..core.entry import Entry
from .label_index import LabelIndex, selected_by

_Item = tuple[Entry, float]  # (entry, expiry time)

#: Under the GIL a dict read and a ``move_to_end`` are each atomic, so reads take no lock;
#: free-threaded CPython has no such guarantee.
_LOCKED_READS = not getattr(sys, "_is_gil_enabled", lambda: True)()


class MemoryStore:
    """In-memory store, bounded by entry count and by total bytes; safe to share between threads.

    ``clock`` must be the clock the cache stamps entries with, and never go back. ``entries``
    and ``bytes`` count an expired entry until the next write removes it; reads never serve
    it. A cache reads this class's entries in place (:meth:`get_now`); a subclass's ``get``
    is awaited, so a test injects a read fault by subclassing, not by patching ``get``."""

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (max_entries >= 1 and max_bytes >= 1):  # NaN too
            raise ValueError("max_entries and max_bytes must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._items: OrderedDict[str, _Item] = OrderedDict()  # least recently used first
        self._expiries: list[tuple[float, str]] = []  # a heap; a rewrite leaves the old one
        self._bytes = 0
        self._index = LabelIndex()
        self._lock = threading.RLock()  # writes; reentrant: see set_unless_purged
        self._purges = 0

    async def get(self, key: str) -> Entry | None:
        """The entry under ``key`` if it has not expired."""
        return self.get_now(key)

    def _read(self, key: str) -> Entry | None:
        """:meth:`get`, without a coroutine: a read here never waits."""
        item = self._items.get(key)
        if item is None or not self.clock() < item[1]:
            return None
        # A write may have removed it since: the read stands, as if it came first.
        try:  # noqa: SIM105 (contextlib.suppress costs a hit a tenth of its read)
            self._items.move_to_end(key)
        except KeyError:
            pass
        return item[0]

    def _read_locked(self, key: str) -> Entry | None:
        with self._lock:
            return self._read(key)

    #: :meth:`get`, without a coroutine: a read here never waits.
    get_now = _read_locked if _LOCKED_READS else _read

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        """Keep ``entry``; evicts least recently used entries past either bound."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            old = self._items.pop(key, None)
            if old is not None:
                self._forget(key, old)
            expires_at, size = now + ttl_seconds, entry.size
            # Too large to keep, or expired already: never serve the older value either.
            if size > self.max_bytes or not now < expires_at:
                return
            # Room made before it goes in: a lock-free read may move any held entry behind
            # the newest, which must not be the one evicted.
            while len(self._items) >= self.max_entries or self._bytes + size > self.max_bytes:
                self._forget(*self._items.popitem(last=False))
            self._items[key] = (entry, expires_at)
            self._bytes += size
            self._index.add(key, entry.labels)
            heapq.heappush(self._expiries, (expires_at, key))

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
            old = self._items.pop(key, None)
            if old is not None:
                self._forget(key, old)

    async def scan(self) -> list[tuple[str, Entry]]:
        """Every unexpired (key, entry), least recently used first (recency left as it was)."""
        with self._lock:
            self._expire(self.clock())
            return [(key, item[0]) for key, item in self._snapshot()]

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Mark the entries ``match`` selects for revalidation (``soft``) or forget them; how
        many."""
        with self._lock:
            self._expire(self.clock())
            found = [(key, item) for key, item in self._selectable(match) if match(key, item[0])]
            for key, (entry, expires_at) in found:
                if soft:  # the same size, labels and expiry, in place: a purge is not a use
                    self._items[key] = (dataclasses.replace(entry, revalidate=True), expires_at)
                else:
                    del self._items[key]
                    self._forget(key, (entry, expires_at))
            self._purges += 1  # every purge, one that found nothing too
        return len(found)

    def _selectable(self, match: Callable[[str, Entry], bool]) -> list[tuple[str, _Item]]:
        named = selected_by(match)
        if named is None:
            return self._snapshot()
        labels, store_key, built = named
        if store_key is None:
            keys = self._index.candidates(labels)
        else:  # the entry, and those built from it (see Selection)
            from_it = self._index.candidates([built]) if built is not None else ()
            keys = list(dict.fromkeys([store_key, *from_it]))  # it may be built from itself
        held = ((key, self._items.get(key)) for key in keys)
        return [(key, item) for key, item in held if item is not None]

    def _snapshot(self) -> list[tuple[str, _Item]]:
        # A lock-free read moving an entry while the list is copied (a finalizer run by the
        # garbage collector can switch threads) breaks the copy: copy again.
        for _ in range(1000):
            try:
                return list(self._items.items())
            except RuntimeError:
                continue
        raise RuntimeError("the memory store's entries kept moving while being listed")

    def _expire(self, now: float) -> None:
        heap, items = self._expiries, self._items
        if len(heap) > 2 * len(items) + 64:  # rewrites left too many old expiries behind
            heap[:] = [(item[1], key) for key, item in self._snapshot()]
            heapq.heapify(heap)
        while heap and not now < heap[0][0]:
            expires_at, key = heapq.heappop(heap)
            item = items.get(key)
            if item is not None and item[1] == expires_at:  # not rewritten since
                del items[key]
                self._forget(key, item)

    def _forget(self, key: str, item: _Item) -> None:
        self._bytes -= item[0].size
        self._index.remove(key, item[0].labels)

    async def generation(self) -> int:
        """How many purges this store has seen."""
        return self._purges

    @property
    def entries(self) -> int:
        """How many entries are held (expired ones linger until the next write)."""
        return len(self._items)

    @property
    def bytes(self) -> int:
        """Bytes accounted against ``max_bytes``."""
        return self._bytes
