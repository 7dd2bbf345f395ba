"""An answer shaped for one AdCP release is never served to a request pinned at another:
a surface declared ``varies_by_version`` keys its entries by the release each request pins
(``adcp_version``, else ``adcp_major_version``), read off the request by the middleware on a
declared JSON route and in MCP and A2A calls alike."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
    current_collector,
)
from adcp_stale_cache.stores import MemoryStore

SUB_AGENT = Upstream(name="sub-seller")


def seller(varies: bool) -> tuple[Any, list[str | None]]:
    policy = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",),
                           shared_across_callers=True, varies_by_version=varies)  # fmt: skip
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    asked: list[str | None] = []

    async def answer() -> dict[str, Any]:
        collector = current_collector()
        assert collector is not None
        pinned = collector.adcp_version

        async def shaped_for_the_pin() -> dict[str, Any]:  # the sub-agent answers per release
            asked.append(pinned)
            return {"products": [{"product_id": "p1", "shape": pinned}]}

        return await cache.fetch(SUB_AGENT, "products", shaped_for_the_pin)

    async def rest(request: Request) -> Response:
        await request.json()  # the seller reads its request (the middleware reads it along)
        return JSONResponse(await answer())

    async def rpc(request: Request) -> Response:
        message = await request.json()
        payload = await answer()
        result = {"content": [], "structuredContent": payload, "isError": False}
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = Starlette(routes=[Route("/api/get_products", rest, methods=["POST"]),
                            Route("/rpc", rpc, methods=["POST"])])  # fmt: skip
    return StaleAdvisoryMiddleware(app, surfaces=cache.surfaces), asked


async def ask(app: Any, transport: str, **pins: Any) -> Any:
    request = {"buying_mode": "brief", "brief": "b", **pins}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        if transport == "rest":
            return (await http.post("/api/get_products", json=request)).json()["products"][0]
        if transport == "mcp":
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "get_products", "arguments": request}}  # fmt: skip
        else:
            message = {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [
                {"data": {"skill": "get_products", "parameters": request}}]}  # fmt: skip
            body = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
                    "params": {"message": message}}  # fmt: skip
        answer = (await http.post("/rpc", json=body)).json()
        return answer["result"]["structuredContent"]["products"][0]


@pytest.mark.parametrize("transport", ["rest", "mcp", "a2a"])
async def test_entries_are_kept_apart_by_the_pinned_release(transport: str) -> None:
    app, asked = seller(varies=True)
    assert (await ask(app, transport, adcp_version="3.1"))["shape"] == "3.1"
    assert (await ask(app, transport, adcp_version="3.2"))["shape"] == "3.2"
    assert (await ask(app, transport, adcp_major_version=3))["shape"] == "3"
    assert (await ask(app, transport))["shape"] is None
    assert (await ask(app, transport, adcp_version="3.1"))["shape"] == "3.1"  # a hit
    assert asked == ["3.1", "3.2", "3", None]


async def test_a_surface_that_does_not_vary_shares_one_entry() -> None:
    app, asked = seller(varies=False)
    assert (await ask(app, "rest", adcp_version="3.1"))["shape"] == "3.1"
    assert (await ask(app, "rest", adcp_version="3.2"))["shape"] == "3.1"  # declared alike
    assert asked == ["3.1"]


async def test_outside_the_middleware_nothing_is_pinned() -> None:
    policy = SurfacePolicy(name="get_products", varies_by_version=True)
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    with collect_advisories() as collector:
        assert collector.adcp_version is None

        async def call() -> dict[str, Any]:
            return {"products": []}

        assert await cache.fetch(SUB_AGENT, "k", call, surface="get_products") == {"products": []}
