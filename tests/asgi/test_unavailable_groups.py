"""A cold outage raised from a fan-out (anyio or asyncio task group) arrives as an exception
group: answered as the plain case is (503 SERVICE_UNAVAILABLE) when every leaf is an
UpstreamUnavailable, and left to the app's error handling otherwise (Python 3.10: the
``exceptiongroup`` backport's groups, which anyio raises there)."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))


async def _fan_out() -> httpx.Response:
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))

    async def down() -> Any:
        raise ConnectionRefusedError

    async def fails() -> None:
        await anyio.sleep(0.01)
        raise ConnectionRefusedError

    async def route(request: Request) -> JSONResponse:
        await request.body()
        async with anyio.create_task_group() as fan_out:
            fan_out.start_soon(cache.fetch, Upstream(name="inventory"), "all", down)
            fan_out.start_soon(cache.fetch, Upstream(name="creative-agent"), "all", fails)
        return JSONResponse({"products": []})

    app = Starlette(routes=[Route("/api/get_products", route, methods=["POST"])])
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=cache.surfaces)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        return await http.post("/api/get_products", json={})


@pytest.mark.timeout(30)
async def test_every_upstream_down_in_a_task_group_is_service_unavailable() -> None:
    answer = await _fan_out()
    assert answer.status_code == 503, answer.text[:100]
    assert answer.json()["adcp_error"]["code"] == "SERVICE_UNAVAILABLE"


def test_a_group_holding_another_failure_is_the_apps_to_answer() -> None:
    from adcp_stale_cache.asgi.middleware import upstream_unavailable
    from adcp_stale_cache.core.failures import UpstreamUnavailable, classify

    down = UpstreamUnavailable(Upstream(name="inventory"), classify(ConnectionRefusedError()))
    nested = BaseExceptionGroup("fan-out", [down, BaseExceptionGroup("inner", [down])])
    assert upstream_unavailable(nested) is down
    assert upstream_unavailable(BaseExceptionGroup("fan-out", [down, ValueError()])) is None
    assert upstream_unavailable(ValueError()) is None
