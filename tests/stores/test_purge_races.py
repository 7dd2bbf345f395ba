"""Purges racing a flight across processes, when the shared store faults at the wrong moment
(the hunt for the simulation's unreproduced "data served after a hard purge")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
)
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.ops.control import CacheControl
from adcp_stale_cache.stores import TieredStore

from ..conftest import FakeClock

ACCOUNTS = SurfacePolicy(name="accounts", field="accounts", freshness_target_seconds=10,
                         max_stale_seconds=100)  # fmt: skip
ACCOUNT_SERVICE = Upstream(name="account-service")


class SharedFromOneProcess:
    """One process's way to a shared store that can fault as the file and Redis stores do:
    a lost write reads as kept (nothing was refused), the fault counted in ``failures``."""

    def __init__(self, shared: MemoryStore) -> None:
        self.shared, self.down, self.failures = shared, False, 0

    def answered(self, failures_before: int) -> bool:
        return not self.down and self.failures == failures_before

    async def get(self, key: str) -> Entry | None:
        return await self.shared.get(key)

    async def set(self, key: str, entry: Entry, ttl_seconds: float) -> None:
        await self.shared.set(key, entry, ttl_seconds)

    async def set_unless_purged(self, key: str, entry: Entry, ttl: float, count: object) -> bool:
        if self.down:
            self.failures += 1
            return True
        return await self.shared.set_unless_purged(key, entry, ttl, count)

    async def delete(self, key: str) -> None:
        await self.shared.delete(key)

    async def purge(self, match: Any, *, soft: bool) -> int:
        return await self.shared.purge(match, soft=soft)

    async def generation(self) -> int:
        return await self.shared.generation()


def process(shared: MemoryStore, clock: FakeClock) -> tuple[UpstreamCache, SharedFromOneProcess]:
    view = SharedFromOneProcess(shared)
    tiers = TieredStore(view, MemoryStore(clock=clock), check_seconds=0.0)
    tiers.clock = clock  # type: ignore[method-assign]
    return UpstreamCache(tiers, surfaces=Surfaces.of(ACCOUNTS), clock=clock), view


async def test_a_flight_whose_shared_write_faults_keeps_no_copy_from_before_a_purge() -> None:
    """Process 0's call reads, process 1 hard-purges (process 0 hears it), then process 0's
    shared store faults just as the call stores: the guarded write is lost, and before, the
    memory copy was kept all the same, stamped after the purge. Process 0 then served the
    purged data, as fresh 6 s later and in an outage (the simulation's "data served after
    a hard purge"): a lost write says nothing of a purge since the call read."""
    clock = FakeClock()
    shared = MemoryStore(clock=clock)
    (cache0, view0), (cache1, _) = process(shared, clock), process(shared, clock)
    read, gate, down = asyncio.Event(), asyncio.Event(), False

    async def call() -> dict[str, str]:
        if down:
            raise ConnectionRefusedError
        data = {"data": "before the purge"}
        read.set()
        await asyncio.wait_for(gate.wait(), 5)
        return data

    in_flight = asyncio.create_task(cache0.fetch(ACCOUNT_SERVICE, "me", call, surface="accounts"))
    await asyncio.wait_for(read.wait(), 5)
    await CacheControl(cache1).invalidate(upstream="account-service", soft=False)
    assert await cache0.store.get("another key") is None  # process 0 hears the purge
    view0.down = True
    clock.advance(0.5)
    gate.set()
    assert await asyncio.wait_for(in_flight, 5) == {"data": "before the purge"}  # its caller's
    view0.down = False
    clock.advance(6)
    down = True
    with pytest.raises(UpstreamUnavailable):  # before: the purged data, as fresh
        await cache0.fetch(ACCOUNT_SERVICE, "me", call, surface="accounts")
