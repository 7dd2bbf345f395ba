"""A mock AdCP creative agent: ``list_creative_formats`` over MCP at ``/mcp``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .data import creative_formats


def create_creative_agent_app(*, name: str, public_url: str, formats: int = 3) -> Any:
    """An MCP (streamable HTTP) app whose formats name ``public_url`` as their agent."""
    from mcp.server import MCPServer

    server = MCPServer(name=f"creative-agent-{name}")
    catalogue = creative_formats(public_url, name, formats)

    @server.tool(name="list_creative_formats", description="List this agent's creative formats.")
    def list_creative_formats() -> dict[str, Any]:
        return {"formats": catalogue}

    # The SDK refuses other Host headers (DNS rebinding guard): name the host it is reached at.
    return server.streamable_http_app(
        stateless_http=True, json_response=True, host=urlsplit(public_url).hostname or "127.0.0.1"
    )
