"""Any async upstream call behind the cache: here a database read and an MCP creative agent.

Run it: ``python examples/generic_wrapper.py`` (it fakes an outage of the "database").
"""

from __future__ import annotations

import asyncio
import json

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache, collect_advisories

surfaces = Surfaces.of(
    SurfacePolicy(
        name="get_products", field="products", freshness_target_seconds=0, max_stale_seconds=600
    )
)
cache = UpstreamCache(surfaces=surfaces)
catalogue_db = Upstream(name="catalogue-db")  # internal: no url in advisories

database_up = True


@cache.cached(catalogue_db, surface="get_products")
async def load_products(country: str) -> list[dict[str, str]]:
    if not database_up:
        raise ConnectionRefusedError("catalogue-db:5432 refused")  # never shown to buyers
    return [{"product_id": f"{country}-display-1"}]


async def main() -> None:
    global database_up
    await load_products("US")  # warms the cache
    database_up = False
    with collect_advisories() as advisories:  # what the ASGI middleware does per request
        products = await load_products("US")
    print(json.dumps({"products": products, "errors": advisories.errors()}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
