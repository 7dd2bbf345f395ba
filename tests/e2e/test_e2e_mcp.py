"""MCP end to end: an ``mcp`` 2.x MCPServer behind the middleware, a real ``mcp`` client.

One upstream per tool: ``inventory-service`` (get_products) is down, ``creative-agent``
(list_creative_formats) is healthy. Freshness target 0, so every call refreshes and only a
failed refresh serves stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..servers import serve

mcp = pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.server import MCPServer  # noqa: E402

pytestmark = pytest.mark.e2e

SURFACES = Surfaces.of(
    SurfacePolicy(
        name="get_products", field="products", freshness_target_seconds=0, max_stale_seconds=600
    ),
    SurfacePolicy(
        name="list_creative_formats",
        field="formats",
        freshness_target_seconds=0,
        max_stale_seconds=600,
    ),
)
INVENTORY = Upstream(name="inventory-service")
CREATIVE = Upstream(name="creative-agent", url="https://creative.example/mcp")


class World:
    """The seller's upstreams, which a test switches on and off."""

    def __init__(self) -> None:
        self.inventory_up = True
        self.cache = UpstreamCache(surfaces=SURFACES)

    async def products(self) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        if not self.inventory_up:
            raise ConnectionRefusedError(111, "refused")
        return {"products": [{"product_id": "p1"}]}

    async def formats(self) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return {"formats": [{"name": "f1"}]}


def build_app(world: World, *, json_response: bool, stateless: bool) -> Any:
    server = MCPServer(name="seller")

    @server.tool(name="get_products")
    async def get_products(brief: str = "") -> dict[str, Any]:
        # No surface= here: the middleware resolved it from the tools/call name.
        payload = await world.cache.fetch(INVENTORY, "all", world.products)
        return {"products": payload["products"]}

    @server.tool(name="list_creative_formats")
    async def list_creative_formats() -> dict[str, Any]:
        payload = await world.cache.fetch(CREATIVE, "all", world.formats)
        return {"formats": payload["formats"]}

    mcp_app = server.streamable_http_app(json_response=json_response, stateless_http=stateless)
    app = Starlette(
        routes=[Mount("/", mcp_app)], lifespan=lambda app: mcp_app.router.lifespan_context(app)
    )
    return StaleAdvisoryMiddleware(app, surfaces=SURFACES)


MODES = [
    pytest.param(
        json_response,
        stateless,
        id=f"{'json' if json_response else 'sse'}-{'stateless' if stateless else 'stateful'}",
    )
    for json_response in (True, False)
    for stateless in (True, False)
]


@contextlib.contextmanager
def seller(json_response: bool, stateless: bool) -> Iterator[tuple[World, str]]:
    world = World()
    with serve(build_app(world, json_response=json_response, stateless=stateless)) as url:
        yield world, f"{url}/mcp"


def payloads(result: Any) -> list[dict[str, Any]]:
    """Every copy of the payload in a tool result: structuredContent and JSON text blocks."""
    found = []
    if isinstance(result.structured_content, dict):
        found.append(result.structured_content)
    for block in result.content:
        text = getattr(block, "text", "")
        if text.lstrip().startswith("{"):
            found.append(json.loads(text))
    assert found, "the tool result holds no payload"
    return found


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[Client]:
    async with Client(url, cache=None) as c:
        yield c


@pytest.mark.parametrize(("json_response", "stateless"), MODES)
async def test_stale_answer_carries_advisory_with_transport_success(
    json_response: bool, stateless: bool, assert_valid_advisory: Any
) -> None:
    with seller(json_response, stateless) as (world, url):
        async with client(url) as c:
            healthy = await c.call_tool("get_products", {})
            world.inventory_up = False
            stale = await c.call_tool("get_products", {})
    assert not healthy.is_error
    assert all("errors" not in p for p in payloads(healthy))
    assert stale.is_error is False
    for payload in payloads(stale):
        assert payload["products"] == [{"product_id": "p1"}]
        [advisory] = payload["errors"]
        assert_valid_advisory(advisory)
        assert advisory["field"] == "products"  # the surface came from the tool name
        assert advisory["details"]["upstream"] == {"name": "inventory-service"}


@pytest.mark.parametrize(("json_response", "stateless"), MODES)
async def test_concurrent_calls_on_one_session_never_share_advisories(
    json_response: bool, stateless: bool
) -> None:
    with seller(json_response, stateless) as (world, url):
        async with client(url) as c:
            await c.call_tool("get_products", {})
            world.inventory_up = False
            tools = ["get_products" if i % 2 else "list_creative_formats" for i in range(50)]
            results = await asyncio.gather(*(c.call_tool(tool, {}) for tool in tools))
    for tool, result in zip(tools, results, strict=True):
        assert result.is_error is False
        for payload in payloads(result):
            if tool == "get_products":
                assert [e["details"]["upstream"]["name"] for e in payload["errors"]] == [
                    "inventory-service"
                ]
            else:
                assert "errors" not in payload


async def test_no_entry_means_tool_failure_without_advisory() -> None:
    with seller(True, True) as (world, url):
        world.inventory_up = False
        async with client(url) as c:
            result = await c.call_tool("get_products", {})
    assert result.is_error is True
    assert "STALE_RESPONSE" not in str(result)


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
async def test_raw_wire_keeps_framing_and_transport_success(json_response: bool) -> None:
    import httpx

    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "get_products", "arguments": {}},
    }
    with seller(json_response, True) as (world, url):
        async with httpx.AsyncClient(headers=headers, timeout=10) as http:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
            await http.post(url, json=init)
            await http.post(url, json=call)
            world.inventory_up = False
            response = await http.post(url, json=call)
    assert response.status_code == 200
    if json_response:
        assert response.headers["content-type"].startswith("application/json")
        assert int(response.headers["content-length"]) == len(response.content)
        message = response.json()
    else:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in response.headers
        assert response.text.startswith("event: message")
        [data] = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        message = json.loads(data)
    assert message["id"] == 41
    assert message["result"]["isError"] is False
    assert message["result"]["structuredContent"]["errors"][0]["code"] == "STALE_RESPONSE"


class Answer(BaseModel):
    """A seller's response model: unset fields go out as null."""

    products: list[dict[str, Any]]
    context: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None


async def test_a_null_context_is_kept_and_never_foreign(caplog: Any) -> None:
    """A tool answering a pydantic model writes its unset ``context`` as null, as fastmcp
    does: no warning, and the null kept, byte for byte on a fresh answer, rewritten on a stale
    one."""
    world = World()
    server = MCPServer(name="seller")

    async def products() -> dict[str, Any]:  # the upstream's answer holds a context too
        return {**(await world.products()), "context": None}

    @server.tool(name="get_products")
    async def get_products(brief: str = "") -> Answer:
        payload = await world.cache.fetch(INVENTORY, "all", products)
        return Answer(products=payload["products"])

    mcp_app = server.streamable_http_app(json_response=True, stateless_http=True)
    app = Starlette(
        routes=[Mount("/", mcp_app)], lifespan=lambda app: mcp_app.router.lifespan_context(app)
    )
    middleware = StaleAdvisoryMiddleware(app, surfaces=SURFACES)
    with caplog.at_level("WARNING", logger="adcp_stale_cache"), serve(middleware) as url:
        async with client(f"{url}/mcp") as c:
            await c.call_tool("get_products", {})
            fresh = await c.call_tool("get_products", {})
            world.inventory_up = False
            stale = await c.call_tool("get_products", {})
    for payload in payloads(fresh):
        assert payload == {"products": [{"product_id": "p1"}], "context": None, "errors": None}
    for payload in payloads(stale):
        assert "context" in payload and payload["context"] is None
        assert [e["code"] for e in payload["errors"]] == ["STALE_RESPONSE"]
    assert middleware.contexts_replaced == 0
    assert not [r for r in caplog.records if "answer_context" in r.getMessage()]
