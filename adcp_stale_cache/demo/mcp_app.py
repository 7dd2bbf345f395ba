"""The example seller's tools over MCP (``mcp`` 2.x ``MCPServer``, streamable HTTP)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent

from .tool_failed import ToolFailed

Json = dict[str, Any]


def create_mcp_app(tools: object, names: Sequence[str], *, json_response: bool = False) -> Any:
    """An ASGI app serving ``names`` at ``/mcp``: each tool is ``tools``'s async method of
    that name (the seller's tools; this module knows nothing else of the seller)."""
    server = MCPServer(name="example-seller")

    async def run(name: str, params: Json) -> Json | CallToolResult:
        method: Callable[[Json], Awaitable[Json]] = getattr(tools, name)
        try:
            return await method({k: v for k, v in params.items() if v is not None})
        except ToolFailed as exc:  # a fatal error: isError with the adcp_error payload
            text = json.dumps(exc.payload)
            return CallToolResult(
                content=[TextContent(type="text", text=text)],
                structured_content=exc.payload,
                is_error=True,
            )

    # Tools take the AdCP request fields they use; MCP drops the others.
    @server.tool(name="get_adcp_capabilities", description="What this seller supports.")
    async def get_adcp_capabilities(context: Json | None = None, ext: Json | None = None) -> Any:
        return await run("get_adcp_capabilities", {"context": context})

    @server.tool(name="get_products", description="Products matching a brief.")
    async def get_products(
        brief: str | None = None,
        buying_mode: str | None = None,
        filters: Json | None = None,
        account: Json | None = None,
        brand: Json | None = None,
        context: Json | None = None,
        ext: Json | None = None,
    ) -> Any:
        return await run("get_products", {"brief": brief, "context": context})

    @server.tool(
        name="list_creative_formats", description="Creative formats of every creative agent."
    )
    async def list_creative_formats(context: Json | None = None, ext: Json | None = None) -> Any:
        return await run("list_creative_formats", {"context": context})

    if "comply_test_controller" in names:

        @server.tool(name="comply_test_controller", description="Sandbox test controller.")
        async def comply_test_controller(
            scenario: str,
            params: Json | None = None,
            account: Json | None = None,
            context: Json | None = None,
        ) -> Any:
            request = {
                "scenario": scenario,
                "params": params,
                "account": account,
                "context": context,
            }
            return await run("comply_test_controller", request)

    return server.streamable_http_app(streamable_http_path="/mcp", json_response=json_response)
