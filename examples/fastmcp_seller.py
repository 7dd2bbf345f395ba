"""A fastmcp 3 seller built like the reference seller: sync tools, worker threads, a loop per call.

Its shape is that of many sellers in production: a fastmcp 3.2 server (on ``mcp`` 1.x), an
identity resolved by a fastmcp middleware into the session state, a format registry object
per process, and a sync implementation shared by every transport that runs its async work
on a new event loop in a worker thread. What the cache needs from such a seller is two lines:
``carry_context`` on the hop into the worker pool, and ``StaleAdvisoryMiddleware`` around the
app. Run::

    pip install 'adcp-stale-cache[mcp]' 'fastmcp>=3.2,<3.3' uvicorn
    python examples/fastmcp_seller.py --port 8000 --creative-agent dco=http://127.0.0.1:9001/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools import ToolResult

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    carry_context,
    service_unavailable,
)
from adcp_stale_cache.integrations.mcp_client import call_mcp_tool

# Formats are a public catalogue: one entry per creative agent for every caller. Timings are
# the example's; see the quick start for what each default means.
SURFACES = Surfaces.of(
    SurfacePolicy(
        name="list_creative_formats",
        field="formats",
        freshness_target_seconds=60,
        max_stale_seconds=3600,
        upstream_timeout_seconds=5,
        shared_across_callers=True,
    )
)

# One pool per process: each call's async work runs on an event loop of its own in here.
WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tool")


class FormatRegistry:
    """The creative agents this seller lists formats from, behind one cache per process."""

    def __init__(self, agents: dict[str, str], cache: UpstreamCache) -> None:
        # An agent is its name and its URL: two tenants' "DCO Agent"s are two upstreams.
        self.agents = [Upstream(name=name, url=url) for name, url in agents.items()]
        self.cache = cache

    async def list_formats(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every agent's formats, asked at once, and an error for each agent with none."""

        async def from_agent(agent: Upstream) -> tuple[list[Any], dict[str, Any] | None]:
            assert agent.url is not None
            url = agent.url
            try:
                payload = await self.cache.fetch(
                    agent,
                    "list_creative_formats",
                    lambda: call_mcp_tool(url, "list_creative_formats"),
                    surface="list_creative_formats",
                )
            except UpstreamUnavailable as exc:  # down, and nothing cached: say so
                return [], service_unavailable(exc, field="formats").to_dict()
            return list(payload.get("formats", [])), None

        answers = await asyncio.gather(*(from_agent(agent) for agent in self.agents))
        formats = [fmt for found, _ in answers for fmt in found]
        return formats, [error for _, error in answers if error is not None]


def list_creative_formats_impl(registry: FormatRegistry, principal: str | None) -> dict[str, Any]:
    """The sync implementation MCP, A2A and REST share (the principal would pick the
    tenant's agents; one tenant here)."""
    # carry_context: a pool does not carry the request's context by itself, and without it
    # the advisories of stale formats would have no request to go to.
    formats, errors = WORKERS.submit(carry_context(asyncio.run), registry.list_formats()).result()
    response: dict[str, Any] = {"formats": formats}
    if errors:
        response["errors"] = errors
    return response


class IdentityMiddleware(Middleware):
    """Resolves the caller once per tool call into the fastmcp state, as tools expect it."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        token = get_http_headers(include={"authorization"}).get("authorization", "")
        if context.fastmcp_context is not None:
            principal = token.removeprefix("Bearer ") or None
            await context.fastmcp_context.set_state("identity", principal)
        return await call_next(context)


def build_app(agents: dict[str, str], surfaces: Surfaces = SURFACES) -> Any:
    """The seller's ASGI app: fastmcp's streamable HTTP app inside the advisory middleware."""
    registry = FormatRegistry(agents, UpstreamCache(surfaces=surfaces))
    server = FastMCP("seller", middleware=[IdentityMiddleware()])

    @server.tool
    async def list_creative_formats(ctx: Context) -> ToolResult:
        """The creative formats this seller accepts, from its creative agents."""
        principal = await ctx.get_state("identity")
        response = await asyncio.to_thread(list_creative_formats_impl, registry, principal)
        summary = f"{len(response['formats'])} creative formats"
        return ToolResult(content=summary, structured_content=response)

    return StaleAdvisoryMiddleware(server.http_app(path="/mcp"), surfaces=surfaces)


def main() -> None:
    """Serve the example seller with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--creative-agent", action="append", default=[], metavar="NAME=URL")
    args = parser.parse_args()
    agents = dict(item.split("=", 1) for item in args.creative_agent)
    uvicorn.run(build_app(agents), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
