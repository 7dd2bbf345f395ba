"""Quick start: a seller on the ``mcp`` 2.x ``MCPServer`` (streamable HTTP at ``/mcp``).

Run it: ``uvicorn examples.mcp_seller:app``.
"""

from typing import Any

import httpx
from mcp.server import MCPServer

from adcp_stale_cache import (
    CachingTransport,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

surfaces = Surfaces.of(
    SurfacePolicy(
        name="get_products", field="products", freshness_target_seconds=60, max_stale_seconds=3600
    )
)
cache = UpstreamCache(surfaces=surfaces)
inventory = httpx.AsyncClient(
    base_url="http://inventory.internal",
    transport=CachingTransport(cache, Upstream(name="inventory-service")),
)

server = MCPServer(name="seller")


@server.tool(name="get_products", description="Products matching a brief.")
async def get_products(brief: str = "") -> dict[str, Any]:
    response = await inventory.get("/products")  # the surface comes from the tool name
    return {"products": response.json()["products"]}


# The advisory goes into structuredContent and the JSON text block; isError stays false.
app = StaleAdvisoryMiddleware(server.streamable_http_app(), cache=cache)
