"""Store capabilities are protocols (issue 34): each shipped store has those the API page's
table says, and a store of a user's own with get/set/delete only still works."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache import CacheControl, MemoryStore, SurfacePolicy, Surfaces, Upstream
from adcp_stale_cache import UpstreamCache as Cache
from adcp_stale_cache import stores as capabilities
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.ops.control import Selection
from adcp_stale_cache.stores import Store, TieredStore
from adcp_stale_cache.stores.sqlite import SqliteStore

from ..conftest import CountingUpstream, FakeClock

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=100
)
INVENTORY = Upstream(name="inventory-service")


class DictStore:
    """A user's own store: the three methods of the protocol, nothing more."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    async def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        self.entries[key] = entry

    async def delete(self, key: str) -> None:
        self.entries.pop(key, None)


def documented() -> dict[str, set[str]]:
    """The capability table of the API page: capability -> the stores said to have it."""
    rows = re.findall(r"^\| `(\w+)` \| .* \| (`\w+`(?:, `\w+`)*) \|$", API_PAGE.read_text(), re.M)
    return {name: set(re.findall(r"`(\w+)`", stores)) for name, stores in rows}


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[dict[str, object]]:
    """One of each shipped store, built outside an event loop as a seller's start-up does
    (a protocol check reads properties: Redis's ``available`` needs a running loop)."""
    from adcp_stale_cache.stores.redis import RedisStore

    sqlite = SqliteStore(tmp_path / "cache.db")
    redis = RedisStore(url="redis://127.0.0.1:1/0")  # never connected: construction only
    yield {
        "MemoryStore": MemoryStore(),
        "SqliteStore": sqlite,
        "RedisStore": redis,
        "TieredStore": TieredStore(redis),
    }
    sqlite.close()


def test_the_table_names_every_capability_the_package_exports() -> None:
    assert len(documented()) == 9
    not_capabilities = {"Store", "MemoryStore", "TieredStore", "Selecting"}
    assert set(documented()) == set(capabilities.__all__) - not_capabilities


@pytest.mark.parametrize("capability", sorted(documented()))
def test_each_shipped_store_has_the_capability_as_documented(
    capability: str, shipped: dict[str, object]
) -> None:
    protocol = getattr(capabilities, capability)
    have = {name for name, store in shipped.items() if isinstance(store, protocol)}
    assert have == documented()[capability]


def test_a_users_store_has_only_the_store_protocol_and_a_selection_is_selecting() -> None:
    declared = [getattr(capabilities, name) for name in documented()]
    assert isinstance(DictStore(), Store)
    assert not any(isinstance(DictStore(), protocol) for protocol in declared)
    assert isinstance(Selection(frozenset({"tag=t"})), capabilities.Selecting)
    assert not isinstance(lambda key, entry: True, capabilities.Selecting)


async def test_a_users_store_with_get_set_delete_only_works_through_the_cache(
    clock: FakeClock,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from adcp_stale_cache.ops.metrics import PrometheusMetrics

    store, registry = DictStore(), CollectorRegistry()
    cache = Cache(store, surfaces=Surfaces.of(POLICY), clock=clock, coordinate_refreshes=True,
                  share_breakers=True, metrics=PrometheusMetrics(registry, store=store))  # fmt: skip
    up = CountingUpstream()
    for _ in range(2):
        assert await cache.fetch(INVENTORY, "k", up, surface="get_products") == {"products": [1]}
    assert up.calls == 1 and len(store.entries) == 1
    clock.advance(20)
    up.down = True  # stale, served from the user's store
    assert await cache.fetch(INVENTORY, "k", up, surface="get_products") == {"products": [1]}
    with pytest.raises(TypeError, match="DictStore cannot purge entries"):
        await CacheControl(cache).invalidate(upstream=INVENTORY)
    page = generate_latest(registry).decode()
    assert "adcp_stale_cache_refreshes_total" in page
    assert "adcp_stale_cache_store_entries" not in page  # no memory store to report on
    assert "adcp_stale_cache_store_failures" not in page


async def test_a_tier_over_a_users_store_answers_for_what_it_lacks() -> None:
    far = DictStore()
    tiers = TieredStore(far)
    async with tiers.lease("k", 1.0) as held:
        assert held  # no coordination: always held here
    assert not await tiers.lease_active("k")
    await tiers.breaker_opened("agent", "{}", 30)  # shares nothing, raises nothing
    assert await tiers.breaker_state("agent") is None
    entry = Entry(b"{}", 0.0, ("upstream=u",))
    await tiers.set("k", entry, 60)
    assert await tiers.generation() == (0, None)  # only the memory tier counts its purges
    assert await tiers.purge(lambda key, held: True, soft=False) == 1  # the memory tier's
    assert far.entries == {"k": entry}  # the user's store cannot purge: left as it was
    assert await tiers.set_unless_purged("k", entry, 60, (1, None))


def test_a_subclass_that_sets_a_capability_to_none_does_not_have_it() -> None:
    class NoPurges(MemoryStore):
        purge: Any = None

    assert not isinstance(NoPurges(), capabilities.Purgeable)
    assert isinstance(NoPurges(), capabilities.PurgeCounting)
