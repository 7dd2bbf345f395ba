"""The store protocol, and the optional capabilities a store declares beside it.

Every store keeps entries by key (:class:`Store`); the rest are small protocols, checked once
with ``isinstance`` when a stage is built: such a check reads every member (a property runs),
too slow per call, and a store's ``None`` member means "not supported"."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from ..core.entry import Entry


@runtime_checkable
class Store(Protocol):
    """An async key-value store of :class:`~adcp_stale_cache.core.entry.Entry`.

    Stores know bytes, not wires nor policies: ``ttl_seconds`` is how long the entry may be
    kept, after which ``get`` must not return it. A store that fails should raise; the cache
    decides what a failure means. These three methods are all a store needs; the protocols
    beside it in :mod:`adcp_stale_cache.stores` are what a store may add.

    A store of your own::

        class DictStore:
            def __init__(self) -> None:
                self.entries: dict[str, Entry] = {}

            async def get(self, key: str) -> Entry | None:
                return self.entries.get(key)  # (expiry left out)

            async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
                self.entries[key] = entry

            async def delete(self, key: str) -> None:
                self.entries.pop(key, None)
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


@runtime_checkable
class Selecting(Protocol):
    """A purge's ``match`` that says what it selects (a
    :class:`~adcp_stale_cache.ops.control.Selection`): every selected entry carries ``labels``;
    with ``store_key``, only that entry and those labelled ``from_key`` (built from it). A
    store reads those entries only; any other ``match`` is asked of every entry."""

    @property
    def labels(self) -> frozenset[str]: ...

    @property
    def store_key(self) -> str | None: ...

    @property
    def from_key(self) -> str | None: ...

    def __call__(self, key: str, entry: Entry) -> bool: ...


@runtime_checkable
class Purgeable(Protocol):
    """A store that invalidates entries by selection (the control API's purges)."""

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Mark the entries ``match`` selects for revalidation (``soft``), or forget them;
        how many."""
        ...


@runtime_checkable
class PurgeCounting(Protocol):
    """A store that counts its purges: a flight that saw the count move does not store its
    answer (see :mod:`~adcp_stale_cache.pipeline.purges`)."""

    async def generation(self) -> object:
        """The purge count (None: it cannot be read now)."""
        ...


@runtime_checkable
class GuardedWrites(Protocol):
    """A purge-counting store that checks the count and writes in one step."""

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """Keep ``entry`` unless the purge count is no longer ``count`` (False: refused)."""
        ...


@runtime_checkable
class Leasing(Protocol):
    """A store shared by processes that refresh each key once between them."""

    def lease(self, key: str, seconds: float) -> AbstractAsyncContextManager[bool]:
        """Hold the refresh lease of ``key`` for at most ``seconds``: True when held here."""
        ...

    async def lease_active(self, key: str) -> bool:
        """Whether some process holds the refresh lease of ``key``."""
        ...


@runtime_checkable
class SharedBreakerStore(Protocol):
    """A store through which processes share their open breakers (see
    :mod:`~adcp_stale_cache.pipeline.shared_breakers`)."""

    async def breaker_state(self, name: str) -> bytes | None:
        """The state another process published for breaker ``name``, or None."""
        ...

    async def breaker_opened(self, name: str, state: str, seconds: float) -> None:
        """Publish an open breaker for ``seconds``."""
        ...

    async def breaker_closed(self, name: str) -> None:
        """Withdraw a published open breaker."""
        ...


@runtime_checkable
class Listening(Protocol):
    """A store that listens for other processes' purges and writes (tiers)."""

    async def heard_generation(self) -> object:
        """A recent reading of the purge count, or None (the caller reads it)."""
        ...

    def ask_shared(self, key: str) -> None:
        """Let the next read of ``key`` ask the shared store."""
        ...

    def listen_soon(self) -> None:
        """Read the purge count on the next read."""
        ...


@runtime_checkable
class Clocked(Protocol):
    """A store that stamps entries on a clock of its own (shared stores: the wall clock)."""

    clock: Callable[[], float]


@runtime_checkable
class FailureCounting(Protocol):
    """A store that answers its faults as "no entry" and counts them (file, Redis)."""

    failures: int  # how many operations failed

    def answered(self, failures_before: int) -> bool:
        """Whether every operation since ``failures`` was ``failures_before`` was asked (the
        store was not staying away) and answered."""
        ...


@runtime_checkable
class Bounded(Protocol):
    """A store in this process's memory, bounded by entries and bytes."""

    @property
    def max_entries(self) -> int: ...

    @property
    def entries(self) -> int: ...

    @property
    def bytes(self) -> int: ...
