"""Matching wholesale probes answered without composing: the last full answer to a request
and whether every entry it read is still stored as it was and fresh (a purge, refresh,
eviction or newer answer ends it)."""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from ..pipeline.collector import Composed
from .wholesale import Scope, canonical, release_of

#: Request members that do not change its answer.
NOT_THE_ANSWER = frozenset(
    {
        "context",
        "idempotency_key",
        "if_wholesale_feed_version",
        "if_pricing_version",
        "if_feed_version",
    }
)


@dataclass(frozen=True, slots=True)
class Known:
    """The last full answer to a request: its token and scope, the caller partition of its
    entries (None: shared), and what it read as ``(store key, stored at)``."""

    token: str
    scope: Scope
    partition: str | None
    read: tuple[tuple[str, float], ...]
    fresh_until: float


class ProbeMemo:
    """The last full answer per request, at most ``size`` requests (LRU)."""

    def __init__(self, size: int = 10_000) -> None:
        self._known: LRUCache[str, Known] = LRUCache(size)

    @staticmethod
    def key(request: Mapping[str, Any], tool: str, *parts: object) -> str:
        """What identifies a request's answer: the canonical request to ``tool`` less
        :data:`NOT_THE_ANSWER`, and the seller's ``parts`` (scope, account, agent)."""
        asked = {k: v for k, v in request.items() if k not in NOT_THE_ANSWER}
        form = canonical(asked, tool, release_of(request))
        text = json.dumps([tool, form, [str(p) for p in parts]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Known | None:
        """The last full answer to the request of ``key``, if remembered."""
        return self._known.get(key)

    def forget(self, key: str) -> None:
        """Forget the request of ``key``."""
        self._known.pop(key, None)

    def remember(
        self,
        key: str,
        token: str,
        scope: Scope,
        partition: str | None,
        composition: list[Composed],
    ) -> None:
        """Remember a full answer, if everything it read is stored and fresh."""
        read = tuple((c.store_key, c.stored_at) for c in composition if c.store_key)
        if not composition or len(read) != len(composition):
            self._known.pop(key, None)  # something was not stored: never from memory
            return
        fresh_until = min(c.fresh_until for c in composition)
        self._known[key] = Known(token, scope, partition, read, fresh_until)

    @staticmethod
    async def still_current(known: Known, store: Any, now: float) -> bool:
        """Whether every entry the answer read is still in ``store`` as it was, and fresh."""
        if now >= known.fresh_until:
            return False
        for store_key, stored_at in known.read:
            try:
                entry = await store.get(store_key)
            except Exception:
                return False  # a store that fails: compose, as a lookup would
            if entry is None or entry.tombstone or entry.revalidate:
                return False
            if entry.stored_at != stored_at:
                return False
        return True


_memos: weakref.WeakKeyDictionary[Any, ProbeMemo] = weakref.WeakKeyDictionary()


def memo_of(cache: Any) -> ProbeMemo:
    """The probe memo of ``cache`` (one per cache, made on first use)."""
    memo = _memos.get(cache)
    if memo is None:
        memo = _memos[cache] = ProbeMemo()
    return memo
