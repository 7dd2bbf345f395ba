"""Breaker state shared by the processes of a seller through their shared store (opt-in:
``UpstreamCache(share_breakers=True)`` on a Redis store).

When one process's breaker opens on an upstream, it publishes the last failure for the
breaker's cooldown; every other process then answers from cache at once instead of spending
its own first timeouts on the same dead upstream. A process whose call succeeds withdraws it.
Each process keeps its own breaker (and probes after the cooldown): the shared state only
adds "someone saw it down", never holds a process back longer than the cooldown.
"""

from __future__ import annotations

import json

from ..core.failures import Failure
from ..core.policy import FailureKind
from ..stores import SharedBreakerStore, Store
from .breaker import BreakerKey


class SharedBreakers:
    """The open breakers other processes published, through ``store`` (a store without
    breaker support, or one that fails, shares nothing)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._shared = store if isinstance(store, SharedBreakerStore) else None
        self._published: set[BreakerKey] = set()  # open here, or seen open

    async def open_elsewhere(self, key: BreakerKey) -> Failure | None:
        """The failure another process saw, while its breaker ``key`` is open."""
        shared = self._shared
        raw = await shared.breaker_state(_name(key)) if shared is not None else None
        if raw is None:
            return None
        self._published.add(key)
        try:
            state = json.loads(raw)
            return Failure(FailureKind(state["kind"]), str(state["code"]), str(state["message"]))
        except (ValueError, KeyError, TypeError):
            return None  # not ours to read: share nothing

    async def opened(self, key: BreakerKey, failure: Failure, seconds: float) -> None:
        """This process's breaker ``key`` opened: tell the others for ``seconds``."""
        if self._shared is None:
            return
        state = {"kind": failure.kind.value, "code": failure.code, "message": failure.message}
        await self._shared.breaker_opened(_name(key), json.dumps(state), seconds)
        self._published.add(key)

    async def closed(self, key: BreakerKey) -> None:
        """A call succeeded: withdraw what was shared (one write, only when there was)."""
        if key not in self._published:
            return
        self._published.discard(key)
        if self._shared is not None:
            await self._shared.breaker_closed(_name(key))


def _name(key: BreakerKey) -> str:
    """The store's name of breaker ``key`` (an upstream's as before credentials had their own;
    a credentials' breaker by their digest, never the credentials)."""
    name, url, credentials = key
    found = name if url is None else f"{name} {url}"
    return found if credentials is None else f"{found} credentials={credentials}"
