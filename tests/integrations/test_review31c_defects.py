"""REVIEW 31c: reproductions of defects found attacking the lost-advisory accounting.

Each test asserts the behaviour a seller should get; each FAILS on the library as reviewed
(h-rev31c at 56c3d5a) and is marked ``xfail(strict=True)`` so that the suite stays green
until a fix lands: a fixed defect's test then XPASSes and fails the run, and its marker goes
with the fix (run one red as it is: ``pytest tests/integrations/test_review31c_defects.py --runxfail``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..conftest import CountingMetrics
from ..pipeline.test_advisory_lost import PRODUCTS

INVENTORY = Upstream(name="inventory")


class Inventory:
    """A cached inventory that a test takes ``down()``, and a seller's fire-and-forget
    fetches that run once the answer went out (``settle()``)."""

    def __init__(self, surface: SurfacePolicy = PRODUCTS, value: Any = None) -> None:
        self.surface = surface.name
        self.value = {"products": ["p1"]} if value is None else value
        self.metrics = CountingMetrics()
        self.cache = UpstreamCache(surfaces=Surfaces.of(surface), metrics=self.metrics)
        self.up = True
        self.answered = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def fetch(self) -> Any:
        return await self.cache.fetch(INVENTORY, "all", self.load, surface=self.surface)

    async def load(self) -> Any:
        if not self.up:
            raise ConnectionRefusedError
        return self.value

    def down(self) -> None:
        """Take the inventory down and count afresh."""
        self.up = False
        self.metrics.stale = self.metrics.delivered = self.metrics.lost = 0

    def fetch_later(self) -> None:
        """The seller's background work: a fetch once the answer went out."""

        async def late() -> None:
            await asyncio.wait_for(self.answered.wait(), 10)
            await self.fetch()

        self.tasks.append(asyncio.create_task(late()))

    async def settle(self) -> None:
        self.answered.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 10)

    def counts(self) -> tuple[int, int, int]:
        """Stale serves, advisories delivered, advisories lost."""
        return (self.metrics.stale, self.metrics.delivered, self.metrics.lost)


@pytest.mark.timeout(30)
async def test_review31c_a_stale_serve_in_a_task_outliving_its_request_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A seller's fire-and-forget task (``asyncio.create_task`` copies the request's context,
    collector included) fetches after the answer went out: the stale serve must still show
    in the metrics, as lost (no answer carried it). As reviewed it vanishes: ``told`` defers
    counting to delivery, and the middleware settled the collector before the task ran."""
    inventory = Inventory()

    async def route(request: Request) -> JSONResponse:
        await request.body()
        if inventory.up:
            await inventory.fetch()
        else:
            inventory.fetch_later()
        return JSONResponse({"products": ["p1"]})

    app = StaleAdvisoryMiddleware(
        Starlette(routes=[Route("/api/get_products", route, methods=["POST"])]),
        surfaces=inventory.cache.surfaces,
    )
    transport = httpx.ASGITransport(app=app)
    caplog.set_level(logging.WARNING, logger="adcp_stale_cache")
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        await http.post("/api/get_products", json={})
        inventory.down()
        await http.post("/api/get_products", json={})
    await inventory.settle()
    assert inventory.counts() == (1, 0, 1)  # as reviewed: no stale serve, it is invisible
    assert "advisory_lost upstream=inventory surface=get_products" in caplog.text
    assert "reason=after_answer:" in caplog.text


def sdk_call(
    way_in: str, cache: UpstreamCache, tool: Callable[..., Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    """One call of ``tool`` as ``get_products`` through an adcp SDK delivery point."""
    from adcp_stale_cache.integrations.adcp_sdk import skill_middleware, with_advisories

    context = type("ToolContext", (), {"tenant_id": "t", "caller_identity": "buyer"})()
    if way_in == "skill_middleware":
        middleware = skill_middleware(cache.surfaces)
        return lambda: middleware("get_products", {}, context, tool)
    decorated = with_advisories(cache.surfaces, "get_products")(tool)
    return lambda: decorated(None, {}, context)


class _SellerError(Exception):
    """What a seller's tool raises after its fetches (a validation error, say)."""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("way_in", ["skill_middleware", "with_advisories"])
async def test_review31c_a_stale_serve_of_a_tool_that_raises_counts_as_lost(way_in: str) -> None:
    """A tool served stale, then raised: the SDK answers an error, which carries no
    ``STALE_RESPONSE``; the serve must count as lost (as the ASGI and fastmcp middlewares
    count it). As reviewed both SDK delivery points leave it unsettled: zero in the metrics."""
    inventory = Inventory()

    async def tool(*args: Any, **kwargs: Any) -> Any:
        value = await inventory.fetch()
        if not inventory.up:
            raise _SellerError("buyer_ref is required")
        return value

    call = sdk_call(way_in, inventory.cache, tool)
    await call()
    inventory.down()
    with pytest.raises(_SellerError):
        await call()
    assert inventory.counts() == (1, 0, 1)  # as reviewed: 0s


class _Tool:
    def __init__(self, name: str) -> None:
        self.name = name


class _Server:
    """What fastmcp 3.x/4 puts on ``http_app().state.fastmcp_server``: its tool listing."""

    def __init__(self, *names: str) -> None:
        self.names = names

    async def list_tools(self, *, run_middleware: bool = True) -> list[_Tool]:
        return [_Tool(name) for name in self.names]


async def started(app: Any) -> None:
    """Run ``app``'s lifespan start-up, as uvicorn does, and shut it down."""
    messages = asyncio.Queue[dict[str, Any]]()
    for kind in ("lifespan.startup", "lifespan.shutdown"):
        messages.put_nowait({"type": kind})
    sent: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await asyncio.wait_for(
        app({"type": "lifespan", "asgi": {"version": "3.0"}}, messages.get, send), 10
    )
    assert sent[0] == "lifespan.startup.complete"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("served", "fetched_in_code"),
    [
        ("list_creative_formats", "list_creatives"),
        ("get_media_buy_delivery", "get_media_buys"),
        ("create_media_buy", "update_media_buy"),
    ],
)
async def test_review31c_another_adcp_task_is_not_a_misspelt_tool(
    served: str, fetched_in_code: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A fastmcp app serving one AdCP task, with a surface for another task its code fetches
    under (``surface=``): a correctly configured app. AdCP's task names share long stems,
    so "a served name is close" called the second a misspelling of the first (WARNING
    ``surface_unserved ... did you mean``); it is the INFO of a surface named in code."""
    app = Starlette()
    app.state.fastmcp_server = _Server(served)
    surfaces = Surfaces.of(SurfacePolicy(name=served), SurfacePolicy(name=fetched_in_code))
    caplog.set_level(logging.INFO, logger="adcp_stale_cache")
    await started(StaleAdvisoryMiddleware(app, surfaces=surfaces))
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == []
    assert f"surface_tools_unknown surface={fetched_in_code}:" in caplog.text


@pytest.mark.timeout(60)
def test_review31c_a_tool_s_task_outliving_its_call_counts_its_stale_serve() -> None:
    """fastmcp's ``AdvisoryMiddleware`` (no ASGI middleware around it): a tool's
    fire-and-forget task fetches after the tool answered. Its stale serve must count (as
    lost); as the ASGI middleware's did, it waited in ``unsettled`` forever, uncounted."""
    pytest.importorskip("fastmcp", reason="needs fastmcp: CI runs it in its fastmcp venvs")
    from fastmcp import Client, FastMCP

    from adcp_stale_cache.integrations.fastmcp import AdvisoryMiddleware

    signals = SurfacePolicy(name="get_signals", field="signals", freshness_target_seconds=0)

    async def late() -> tuple[int, int, int]:
        inventory = Inventory(signals, ["s1"])  # its Event on this loop
        server = FastMCP("signals-agent")
        server.add_middleware(AdvisoryMiddleware(cache=inventory.cache))

        # No annotations: fastmcp 2.10 cannot read string ones (this module's future import).
        async def get_signals():  # type: ignore[no-untyped-def]
            if inventory.up:
                return {"signals": await inventory.fetch()}
            inventory.fetch_later()
            return {"signals": []}

        server.tool(get_signals)
        async with Client(server) as client:
            await client.call_tool("get_signals", {})
            inventory.down()
            await client.call_tool("get_signals", {})
        await inventory.settle()
        return inventory.counts()

    assert asyncio.run(asyncio.wait_for(late(), 30)) == (1, 0, 1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("way_in", ["skill_middleware", "with_advisories"])
async def test_review31c_an_sdk_tool_s_task_outliving_its_call_counts_its_stale_serve(
    way_in: str,
) -> None:
    """The adcp SDK's delivery points, a tool's fire-and-forget task fetching after the
    tool answered: counted lost, not left in ``unsettled`` uncounted."""
    inventory = Inventory()

    async def tool(*args: Any, **kwargs: Any) -> Any:
        if inventory.up:
            return await inventory.fetch()
        inventory.fetch_later()
        return {"products": []}

    call = sdk_call(way_in, inventory.cache, tool)
    await call()
    inventory.down()
    await call()
    await inventory.settle()
    assert inventory.counts() == (1, 0, 1)
