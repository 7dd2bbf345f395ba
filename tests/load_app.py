"""The seller app of tests/e2e/test_load.py, served by uvicorn in a process of its own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    MemoryStore,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

UPSTREAMS = 100
DOWN = {n for n in range(UPSTREAMS) if n % 10 < 3}  # 30%
MAX_BYTES = 256 * 1024

logging.getLogger("adcp_stale_cache").setLevel(logging.ERROR)  # 6,000 stale serves: no log spam
policy = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",),
                       freshness_target_seconds=0, max_stale_seconds=3600, upstream_timeout_seconds=2)  # fmt: skip
surfaces = Surfaces.of(policy)
store = MemoryStore(max_bytes=MAX_BYTES)
cache = UpstreamCache(store, surfaces=surfaces)
state = {"outage": False}


async def products(request: Request) -> JSONResponse:
    n = int(request.query_params["u"])

    async def call() -> dict[str, Any]:
        await asyncio.sleep(0)
        if state["outage"] and n in DOWN:
            raise ConnectionRefusedError
        return {"products": [{"product_id": f"u{n}-{i}", "name": "x" * 64} for i in range(8)]}

    payload = await cache.fetch(Upstream(name=f"upstream-{n}"), "all", call)
    return JSONResponse({"products": payload["products"]})


async def control(request: Request) -> JSONResponse:
    if request.method == "POST":
        state["outage"] = True
    return JSONResponse(
        {"bytes": store.bytes, "max_bytes": MAX_BYTES, "upstreams": UPSTREAMS, "down": sorted(DOWN)}
    )


app = StaleAdvisoryMiddleware(
    Starlette(
        routes=[
            Route("/api/get_products", products, methods=["POST"]),
            Route("/control", control, methods=["GET", "POST"]),
        ]
    ),
    surfaces=surfaces,
)
