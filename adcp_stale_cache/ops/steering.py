"""The one seam between the control plane and the cache it steers.

:class:`~adcp_stale_cache.ops.control.CacheControl` (purge, refresh, warm, the operator's
snapshot) depends on :class:`Steerable`, the few things a cache offers it, and on nothing
else of :class:`~adcp_stale_cache.UpstreamCache`:

- ``store``, ``surfaces``, ``clock`` and ``metrics``: what it purges, selects by and reports to
  (read-only: the cache's settings);
- :meth:`Steerable.report_to`: attach a metrics sink (the control plane's counts);
- :meth:`Steerable.store_key` and :meth:`Steerable.policy_for`: how a fetch keys an entry and
  which policy it applies (a purge by key, a refresh by surface select as a fetch would);
- :meth:`Steerable.remember_refreshes`: attach a :class:`RefreshMemory`, which then hears of
  every flight's refresh (the call that filled a key, re-runnable as the request that made it);
- :meth:`Steerable.refresh_soon`: run remembered refreshes in the background, each as the
  flight of its key;
- :meth:`Steerable.breaker_open` and :meth:`Steerable.fetch` (warming fetches as a request would).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from ..core.policy import SurfacePolicy, Surfaces, Upstream
from ..stores import Store
from .metrics import CacheMetrics

#: A flight's refresh, re-runnable: given the purge count it runs under (see purges; None:
#: read when it calls), it calls the upstream and stores the answer as the request that
#: made it would.
RememberedRefresh = Callable[[object], Awaitable[Any]]


class RefreshMemory(Protocol):
    """What hears of every flight's refresh (as
    :class:`~adcp_stale_cache.ops.control.RecentRefreshes` does)."""

    def remember(
        self, store_key: str, labels: tuple[str, ...], refresh: RememberedRefresh, weight: int
    ) -> None:
        """Remember ``refresh`` as the one of ``store_key`` (``weight``: the bytes it holds,
        roughly: key, labels and any value it revalidates)."""


class Steerable(Protocol):
    """What the control plane needs of a cache (an :class:`~adcp_stale_cache.UpstreamCache`)."""

    @property
    def store(self) -> Store: ...
    @property
    def surfaces(self) -> Surfaces: ...
    @property
    def metrics(self) -> CacheMetrics: ...
    @property
    def clock(self) -> Callable[[], float]: ...  # entries are stamped on it

    def report_to(self, sink: CacheMetrics) -> None:
        """Report every decision to ``sink`` too, from now on."""

    def store_key(self, upstream: Upstream, key: object, partition: str | None = None) -> str:
        """The store key a fetch of ``key`` from ``upstream`` uses (per caller partition)."""

    def policy_for(self, surface: str | SurfacePolicy | None = None) -> SurfacePolicy:
        """The policy a fetch given ``surface`` applies in the current request."""

    def breaker_open(self, upstream: Upstream | str) -> bool:
        """True while the breaker of ``upstream`` holds calls back."""

    def remember_refreshes(self, memory: RefreshMemory | None) -> None:
        """Tell ``memory`` of every flight's refresh from now on (None: of none)."""

    def refresh_soon(
        self, refreshes: list[tuple[str, RememberedRefresh]], concurrency: int = 8
    ) -> None:
        """Run ``refreshes`` (store key, refresh) in the background, ``concurrency`` at a time."""

    async def fetch(
        self,
        upstream: Upstream,
        key: object,
        call: Callable[[], Awaitable[Any]],
        *,
        surface: str | SurfacePolicy | None = None,
        tags: Iterable[str] = (),
    ) -> Any:
        """A fetch, as a request makes it."""
