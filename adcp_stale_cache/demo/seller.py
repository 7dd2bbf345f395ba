"""The example seller: a FastAPI app answering AdCP tools from upstreams, through the cache.

* ``POST /api/list_creative_formats`` asks every creative agent at once (MCP, through the
  generic wrapper) and merges their formats;
* ``POST /api/get_products`` asks the internal inventory service (HTTP, through the httpx
  transport), forwarding the buyer's bearer token.

An upstream that is down is answered from cache with one ``STALE_RESPONSE`` per upstream;
one with no usable entry becomes a ``SERVICE_UNAVAILABLE`` error (fatal when nothing at all
could be served).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .. import (
    CachingTransport,
    InvalidPayload,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    service_unavailable,
)
from ..integrations.mcp_client import call_mcp_tool
from ..stores import Store


def seller_surfaces(freshness_target: int, max_stale: int, upstream_timeout: float) -> Surfaces:
    """The example seller's two surfaces, with the same timings."""

    def surface(name: str, field: str) -> SurfacePolicy:
        return SurfacePolicy(
            name=name,
            field=field,
            paths=(f"/api/{name}",),
            freshness_target_seconds=freshness_target,
            max_stale_seconds=max_stale,
            upstream_timeout_seconds=upstream_timeout,
        )

    return Surfaces.of(
        surface("list_creative_formats", "formats"), surface("get_products", "products")
    )


def create_seller_app(
    *,
    creative_agents: Mapping[str, str],
    inventory_url: str,
    freshness_target: int = 60,
    max_stale: int = 3600,
    upstream_timeout: float = 5.0,
    store: Store | None = None,
) -> FastAPI:
    """The seller app; ``creative_agents`` maps each agent's name to its MCP URL."""
    surfaces = seller_surfaces(freshness_target, max_stale, upstream_timeout)
    cache = UpstreamCache(store, surfaces=surfaces)
    agents = [Upstream(name=name, url=url) for name, url in creative_agents.items()]
    inventory = Upstream(name="inventory-service")  # internal: its URL is never reported
    transport = CachingTransport(cache, inventory, surface="get_products", validate=_has_products)
    inventory_client = httpx.AsyncClient(base_url=inventory_url, transport=transport)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await inventory_client.aclose()

    app = FastAPI(title="adcp-stale-cache example seller", lifespan=lifespan)
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=surfaces)
    app.state.cache = cache

    async def formats_of(agent: Upstream, arguments: dict[str, Any]) -> list[Any]:
        assert agent.url is not None
        url = agent.url
        payload = await cache.fetch(
            agent,
            ("list_creative_formats", arguments),
            lambda: call_mcp_tool(url, "list_creative_formats", arguments),
            surface="list_creative_formats",
            validate=_has_formats,
        )
        formats: list[Any] = payload["formats"]
        return formats

    @app.post("/api/list_creative_formats")
    async def list_creative_formats(request: Request) -> Any:
        body = await _json_body(request)
        arguments = {k: v for k, v in body.items() if k not in ("context", "ext")}
        results = await asyncio.gather(
            *(formats_of(agent, arguments) for agent in agents), return_exceptions=True
        )
        formats: list[Any] = []
        errors: list[dict[str, Any]] = []
        for result in results:
            if isinstance(result, UpstreamUnavailable):
                errors.append(service_unavailable(result, field="formats").to_dict())
            elif isinstance(result, BaseException):
                raise result
            else:
                formats.extend(result)
        if errors and not formats:
            return _fatal(errors, body)
        payload: dict[str, Any] = {"formats": formats}
        if errors:
            payload["errors"] = errors
        return _with_context(payload, body)

    @app.post("/api/get_products")
    async def get_products(request: Request) -> Any:
        body = await _json_body(request)
        auth = request.headers.get("authorization")
        try:
            response = await inventory_client.get(
                "/products", headers={"authorization": auth} if auth else None
            )
        except UpstreamUnavailable as exc:
            return _fatal([service_unavailable(exc, field="products").to_dict()], body)
        payload = {
            "products": response.json()["products"],
            "cache_scope": "account" if auth else "public",
        }
        return _with_context(payload, body)

    return app


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _with_context(payload: dict[str, Any], request_body: Mapping[str, Any]) -> dict[str, Any]:
    if "context" in request_body:
        payload["context"] = request_body["context"]
    return payload


def _fatal(errors: list[dict[str, Any]], request_body: Mapping[str, Any]) -> JSONResponse:
    payload = _with_context({"adcp_error": errors[0], "errors": errors}, request_body)
    return JSONResponse(payload, status_code=503)


def _has_formats(payload: dict[str, Any]) -> None:
    if not isinstance(payload.get("formats"), list):
        raise InvalidPayload("no formats list")


def _has_products(response: httpx.Response) -> None:
    try:
        ok = isinstance(response.json().get("products"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise InvalidPayload("no products list")
