"""The example seller's tools over MCP (``mcp`` 2.x ``MCPServer``, streamable HTTP)."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent

from .tool_failed import ToolFailed

Json = dict[str, Any]
Schema = Callable[..., Awaitable[Any]]

#: Members the tools take but the seller never reads: not passed on.
UNREAD = frozenset({"ext", "idempotency_key"})


def create_mcp_app(
    call: Callable[[str, Json], Awaitable[Json]],
    names: Sequence[str],
    *,
    json_response: bool = False,
    host: str = "127.0.0.1",
) -> Any:
    """An ASGI app serving ``names`` at ``/mcp``, each answered by ``call(name, params)``.
    ``host`` is the name it is reached at: the SDK's DNS-rebinding guard refuses any other."""
    server = MCPServer(name="example-seller")

    async def run(name: str, params: Json) -> Json | CallToolResult:
        try:
            return await call(name, {k: v for k, v in params.items() if v is not None})
        except ToolFailed as exc:  # a fatal error: isError with the adcp_error payload
            text = json.dumps(exc.payload)
            return CallToolResult(
                content=[TextContent(type="text", text=text)],
                structured_content=exc.payload,
                is_error=True,
            )

    def tool(description: str, unread: frozenset[str] = UNREAD) -> Callable[[Schema], Schema]:
        """Serve a signature as the tool of its name, if in ``names``: a call's arguments, but
        the ``unread`` ones, go to ``run``."""

        def serve(schema: Schema) -> Schema:
            @functools.wraps(schema)  # MCP reads the input schema off the wrapped signature
            async def forward(**arguments: Any) -> Any:
                sent = {k: v for k, v in arguments.items() if k not in unread}
                return await run(schema.__name__, sent)

            if schema.__name__ in names:
                server.add_tool(forward, name=schema.__name__, description=description)
            return schema

        return serve

    # A tool's signature is its input: the AdCP request members it takes and the release pins.
    @tool("What this seller supports.")
    async def get_adcp_capabilities(
        context: Json | None = None,
        ext: Json | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("Products matching a brief.", UNREAD | {"brand"})
    async def get_products(
        brief: str | None = None,
        buying_mode: str | None = None,
        filters: Json | None = None,
        account: Json | None = None,
        brand: Json | None = None,
        if_wholesale_feed_version: str | None = None,
        if_pricing_version: str | None = None,
        context: Json | None = None,
        ext: Json | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("Creative formats of every creative agent.")
    async def list_creative_formats(
        context: Json | None = None,
        ext: Json | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("The wholesale product feed (AdCP 3.2).")
    async def list_products(
        criteria: Json | None = None,
        fields: list[str] | None = None,
        account: Json | None = None,
        brand: Json | None = None,
        max_results: int | None = None,
        cursor: str | None = None,
        if_feed_version: str | None = None,
        if_pricing_version: str | None = None,
        context: Json | None = None,
        ext: Json | None = None,
        idempotency_key: str | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("Audience signals (the wholesale signals feed).")
    async def get_signals(
        discovery_mode: str | None = None,
        signal_spec: str | None = None,
        account: Json | None = None,
        filters: Json | None = None,
        max_results: int | None = None,
        if_wholesale_feed_version: str | None = None,
        if_pricing_version: str | None = None,
        context: Json | None = None,
        ext: Json | None = None,
        idempotency_key: str | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("Register accounts' feed webhooks.")
    async def sync_accounts(
        accounts: list[Json],
        context: Json | None = None,
        ext: Json | None = None,
        idempotency_key: str | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any: ...

    @tool("Sandbox test controller.")
    async def comply_test_controller(
        scenario: str,
        params: Json | None = None,
        account: Json | None = None,
        context: Json | None = None,
    ) -> Any: ...

    return server.streamable_http_app(
        streamable_http_path="/mcp", json_response=json_response, host=host
    )
