"""Quick start: a FastAPI seller whose products come from an internal inventory service.

Run it: ``uvicorn examples.fastapi_seller:app``.
"""

import httpx
from fastapi import FastAPI

from adcp_stale_cache import (
    CachingTransport,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

surfaces = Surfaces.of(
    SurfacePolicy(
        name="get_products",
        field="products",  # the payload path the advisory names
        paths=("/api/get_products",),  # the route that answers this tool
        freshness_target_seconds=60,  # younger entries are served without a call
        max_stale_seconds=3600,  # on an outage, serve entries up to 60 s + 1 h old
    )
)
cache = UpstreamCache(surfaces=surfaces)  # in memory, bounded by entries and bytes
inventory = httpx.AsyncClient(
    base_url="http://inventory.internal",
    transport=CachingTransport(cache, Upstream(name="inventory-service")),
)

app = FastAPI()
app.add_middleware(StaleAdvisoryMiddleware, cache=cache)


@app.post("/api/get_products")
async def get_products() -> dict[str, object]:
    response = await inventory.get("/products")  # cached; stale on an outage
    return {"products": response.json()["products"]}
