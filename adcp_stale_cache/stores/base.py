"""The store protocol and the optional capabilities a store declares beside it, checked once
with ``isinstance`` when a stage is built (the check reads every member: too slow per call)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..core.entry import Entry

if TYPE_CHECKING:
    _ProtocolMeta = type
else:
    _ProtocolMeta = type(Protocol)


class _Forwarding(_ProtocolMeta):
    """Protocol checks that see what a proxy forwards through ``__getattr__`` (a seller's
    wrapped store) on every Python: from 3.12, ``isinstance`` reads members statically."""

    def __instancecheck__(cls, instance: object) -> bool:
        if super().__instancecheck__(instance):
            return True
        members = vars(cls).get("__protocol_attrs__", ())  # 3.12+ (before, hasattr was used)
        return bool(members) and all(getattr(instance, name, None) is not None for name in members)


@runtime_checkable
class Store(Protocol, metaclass=_Forwarding):
    """An async key-value store of :class:`~adcp_stale_cache.core.entry.Entry`.

    ``get`` never returns an entry set more than ``ttl_seconds`` ago; a store that fails raises
    (the cache decides what a failure means)."""

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
class Selecting(Protocol, metaclass=_Forwarding):
    """A purge's ``match`` that names what it selects: entries carrying ``labels``; with
    ``store_key``, only that entry and those labelled ``from_key`` (built from it)."""

    @property
    def labels(self) -> frozenset[str]: ...

    @property
    def store_key(self) -> str | None: ...

    @property
    def from_key(self) -> str | None: ...

    def __call__(self, key: str, entry: Entry) -> bool: ...


@runtime_checkable
class Purgeable(Protocol, metaclass=_Forwarding):
    """A store that invalidates entries by selection (the control API's purges)."""

    async def purge(self, match: Callable[[str, Entry], bool], *, soft: bool) -> int:
        """Mark what ``match`` selects for revalidation (``soft``) or forget it; how many."""
        ...


@runtime_checkable
class PurgeCounting(Protocol, metaclass=_Forwarding):
    """A store that counts its purges: a flight that saw the count move stores nothing."""

    async def generation(self) -> object:
        """The purge count (None: it cannot be read now)."""
        ...


@runtime_checkable
class GuardedWrites(Protocol, metaclass=_Forwarding):
    """A purge-counting store that checks the count and writes in one step."""

    async def set_unless_purged(
        self, key: str, entry: Entry, ttl_seconds: float, count: object
    ) -> bool:
        """Keep ``entry`` unless the purge count is no longer ``count`` (False: refused)."""
        ...


@runtime_checkable
class Leasing(Protocol, metaclass=_Forwarding):
    """A store shared by processes that refresh each key once between them."""

    def lease(self, key: str, seconds: float) -> AbstractAsyncContextManager[bool]:
        """Hold the refresh lease of ``key`` for at most ``seconds``: True when held here."""
        ...

    async def lease_active(self, key: str) -> bool:
        """Whether some process holds the refresh lease of ``key``."""
        ...


@runtime_checkable
class SharedBreakerStore(Protocol, metaclass=_Forwarding):
    """A store through which processes share their open breakers."""

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
class Listening(Protocol, metaclass=_Forwarding):
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
class Clocked(Protocol, metaclass=_Forwarding):
    """A store that stamps entries on a clock of its own (shared stores: the wall clock)."""

    clock: Callable[[], float]


@runtime_checkable
class FailureCounting(Protocol, metaclass=_Forwarding):
    """A store that answers its faults as "no entry" and counts them (file, Redis)."""

    failures: int

    def answered(self, failures_before: int) -> bool:
        """Whether every operation since ``failures`` was ``failures_before`` was asked and
        answered (the store was not staying away)."""
        ...


@runtime_checkable
class Bounded(Protocol, metaclass=_Forwarding):
    """A store in this process's memory, bounded by entries and bytes."""

    @property
    def max_entries(self) -> int: ...

    @property
    def entries(self) -> int: ...

    @property
    def bytes(self) -> int: ...


@runtime_checkable
class Tiered(Protocol, metaclass=_Forwarding):
    """A store in front of another (``TieredStore``, or a wrapper of one): the control API
    and the metrics walk its tiers for their faults and sizes."""

    near: Store
    far: Store
