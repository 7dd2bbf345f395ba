"""Open breakers published through a shared store (``UpstreamCache(share_breakers=True)``):
the other processes answer from cache at once, each still keeping and probing its own breaker."""

from __future__ import annotations

import json

from ..core.failures import Failure
from ..core.policy import FailureKind
from ..stores import SharedBreakerStore, Store
from .breaker import BreakerKey


class SharedBreakers:
    """The open breakers other processes published through ``store`` (if it supports them)."""

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
        """A call succeeded: withdraw what was shared, if anything."""
        if key not in self._published:
            return
        self._published.discard(key)
        if self._shared is not None:
            await self._shared.breaker_closed(_name(key))


def _name(key: BreakerKey) -> str:
    """The store's name of breaker ``key`` (credentials by their digest only)."""
    name, url, credentials = key
    found = name if url is None else f"{name} {url}"
    return found if credentials is None else f"{found} credentials={credentials}"
