"""A surface path written as its route is (``/api/{tenant}/get_products``) matches requests
as the route does, and start-up does not report it unserved."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from adcp_stale_cache import StaleAdvisoryMiddleware, SurfacePolicy, Surfaces, current_collector

TEMPLATED = SurfacePolicy(
    name="get_products", field="products", paths=("/api/{tenant}/get_products/",)
)


@pytest.mark.timeout(30)
def test_a_templated_path_matches_as_its_route_does(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str | None] = []
    app = FastAPI()

    @app.post("/api/{tenant}/get_products")
    @app.post("/api/{tenant}/other/get_products")
    async def get_products(tenant: str) -> dict[str, Any]:
        collector = current_collector()
        seen.append(None if collector is None or collector.surface is None else tenant)
        return {"products": []}

    app.add_middleware(StaleAdvisoryMiddleware, surfaces=Surfaces.of(TEMPLATED))
    with caplog.at_level(logging.INFO), TestClient(app) as client:
        for path in ("/api/acme/get_products", "/api/beta/get_products/",
                     "/api/acme/other/get_products"):  # fmt: skip
            client.post(path, json={})
    assert seen == ["acme", "beta", None]  # one segment, as {tenant} matches in the route
    assert not any("surface_unserved" in r.getMessage() for r in caplog.records)
