"""A Starlette seller: the middleware, a generic-wrapper upstream, the fatal error helper.

Run it: ``uvicorn examples.starlette_seller:app``.
"""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    service_unavailable,
)

surfaces = Surfaces.of(
    SurfacePolicy(
        name="list_creative_formats",
        field="formats",
        paths=("/api/list_creative_formats",),
        freshness_target_seconds=300,
        max_stale_seconds=86_400,
        upstream_timeout_seconds=2,
    )
)
cache = UpstreamCache(surfaces=surfaces)
agent = Upstream(name="creative-agent-acme", url="https://creative.acme.example/mcp")


async def fetch_formats() -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        response = await client.get("https://creative.acme.example/formats.json")
        response.raise_for_status()  # a 5xx counts as an outage, a 4xx does not
        result: dict[str, object] = response.json()
        return result


async def list_creative_formats(request: Request) -> JSONResponse:
    try:
        payload = await cache.fetch(agent, "all-formats", fetch_formats)
    except UpstreamUnavailable as exc:  # no usable cache entry: the failure stays a failure
        error = service_unavailable(exc, field="formats").to_dict()
        return JSONResponse({"adcp_error": error, "errors": [error]}, status_code=503)
    return JSONResponse({"formats": payload.get("formats", [])})


app = Starlette(
    routes=[Route("/api/list_creative_formats", list_creative_formats, methods=["POST"])],
    middleware=[
        Middleware(GZipMiddleware),  # outermost: compression sees the advisories
        Middleware(StaleAdvisoryMiddleware, cache=cache),
    ],
)
