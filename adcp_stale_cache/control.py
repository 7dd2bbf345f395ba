"""Steer the cache: invalidate entries on demand, softly or hard.

Every stored entry carries labels: its upstream (``upstream=NAME``, ``url=URL``), the surface
that stored it (``surface=NAME``), its caller partition (``partition=P``) and the tags the
call attached (``tag=T``: ``fetch(..., tags=...)``, ``cached(..., tags=...)``,
``CachingTransport(..., tags=...)``). :class:`CacheControl` selects entries by them::

    control = CacheControl(cache)
    await control.invalidate(upstream="creative-agent-acme")            # soft: refresh next
    await control.invalidate(tags=["principal:42"], soft=False)         # hard: forget

A **soft** purge (the default) puts matching entries past their freshness target whatever
their age: the next request refreshes, and while the upstream is down the entry is still the
fallback, served with an advisory carrying its real age. A **hard** purge deletes: an outage
then fails, as the spec wants when nothing is cached.

Stores that hold entries for several processes (a file, Redis) carry the mark, so every
process sharing them sees it; a process's memory tier in front sees it once its copy is older
than ``near_max_age_seconds`` (1 s by default). Every store of this package can purge; a
store of your own without ``purge`` is refused (``TypeError``), or skipped as a tier.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from .cache import UpstreamCache
from .entry import Entry
from .policy import Upstream

logger = logging.getLogger("adcp_stale_cache.control")


@dataclass(frozen=True)
class Selection:
    """Which entries an invalidation takes: all the given criteria must hold."""

    labels: frozenset[str]
    store_key: str | None = None

    def __call__(self, key: str, entry: Entry) -> bool:
        """True when the entry stored under ``key`` is selected."""
        if self.store_key is not None and key != self.store_key:
            return False
        return self.labels.issubset(entry.labels)


class CacheControl:
    """Invalidation for one :class:`~adcp_stale_cache.UpstreamCache` (beside it, not in it)."""

    def __init__(self, cache: UpstreamCache) -> None:
        self.cache = cache

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
        """Invalidate the entries every given selector matches; returns how many.

        ``upstream`` by name (every URL of that name) or as an :class:`Upstream` (that one);
        ``key`` is a key as passed to ``fetch`` and needs the ``Upstream`` (and the
        ``partition`` it was stored under, for per-caller surfaces). At least one selector is
        required: there is no "everything" by accident.
        """
        tags = tuple(tags)
        if upstream is None and surface is None and not tags and partition is None:
            raise ValueError("name at least one of upstream, surface, tags, partition")
        labels = {f"tag={tag}" for tag in tags}
        if surface is not None:
            labels.add(f"surface={surface}")
        if partition is not None:
            labels.add(f"partition={partition}")
        store_key = None
        if isinstance(upstream, Upstream):
            labels.add(f"upstream={upstream.name}")
            if upstream.url is not None:
                labels.add(f"url={upstream.url}")
            if key is not None:
                store_key = self.cache.store_key(upstream, key, partition)
        elif upstream is not None:
            labels.add(f"upstream={upstream}")
        if key is not None and store_key is None:
            raise ValueError("key= needs upstream= as an Upstream (its URL is part of the key)")
        purge = getattr(self.cache.store, "purge", None)
        if purge is None:
            raise TypeError(f"{type(self.cache.store).__name__} cannot purge entries")
        count = int(await purge(Selection(frozenset(labels), store_key), soft=soft))
        logger.info(  # selectors are names and tags (partitions are digests): no credential
            "invalidate soft=%s selectors=%s key=%s count=%d",
            soft,
            sorted(label for label in labels if not label.startswith("partition=")),
            store_key is not None,
            count,
        )
        return count
