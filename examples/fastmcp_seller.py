"""A fastmcp 3 seller built like the reference seller: sync tools, worker threads, a loop per call.

Its shape is that of many sellers in production: a fastmcp 3.2 server (on ``mcp`` 1.x), an
identity resolved by a fastmcp middleware into the session state, a format registry object
per process, tenants calling private creative agents with credentials of their own, answers
built from the ``adcp`` package's own models (``ListCreativeFormatsResponse``, ``Format``)
and returned as ``ToolResult(structured_content=model)``, and a sync implementation shared by
every transport that runs its async work on a new event loop in a worker thread. What the
cache needs from such a seller: one cache beside the registry (``detach_calls=True``, for the
loop per call), ``carry_context`` on the hop into the worker pool, ``PydanticCodec`` for the
models, the tenant's credentials on its ``Upstream``, and ``StaleAdvisoryMiddleware`` around
the app. Run::

    pip install 'adcp-stale-cache[mcp,adcp]' 'fastmcp>=3.2,<3.3' uvicorn   # or 'fastmcp>=4,<5'
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
    CacheControl,
    PydanticCodec,
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

try:  # adcp 6.x, what the reference seller pins
    from adcp.types import Error, Format, ListCreativeFormatsResponse
except ImportError:  # adcp 9.x: list_creative_formats is a legacy task since AdCP 3.2
    from adcp.types import Error
    from adcp.types import LegacyListCreativeFormatsResponse as ListCreativeFormatsResponse
    from adcp.types.domains.core.format import Format  # type: ignore[no-redef]

# Formats are a public catalogue: one entry per creative agent (and per credential, for a
# private agent) for every caller. Timings are the example's; see the quick start for what
# each default means.
SURFACES = Surfaces.of(
    SurfacePolicy(
        name="list_creative_formats",
        field="formats",
        freshness_target_seconds=60,
        max_stale_seconds=3600,
        upstream_timeout_seconds=5,
        # A request waits for a worker before it calls: the budget, from its arrival, bounds
        # the whole answer, queue included (what it has no time left for is served stale).
        request_budget_seconds=8,
        shared_across_callers=True,
    )
)

# The agents' formats are cached as the models the seller holds, whole.
FORMATS: PydanticCodec[list[Format]] = PydanticCodec(list[Format])

# One pool per process: each call's async work runs on an event loop of its own in here.
WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tool")


class FormatRegistry:
    """The creative agents this seller lists formats from, behind one cache per process.

    ``credentials`` are each tenant's own tokens for the agents that want one (principal ->
    agent name -> token): they go on the agent's ``Upstream``, so that two tenants calling
    one agent with their own tokens never share an entry.
    """

    def __init__(
        self,
        agents: dict[str, str],
        cache: UpstreamCache,
        credentials: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.agents = agents
        self.cache = cache
        self.credentials = credentials or {}

    def upstreams(self, principal: str | None) -> list[Upstream]:
        """The tenant's view of the agents: name, URL and its own credentials, if any."""
        tokens = self.credentials.get(principal or "", {})
        return [
            Upstream(name=name, url=url, credentials=tokens.get(name))
            for name, url in self.agents.items()
        ]

    async def list_formats(
        self, principal: str | None, name_search: str | None = None, force_refresh: bool = False
    ) -> tuple[list[Format], list[Error]]:
        """Every agent's formats, asked at once, and an error for each agent with none.

        The whole catalogue is what is cached; a filter reads it (never a cache bypass), and
        a forced refresh is a soft purge: the fetch then refreshes, and still falls back to
        the purged entry when the agent is down.
        """
        agents = self.upstreams(principal)
        if force_refresh:
            for agent in agents:
                await CacheControl(self.cache).invalidate(upstream=agent, soft=True)
        answers = await asyncio.gather(*(self._from_agent(agent) for agent in agents))
        formats = [fmt for found, _ in answers for fmt in found]
        if name_search:
            formats = [f for f in formats if name_search.lower() in (f.name or "").lower()]
        return formats, [error for _, error in answers if error is not None]

    async def _from_agent(self, agent: Upstream) -> tuple[list[Format], Error | None]:
        assert agent.url is not None
        url, token = agent.url, agent.credentials

        async def call() -> list[Format]:
            headers = {"x-adcp-auth": token.get_secret_value()} if token else None
            payload = await call_mcp_tool(url, "list_creative_formats", headers=headers)
            return [Format.model_validate(item) for item in payload.get("formats") or []]

        try:
            formats = await self.cache.fetch(
                agent, "list_creative_formats", call, surface="list_creative_formats",
                codec=FORMATS,
            )  # fmt: skip
        except UpstreamUnavailable as exc:  # down, and nothing cached: say so
            error = service_unavailable(exc, field="formats").to_dict()
            return [], Error.model_validate(error)
        return formats, None


def list_creative_formats_impl(
    registry: FormatRegistry, principal: str | None, name_search: str | None = None
) -> ListCreativeFormatsResponse:
    """The sync implementation MCP, A2A and REST share."""
    # carry_context: a pool does not carry the request's context by itself, and without it
    # the advisories of stale formats would have no request to go to.
    work = registry.list_formats(principal, name_search)
    formats, errors = WORKERS.submit(carry_context(asyncio.run), work).result()
    return ListCreativeFormatsResponse(formats=formats, errors=errors or None)


class IdentityMiddleware(Middleware):
    """Resolves the caller once per tool call into the fastmcp state, as tools expect it."""

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        token = get_http_headers(include={"authorization"}).get("authorization", "")
        if context.fastmcp_context is not None:
            principal = token.removeprefix("Bearer ") or None
            await context.fastmcp_context.set_state("identity", principal)
        return await call_next(context)


def build_app(
    agents: dict[str, str],
    surfaces: Surfaces = SURFACES,
    credentials: dict[str, dict[str, str]] | None = None,
) -> Any:
    """The seller's ASGI app: fastmcp's streamable HTTP app inside the advisory middleware.

    The cache lives beside the registry, built once: the middleware takes its surfaces.
    """
    cache = UpstreamCache(surfaces=surfaces, detach_calls=True)
    registry = FormatRegistry(agents, cache, credentials)
    server = FastMCP("seller", middleware=[IdentityMiddleware()])

    @server.tool
    async def list_creative_formats(ctx: Context, name_search: str | None = None) -> ToolResult:
        """The creative formats this seller accepts, from its creative agents."""
        principal = await ctx.get_state("identity")
        response = await asyncio.to_thread(
            list_creative_formats_impl, registry, principal, name_search
        )
        summary = f"{len(response.formats)} creative formats"
        return ToolResult(content=summary, structured_content=response)

    return StaleAdvisoryMiddleware(server.http_app(path="/mcp"), cache=cache)


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
