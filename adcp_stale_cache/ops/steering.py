"""The one seam between the control plane and the cache it steers: :class:`Steerable`, the
few things :class:`~adcp_stale_cache.ops.control.CacheControl` needs of an
:class:`~adcp_stale_cache.UpstreamCache`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from ..core.policy import SurfacePolicy, Surfaces, Upstream
from ..pipeline.flight import RefreshMemory, RememberedRefresh
from ..pipeline.metrics import CacheMetrics
from ..stores import Store


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
