"""Steer the cache: invalidate entries softly or hard, refresh them now, inspect them.

Entries are selected by their labels (upstream, URL, surface, partition, tags); usage, and what
soft and hard mean: docs/operating.md."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from ..core.entry import Entry
from ..core.labels import built_from, label_value, labels
from ..core.policy import Upstream
from ..pipeline.flight import RememberedRefresh
from ..pipeline.metrics import CacheMetrics
from ..stores import FailureCounting, MemoryStore, Purgeable
from ..stores.tiered import tiers
from .steering import Steerable

logger = logging.getLogger("adcp_stale_cache.control")


class PurgeIncomplete(RuntimeError):
    """A store failed during an invalidation: processes sharing it may not have taken the
    purge. ``count`` is what was taken (this process's own tiers included)."""

    def __init__(self, count: int, stores: list[str]) -> None:
        super().__init__(
            f"{', '.join(stores)} failed during the purge: processes sharing it may not see "
            f"it ({count} entries taken); try again"
        )
        self.count = count
        self.stores = stores


@dataclass(frozen=True)
class Warm:
    """One call to make at start-up: what ``fetch`` would be given."""

    upstream: Upstream
    key: object
    call: Callable[[], Awaitable[Any]]
    surface: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """Which entries an invalidation takes: all the given criteria must hold. A key selects
    the entry under it and every entry built from it (labelled :func:`built_from` it)."""

    labels: frozenset[str]
    store_key: str | None = None

    def __call__(self, key: str, entry: Entry) -> bool:
        """True when the entry stored under ``key`` is selected."""
        if (
            self.store_key is not None
            and key != self.store_key
            and self.from_key not in entry.labels
        ):
            return False
        return self.labels.issubset(entry.labels)

    @property
    def from_key(self) -> str | None:
        """The label of the entries built from the selected key (None: no key selected)."""
        return None if self.store_key is None else built_from(self.store_key)


class UpstreamStats(CacheMetrics):
    """Counts per upstream name, from the cache's events (a metrics sink)."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.stale_serves: dict[str, int] = {}
        self._recent: dict[str, deque[list[int]]] = {}  # [second, count] per second, a minute
        self.last_failure: dict[str, tuple[str, float]] = {}  # code, wall-clock time
        self.breaker_open: dict[str, bool] = {}

    def upstream_failure(self, upstream: str, code: str) -> None:
        """Count an outage failure and remember it as the last."""
        self.failures[upstream] = self.failures.get(upstream, 0) + 1
        self.last_failure[upstream] = (code, time.time())

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        """Count a stale serve."""
        self.stale_serves[upstream] = self.stale_serves.get(upstream, 0) + 1
        second = int(time.monotonic())
        recent = self._recent.setdefault(upstream, deque(maxlen=60))
        if recent and recent[-1][0] == second:
            recent[-1][1] += 1
        else:
            recent.append([second, 1])

    def stale_serves_last_minute(self, upstream: str) -> int:
        """Stale serves of ``upstream`` over the last 60 seconds."""
        since = int(time.monotonic()) - 60
        return sum(
            count for second, count in list(self._recent.get(upstream, ())) if second > since
        )

    def breaker(self, upstream: str, is_open: bool) -> None:
        """Remember the breaker's state."""
        self.breaker_open[upstream] = is_open


class RecentRefreshes:
    """The refresh of each key this process filled lately, bounded by keys and bytes: what
    :meth:`CacheControl.refresh` can re-run."""

    def __init__(self, max_keys: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        if max_keys < 1 or max_bytes < 1:
            raise ValueError("remember_keys and remember_bytes must be positive")
        self.max_keys = max_keys
        self._refreshes: LRUCache[str, tuple[frozenset[str], RememberedRefresh, int]]
        self._refreshes = LRUCache(max_bytes, getsizeof=lambda remembered: remembered[2])
        self._lock = threading.Lock()  # fetches come from every thread of a seller

    def remember(
        self, store_key: str, labels: tuple[str, ...], refresh: RememberedRefresh, weight: int = 0
    ) -> None:
        """Remember ``refresh`` as the one of ``store_key`` (see steering's RefreshMemory)."""
        with self._lock:
            try:
                self._refreshes[store_key] = (frozenset(labels), refresh, max(1, weight))
            except ValueError:  # larger than the whole bound: not remembered
                self._refreshes.pop(store_key, None)
                return
            while len(self._refreshes) > self.max_keys:
                self._refreshes.popitem()

    @property
    def held_bytes(self) -> int:
        """What the remembered refreshes weigh."""
        return int(self._refreshes.currsize)

    def __len__(self) -> int:
        return len(self._refreshes)

    def selected(self, selection: Selection) -> list[tuple[str, RememberedRefresh]]:
        """The remembered refreshes of the keys ``selection`` takes."""
        with self._lock:
            items = list(self._refreshes.items())
        return [
            (key, refresh)
            for key, (labels, refresh, _) in items
            if selection(key, Entry(b"", 0.0, tuple(labels)))
        ]


class CacheControl:
    """Invalidation, refresh and inspection for one :class:`~adcp_stale_cache.UpstreamCache`;
    remembers the refreshes of the last ``remember_keys`` keys filled (within
    ``remember_bytes``) for :meth:`refresh`."""

    def __init__(
        self,
        cache: Steerable,
        *,
        remember_keys: int = 10_000,
        remember_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.cache = cache
        self.stats = UpstreamStats()
        cache.report_to(self.stats)
        self.recent = RecentRefreshes(remember_keys, remember_bytes)
        cache.remember_refreshes(self.recent)

    async def warm(self, calls: Iterable[Warm], *, concurrency: int = 8) -> int:
        """Fetch each :class:`Warm` as a request would, ``concurrency`` at a time; how many
        were fetched. A call that fails is logged and skipped: warming never stops a start."""
        limit = asyncio.Semaphore(concurrency)

        async def one(item: Warm) -> bool:
            async with limit:
                try:
                    await self.cache.fetch(
                        item.upstream, item.key, item.call, surface=item.surface, tags=item.tags
                    )
                except Exception as exc:
                    logger.warning(
                        "warm_failed upstream=%s error=%s", item.upstream.name, type(exc).__name__
                    )
                    return False
                return True

        return sum(await asyncio.gather(*(one(item) for item in calls)))

    async def snapshot(self) -> dict[str, Any]:
        """The operator's view, JSON-ready: per upstream called since the control was attached,
        its breaker, failures and stale serves; per surface, the entries of this process's
        memory tier and their ages."""
        stats = self.stats
        names = sorted({*stats.failures, *stats.stale_serves, *stats.breaker_open})
        upstreams = {}
        for name in names:
            last = stats.last_failure.get(name)
            upstreams[name] = {
                "breaker": "open" if self.cache.breaker_open(name) else "closed",
                "failures": stats.failures.get(name, 0),
                "stale_serves": stats.stale_serves.get(name, 0),
                "stale_serves_last_minute": stats.stale_serves_last_minute(name),
                "last_failure": {"code": last[0], "at": last[1]} if last else None,
            }
        ages: dict[str, list[float]] = {p.name: [] for p in self.cache.surfaces.policies}
        memory = next((t for t in tiers(self.cache.store) if isinstance(t, MemoryStore)), None)
        if memory is not None:
            now = self.cache.clock()
            for _, entry in await memory.scan():
                surface = label_value(entry.labels, "surface") or "?"
                ages.setdefault(surface, []).append(entry.age(now))
        surfaces = {name: _summary(values) for name, values in sorted(ages.items())}
        return {"upstreams": upstreams, "surfaces": surfaces}

    async def invalidate(
        self,
        *,
        upstream: Upstream | str | None = None,
        surface: str | None = None,
        tags: Iterable[str] = (),
        partition: str | None = None,
        key: object = None,
        soft: bool = True,
    ) -> int:
        """Invalidate the entries every given selector (at least one) matches; how many.

        ``upstream`` by name or as an :class:`Upstream`; ``key`` needs the ``Upstream`` (and
        its ``partition``). Raises :class:`PurgeIncomplete` when a shared store failed."""
        selection = self._selection(upstream, surface, tags, partition, key)
        count = await self._purge(selection, soft)
        self.cache.metrics.invalidation("soft" if soft else "hard", count)
        logger.info(  # selectors are names and tags (partitions are digests): no credential
            "invalidate soft=%s selectors=%s key=%s count=%d",
            soft,
            _shown(selection),
            selection.store_key is not None,
            count,
        )
        return count

    async def refresh(
        self,
        *,
        upstream: Upstream | str | None = None,
        surface: str | None = None,
        tags: Iterable[str] = (),
        partition: str | None = None,
        key: object = None,
        concurrency: int = 8,
    ) -> int:
        """Soft-purge what the selectors match, then re-run in the background the calls that
        filled the matching keys this process remembers, ``concurrency`` at a time, on this
        event loop; how many started. A failed refresh leaves the entry as the fallback."""
        selection = self._selection(upstream, surface, tags, partition, key)
        marked = await self._purge(selection, soft=True)
        started = self.recent.selected(selection)
        self.cache.refresh_soon(started, concurrency)
        self.cache.metrics.invalidation("refresh", len(started))
        logger.info(
            "refresh selectors=%s key=%s marked=%d started=%d",
            _shown(selection),
            selection.store_key is not None,
            marked,
            len(started),
        )
        return len(started)

    async def _purge(self, selection: Selection, soft: bool) -> int:
        store = self.cache.store
        if not isinstance(store, Purgeable):
            raise TypeError(f"{type(store).__name__} cannot purge entries")
        counted = [t for t in tiers(store) if isinstance(t, FailureCounting)]
        before = [int(t.failures) for t in counted]
        count = int(await store.purge(selection, soft=soft))
        failed = [
            type(t).__name__ for t, was in zip(counted, before, strict=True) if t.failures > was
        ]
        if failed:
            logger.warning("invalidate_incomplete stores=%s count=%d", failed, count)
            raise PurgeIncomplete(count, failed)
        return count

    def _selection(
        self,
        upstream: Upstream | str | None,
        surface: str | None,
        tags: Iterable[str],
        partition: str | None,
        key: object,
    ) -> Selection:
        tags = tuple(tags)
        if upstream is None and surface is None and not tags and partition is None:
            raise ValueError("name at least one of upstream, surface, tags, partition")
        store_key = None
        if key is not None:
            if not isinstance(upstream, Upstream):
                raise ValueError("key= needs upstream= as an Upstream (its URL is part of the key)")
            store_key = self.cache.store_key(upstream, key, partition)
        selected = labels(
            upstream=upstream.name if isinstance(upstream, Upstream) else upstream,
            url=upstream.url if isinstance(upstream, Upstream) else None,
            surface=surface,
            partition=partition,
            tags=tags,
        )
        return Selection(frozenset(selected), store_key)


def _shown(selection: Selection) -> list[str]:
    """A selection's labels for a log line: names and tags (partitions are digests, left out)."""
    return sorted(label for label in selection.labels if not label.startswith("partition="))


def _summary(ages: list[float]) -> dict[str, Any]:
    if not ages:
        return {"entries": 0, "age_seconds": None}
    ages.sort()

    def at(share: float) -> int:
        return int(ages[min(len(ages) - 1, int(share * len(ages)))])

    return {"entries": len(ages), "age_seconds": {"p50": at(0.5), "p90": at(0.9), "max": at(1)}}
