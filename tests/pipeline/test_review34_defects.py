"""REVIEW 34: defects found attacking issue 34's reshaped core (settings fixed at
construction, store capabilities as protocols, test mode outside the core) as a hostile user.

Each test asserts what a seller should get and failed on main at d1c429e; a test still
marked ``xfail(strict=True)`` reproduces an open defect (run it red with ``--runxfail``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache, collect_advisories
from adcp_stale_cache.ops.control import CacheControl
from adcp_stale_cache.stores import MemoryStore, TieredStore
from adcp_stale_cache.testing import ForcedOutages

from ..conftest import CountingUpstream

PRODUCTS = SurfacePolicy(name="get_products", field="products")
INVENTORY = Upstream(name="inventory")


class ForwardingStore:
    """A seller's wrapper around a shipped store (for logging, tracing, a lazy connection):
    every member forwarded through ``__getattr__``, as proxies usually are."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.timeout(30)
async def test_review34_a_purge_wins_over_a_flight_through_a_forwarding_store() -> None:
    """REVIEW 34 defect, fixed (Python 3.12+): capabilities are found with ``isinstance`` on
    runtime-checkable protocols, which since 3.12 reads members statically and so never sees
    what a proxy forwards through ``__getattr__`` (the ``getattr`` probing before issue 34
    did, on every Python). A wrapped store then silently loses its purge count: a refresh
    that read the upstream before a purge stores its answer after it, a fresh hit on data
    the operator just invalidated; and the control API refuses to purge it at all."""
    store = ForwardingStore(MemoryStore())
    cache = UpstreamCache(store, surfaces=Surfaces.of(PRODUCTS), breaker=None)  # type: ignore[arg-type]
    up = CountingUpstream()
    stale_at_once = PRODUCTS.model_copy(update={"freshness_target_seconds": 0})
    await cache.fetch(INVENTORY, "k", up, surface=stale_at_once)  # call 1, stored
    up.delay = 0.2
    flight = asyncio.ensure_future(cache.fetch(INVENTORY, "k", up, surface=stale_at_once))
    await asyncio.sleep(0.05)  # call 2 read the upstream before the purge
    assert await CacheControl(cache).invalidate(upstream="inventory") == 1
    assert (await flight)["products"] == [2]
    up.delay = 0.0
    answer = await cache.fetch(INVENTORY, "k", up, surface=PRODUCTS)  # a 600 s target
    assert answer["products"] == [3] and up.calls == 3  # never call 2 as a fresh hit


def test_review34_a_tier_over_a_forwarding_store_keeps_its_capabilities() -> None:
    """REVIEW 34 defect, fixed (Python 3.12+, same root): a tier over a wrapped shared store
    answers as if it had no purge count or leases."""
    tiered = TieredStore(ForwardingStore(MemoryStore()))  # type: ignore[arg-type]
    assert tiered._far_purges._counting is not None
    assert tiered._far_purgeable is not None


def test_review34_outages_assigned_after_construction_are_refused() -> None:
    """REVIEW 34 defect, fixed: before issue 34 every fetch read ``cache.outages``, so assigning an
    injector put a built cache in test mode. Now only the constructor wraps ``fetch``:
    assigned later, ``force_upstream_unavailable`` accepts outages that no fetch ever
    answers (a compliance run silently tests nothing). It must be refused like the other
    settings fixed at construction."""
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))
    with pytest.raises(AttributeError, match="test_mode=True"):
        cache.outages = ForcedOutages()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("old", "hint"),
    [("refreshers", "remember_refreshes"), ("breaker_policy", "breaker=")],
)
def test_review34_a_refused_old_name_says_where_it_went(old: str, hint: str) -> None:
    """REVIEW 34 defect, fixed: assigning an old name (removed with the ``Moved`` shims) says "pass
    it when building the cache", but ``refreshers`` was never a constructor argument (it is
    :meth:`remember_refreshes`) and ``breaker_policy`` is ``breaker=``: the error sends an
    upgrading user looking for an argument that does not exist."""
    cache = UpstreamCache()
    with pytest.raises(AttributeError, match=hint):
        setattr(cache, old, None)


class TenantCache(UpstreamCache):
    """A seller's cache that keys every fetch by its tenant, overriding ``fetch``."""

    async def fetch(self, upstream: Upstream, key: object, call: Any, **options: Any) -> Any:
        return await super().fetch(upstream, ("tenant-a", key), call, **options)


@pytest.mark.timeout(30)
async def test_review34_an_injected_outage_reaches_a_subclass_s_fetch() -> None:
    """REVIEW 34 defect, fixed: test mode replaced the instance's ``fetch`` from outside,
    so a subclass's ``fetch`` (here keying by tenant) never runs for an injected outage: the
    harness looks up the key as given, finds it cold, calls the upstream for real and seeds
    an entry no real fetch reads. Before issue 34 the outage was answered inside
    ``UpstreamCache.fetch``, under the subclass's key: the tenant's entry, served aged."""
    cache = TenantCache(surfaces=Surfaces.of(PRODUCTS), test_mode=True)
    up = CountingUpstream()
    await cache.fetch(INVENTORY, "k", up, surface="get_products")  # call 1, the tenant's
    cache.force_upstream_unavailable("get_products")
    with collect_advisories() as advisories:
        answer = await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert [a.code for a in advisories.advisories()] == ["STALE_RESPONSE"]
    assert answer["products"] == [1] and up.calls == 1  # the tenant's entry, no real call


@pytest.mark.timeout(30)
async def test_review34_an_old_style_refresh_callback_is_refused_where_it_is_given() -> None:
    """REVIEW 34 defect, fixed: ``cache.refreshers = fn`` (a function, the seam before issue
    34) is now refused with "call remember_refreshes(memory)"; given the same function,
    ``remember_refreshes`` takes it silently and every later fetch that flies raises
    ``AttributeError: 'function' object has no attribute 'remember'``: one wrong argument
    at start-up takes every upstream call down. It must be refused where it is given."""
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))
    with pytest.raises(TypeError, match="remember"):
        cache.remember_refreshes(lambda *told: None)  # type: ignore[arg-type]
    assert await cache.fetch(INVENTORY, "k", CountingUpstream(), surface="get_products")


class FlakySharedStore(MemoryStore):
    """A shared store that counts its faults (as the file and Redis stores do) and fails
    every purge, answering it as nothing purged."""

    failures = 0

    def answered(self, failures_before: int) -> bool:
        return self.failures == failures_before

    async def purge(self, match: Any, *, soft: bool) -> int:
        self.failures += 1
        return 0


@pytest.mark.timeout(30)
async def test_review34_a_purge_that_misses_a_wrapped_tier_s_shared_store_says_so() -> None:
    """REVIEW 34 defect, fixed: ``tiers()`` walked only ``TieredStore`` instances (it
    walked any store's ``near`` and ``far`` before), so behind a seller's wrapper the
    control API did not see the shared tier fail during a purge: it answered a count as if
    every process took the purge, instead of raising ``PurgeIncomplete``."""
    from adcp_stale_cache.ops.control import PurgeIncomplete

    store = ForwardingStore(TieredStore(FlakySharedStore()))
    cache = UpstreamCache(store, surfaces=Surfaces.of(PRODUCTS))  # type: ignore[arg-type]
    await cache.fetch(INVENTORY, "k", CountingUpstream(), surface="get_products")
    with pytest.raises(PurgeIncomplete):
        await CacheControl(cache).invalidate(upstream="inventory")
