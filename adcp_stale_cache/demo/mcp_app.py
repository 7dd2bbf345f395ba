"""The example seller's tools over MCP (``mcp`` 2.x ``MCPServer``, streamable HTTP)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent

from .tool_failed import ToolFailed

Json = dict[str, Any]


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

    # Tools take the AdCP request fields they use and the release pins; MCP drops the others.
    @server.tool(name="get_adcp_capabilities", description="What this seller supports.")
    async def get_adcp_capabilities(
        context: Json | None = None,
        ext: Json | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any:
        return await run(
            "get_adcp_capabilities",
            {
                "context": context,
                "adcp_version": adcp_version,
                "adcp_major_version": adcp_major_version,
            },
        )

    @server.tool(name="get_products", description="Products matching a brief.")
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
    ) -> Any:
        return await run(
            "get_products",
            {
                "brief": brief,
                "buying_mode": buying_mode,
                "filters": filters,
                "account": account,
                "if_wholesale_feed_version": if_wholesale_feed_version,
                "if_pricing_version": if_pricing_version,
                "context": context,
                "adcp_version": adcp_version,
                "adcp_major_version": adcp_major_version,
            },
        )

    @server.tool(
        name="list_creative_formats", description="Creative formats of every creative agent."
    )
    async def list_creative_formats(
        context: Json | None = None,
        ext: Json | None = None,
        adcp_version: str | None = None,
        adcp_major_version: int | None = None,
    ) -> Any:
        return await run(
            "list_creative_formats",
            {
                "context": context,
                "adcp_version": adcp_version,
                "adcp_major_version": adcp_major_version,
            },
        )

    @server.tool(name="list_products", description="The wholesale product feed (AdCP 3.2).")
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
    ) -> Any:
        return await run(
            "list_products",
            {
                "criteria": criteria,
                "fields": fields,
                "account": account,
                "brand": brand,
                "max_results": max_results,
                "cursor": cursor,
                "if_feed_version": if_feed_version,
                "if_pricing_version": if_pricing_version,
                "context": context,
                "adcp_version": adcp_version,
                "adcp_major_version": adcp_major_version,
            },
        )

    @server.tool(name="get_signals", description="Audience signals (the wholesale signals feed).")
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
    ) -> Any:
        return await run(
            "get_signals",
            {
                "discovery_mode": discovery_mode,
                "signal_spec": signal_spec,
                "account": account,
                "filters": filters,
                "max_results": max_results,
                "if_wholesale_feed_version": if_wholesale_feed_version,
                "if_pricing_version": if_pricing_version,
                "context": context,
                "adcp_version": adcp_version,
                "adcp_major_version": adcp_major_version,
            },
        )

    if "sync_accounts" in names:

        @server.tool(name="sync_accounts", description="Register accounts' feed webhooks.")
        async def sync_accounts(
            accounts: list[Json],
            context: Json | None = None,
            ext: Json | None = None,
            idempotency_key: str | None = None,
            adcp_version: str | None = None,
            adcp_major_version: int | None = None,
        ) -> Any:
            return await run(
                "sync_accounts",
                {
                    "accounts": accounts,
                    "context": context,
                    "adcp_version": adcp_version,
                    "adcp_major_version": adcp_major_version,
                },
            )

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

    return server.streamable_http_app(
        streamable_http_path="/mcp", json_response=json_response, host=host
    )
