"""MCP end to end on ``mcp`` 1.x (FastMCP), what sellers pinned to fastmcp 2/3 still run.

There a stateful session runs every tool call in the context of the request that opened the
session, so a collector found only through a ContextVar would drop or misattach advisories.
This file runs in CI's second environment (``mcp<2``); under ``mcp`` 2.x it is skipped and
``tests/e2e/test_e2e_mcp.py`` covers the same ground.
"""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import version
from typing import Any

import pytest

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..servers import serve

if not version("mcp").startswith("1."):
    pytest.skip("mcp 1.x only: CI runs it in its mcp<2 environment", allow_module_level=True)

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.server.fastmcp import FastMCP

pytestmark = pytest.mark.e2e

SURFACES = Surfaces.of(
    SurfacePolicy(name="get_products", field="products", freshness_target_seconds=0),
    SurfacePolicy(name="list_creative_formats", field="formats", freshness_target_seconds=0),
)


def build(json_response: bool, stateless: bool) -> tuple[Any, dict[str, bool]]:
    cache = UpstreamCache(surfaces=SURFACES)
    state = {"inventory_up": True}
    server = FastMCP("seller", json_response=json_response, stateless_http=stateless)

    async def products() -> dict[str, Any]:
        await asyncio.sleep(0.01)
        if not state["inventory_up"]:
            raise ConnectionRefusedError
        return {"products": [{"product_id": "p1"}]}

    async def formats() -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"formats": [{"name": "f"}]}

    @server.tool(name="get_products")
    async def get_products() -> dict[str, Any]:
        return await cache.fetch(Upstream(name="inventory-service"), "all", products)

    @server.tool(name="list_creative_formats")
    async def list_creative_formats() -> dict[str, Any]:
        return await cache.fetch(Upstream(name="creative-agent"), "all", formats)

    return StaleAdvisoryMiddleware(server.streamable_http_app(), surfaces=SURFACES), state


def payload(result: Any) -> dict[str, Any]:
    structured = getattr(result, "structuredContent", None)
    text = json.loads(result.content[0].text)
    if structured is not None:
        assert structured.get("result", structured) == text or structured == text
    return text


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
async def test_concurrent_calls_on_one_session(json_response: bool, stateless: bool) -> None:
    app, state = build(json_response, stateless)
    with serve(app) as url:
        async with (
            streamablehttp_client(f"{url}/mcp") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("get_products", {})
            state["inventory_up"] = False
            tools = ["get_products" if i % 2 else "list_creative_formats" for i in range(50)]
            results = await asyncio.gather(*(session.call_tool(t, {}) for t in tools))
    for tool, result in zip(tools, results, strict=True):
        assert result.isError is False
        body = payload(result)
        if tool == "get_products":
            assert body["products"] == [{"product_id": "p1"}]
            assert [e["details"]["upstream"]["name"] for e in body["errors"]] == [
                "inventory-service"
            ]
            assert body["errors"][0]["field"] == "products"
        else:
            assert "errors" not in body
