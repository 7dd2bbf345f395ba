"""Defects found by adversarial testing (issue 11): each test failed before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from adcp_stale_cache import (
    MemoryStore,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
)
from adcp_stale_cache.breaker import BreakerPolicy

from .conftest import FakeClock

INVENTORY = Upstream(name="inventory-service")
POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=1000
)
BREAKER = BreakerPolicy(failure_threshold=1, window_seconds=60, cooldown_seconds=30)


class Inventory:
    """An upstream that counts its calls and can be taken down."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError
        return {"products": [self.calls]}


async def settle(cache: UpstreamCache) -> None:
    await asyncio.wait_for(asyncio.gather(*cache._tasks, return_exceptions=True), timeout=10)


# 1. A probe taken by a request whose budget was already spent was never run nor released.
async def test_spent_budget_never_takes_the_breaker_probe(clock: FakeClock) -> None:
    policy = POLICY.model_copy(update={"request_budget_seconds": 0.05})
    cache = UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(policy), clock=clock, breaker=BREAKER
    )
    up = Inventory()
    await cache.fetch(INVENTORY, "k", up, surface=policy)
    clock.advance(20)
    up.down = True
    with collect_advisories():
        await cache.fetch(INVENTORY, "k", up, surface=policy)  # fails: the breaker opens
    assert cache.breaker_open(INVENTORY.name)
    clock.advance(30)  # cooldown over
    with collect_advisories():
        await asyncio.sleep(0.06)  # this request's budget is spent before it fetches
        await cache.fetch(INVENTORY, "k", up, surface=policy)
    up.down = False
    with collect_advisories():  # the next caller must still get to probe
        await cache.fetch(INVENTORY, "k", up, surface=policy)
    await settle(cache)
    assert not cache.breaker_open(INVENTORY.name) and up.calls == 3


async def test_a_probe_cancelled_before_its_verdict_frees_the_slot(clock: FakeClock) -> None:
    cache = UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock, breaker=BREAKER
    )
    up = Inventory()
    up.down = True
    with contextlib.suppress(Exception):
        await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    clock.advance(30)
    hung = asyncio.Event()

    async def hangs() -> dict[str, Any]:
        await hung.wait()
        return {}

    probe = asyncio.ensure_future(cache.fetch(INVENTORY, "k", hangs, surface=POLICY))
    await asyncio.sleep(0.01)
    for task in cache._flights._flights.values():
        task.cancel()  # the flight ends with no verdict (a loop shutting down, say)
    with contextlib.suppress(BaseException):
        await probe
    up.down = False
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    assert not cache.breaker_open(INVENTORY.name)


class LeasedStore(MemoryStore):
    """A store shared by two 'processes' (two caches), with Redis-like refresh leases."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.held: set[str] = set()

    @contextlib.asynccontextmanager
    async def lease(self, key: str, seconds: float) -> AsyncIterator[bool]:
        if key in self.held:
            yield False
            return
        self.held.add(key)
        try:
            yield True
        finally:
            self.held.discard(key)

    async def lease_active(self, key: str) -> bool:
        return key in self.held


# 2. A probe that lost the refresh lease to another process never reported to its breaker.
async def test_probe_answered_by_another_process_closes_the_breaker(clock: FakeClock) -> None:
    store = LeasedStore(clock)

    def process() -> UpstreamCache:
        return UpstreamCache(
            store, surfaces=Surfaces.of(POLICY), clock=clock, breaker=BREAKER,
            coordinate_refreshes=True,
        )  # fmt: skip

    a, b = process(), process()
    up = Inventory()
    await a.fetch(INVENTORY, "k", up, surface=POLICY)
    clock.advance(20)
    up.down = True
    with collect_advisories():
        await a.fetch(INVENTORY, "k", up, surface=POLICY)
    assert a.breaker_open(INVENTORY.name)
    clock.advance(30)
    up.down = False
    released = asyncio.Event()

    async def slow_recovery() -> dict[str, Any]:
        await released.wait()
        return await up()

    other = asyncio.ensure_future(b.fetch(INVENTORY, "k", slow_recovery, surface=POLICY))
    await asyncio.sleep(0.01)  # b holds the lease
    with collect_advisories():
        await a.fetch(INVENTORY, "k", up, surface=POLICY)  # a's probe waits for b's refresh
    clock.advance(0.5)
    released.set()
    await other
    await settle(a)
    assert not a.breaker_open(INVENTORY.name)
    clock.advance(20)
    calls = up.calls
    assert await a.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [calls + 1]}


async def test_breaker_cooldown_ignores_a_wall_clock_stepped_back() -> None:
    step = [0.0]
    store = MemoryStore()
    store.clock = lambda: time.time() + step[0]  # a shared store's wall clock
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY), breaker=BreakerPolicy(
        failure_threshold=1, window_seconds=60, cooldown_seconds=0.05))  # fmt: skip
    up = Inventory()
    up.down = True
    with contextlib.suppress(Exception):
        await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    assert cache.breaker_open(INVENTORY.name)
    step[0] = -3600.0  # NTP steps the clock back an hour
    await asyncio.sleep(0.06)
    up.down = False
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    assert not cache.breaker_open(INVENTORY.name)


# 3. Behind a root path, the surface was not found and the default policy (shared) applied.
@pytest.mark.parametrize("how", ["mount", "root_path"])
async def test_surface_found_behind_a_path_prefix_and_unknown_never_widens_sharing(
    how: str,
) -> None:
    private = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
    surfaces = Surfaces.of(
        private, default=SurfacePolicy(name="default", shared_across_callers=True)
    )
    cache = UpstreamCache(surfaces=surfaces)

    async def get_products(request: Request) -> JSONResponse:
        who = request.headers["authorization"]

        async def call() -> dict[str, Any]:
            return {"products": [who]}

        collector = request.scope["state"]["adcp_stale_cache"]
        seen.append(collector.surface.name if collector.surface else None)
        return JSONResponse(await cache.fetch(INVENTORY, "all", call))

    async def unknown(request: Request) -> JSONResponse:
        who = request.headers["authorization"]

        async def call() -> dict[str, Any]:
            return {"products": [who]}

        return JSONResponse(await cache.fetch(INVENTORY, "other", call))

    seen: list[str | None] = []
    inner = Starlette(
        routes=[Route("/api/get_products", get_products, methods=["POST"]),
                Route("/api/unknown", unknown, methods=["POST"])]
    )  # fmt: skip
    if how == "mount":
        app: Any = Starlette(
            routes=[Mount("/seller", StaleAdvisoryMiddleware(inner, surfaces=surfaces))]
        )
        root = ""
    else:
        app, root = StaleAdvisoryMiddleware(inner, surfaces=surfaces), "/seller"
    transport = httpx.ASGITransport(app=app, root_path=root)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        for who in ("alice", "bob"):
            answer = await client.post("/seller/api/get_products", headers={"authorization": who})
            assert answer.json() == {"products": [who]}
            answer = await client.post("/seller/api/unknown", headers={"authorization": who})
            assert answer.json() == {"products": [who]}  # default is shared, but not identified
    assert seen == ["get_products", "get_products"]


# 4. Distinct keys collided: repr() masks secrets, and non-string dict keys were stringified.
class Principal(BaseModel):
    token: SecretStr


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Principal(token=SecretStr("alice")), Principal(token=SecretStr("bob"))),
        (httpx.Headers({"authorization": "alice"}), httpx.Headers({"authorization": "bob"})),
        ({1: "x"}, {"1": "x"}),
    ],
    ids=["secretstr", "httpx-headers", "int-vs-str-dict-key"],
)
async def test_distinct_keys_never_share_an_entry(first: Any, second: Any) -> None:
    cache = UpstreamCache()
    calls: list[Any] = []

    @cache.cached(INVENTORY)
    async def products(principal: Any) -> dict[str, Any]:
        calls.append(principal)
        return {"products": [len(calls)]}

    try:
        assert await products(first) == {"products": [1]}
    except TypeError as exc:  # refused, clearly: never guessed
        assert "exact cache key" in str(exc)
        return
    assert await products(second) == {"products": [2]}  # its own answer, not the first's
    assert await products(first) == {"products": [1]}  # and a real hit for the first


def test_unkeyable_values_are_refused_with_a_clear_error() -> None:
    from adcp_stale_cache.keys import digest

    for value in (object(), {1: "x"}, float("nan"), {"a": {2}}):
        with pytest.raises(TypeError, match="exact cache key"):
            digest([value])
    one, one_float, true, none = (digest([v]) for v in (1, 1.0, True, None))
    assert len({one, one_float, true, none, digest([[1]]), digest(["1"]), digest([b"1"])}) == 7
