"""The middleware's request context is the request itself, read as it comes: its fields (the
pins), its caller's partition (asked once, on first use) and what a flight or a later re-run
takes of them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)
from adcp_stale_cache.pipeline.collector import current_collector
from adcp_stale_cache.pipeline.context import UNREAD, RequestContext

PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
SURFACES = Surfaces.of(PRODUCTS)


def seller(read_body: bool, seen: list[RequestContext]) -> Starlette:
    async def products(request: Request) -> Response:
        if read_body:
            await request.body()
        collector = current_collector()
        assert collector is not None
        seen.append(collector.context)
        return JSONResponse({"products": []})

    methods = ["GET", "POST"]
    return Starlette(routes=[Route("/api/get_products", products, methods=methods)])


async def ask(app: Any, method: str, body: bytes = b"") -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        return await client.request(method, "/api/get_products", content=body)


async def test_a_request_without_a_body_pins_nothing() -> None:
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(True, seen), surfaces=SURFACES)
    assert (await ask(app, "GET")).status_code == 200
    assert seen[0].request_field("adcp_version") is None
    assert seen[0].pinned_release() is None


async def test_a_body_the_app_never_read_is_unread_not_empty() -> None:
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(False, seen), surfaces=SURFACES)
    assert (await ask(app, "POST", b'{"adcp_version": "3.0"}')).status_code == 200
    assert seen[0].request_field("adcp_version") is UNREAD
    assert seen[0].pinned_release() is UNREAD  # never shared with a request pinning nothing


async def test_a_read_body_gives_its_fields_and_its_pin() -> None:
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(True, seen), surfaces=SURFACES)
    body = json.dumps({"adcp_version": "3.0", "brief": "b"}).encode()
    assert (await ask(app, "POST", body)).status_code == 200
    assert seen[0].request_field("brief") == "b"
    assert seen[0].request_field("absent") is None
    assert seen[0].pinned_release() == 'adcp_version="3.0"'
    assert seen[0].surface is PRODUCTS


class Principals:
    """A partition function that counts how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, scope: Any) -> str:
        self.asked += 1
        return "tenant-a"


@pytest.mark.parametrize("first", ["request", "flight", "re-run"])
async def test_the_partition_is_asked_once_whoever_asks_first(first: str) -> None:
    principals = Principals()
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(True, seen), surfaces=SURFACES, partition=principals)
    assert (await ask(app, "POST", b"{}")).status_code == 200
    context = seen[0]
    flight = context.within()
    remade = context.as_made()
    assert principals.asked == 0  # none of the three asked it yet
    if first == "flight":
        assert flight.partition == "tenant-a"
    elif first == "re-run":
        assert remade().partition == "tenant-a"
    assert context.partition == "tenant-a"
    assert flight.partition == "tenant-a"
    assert principals.asked == (2 if first == "re-run" else 1)  # a re-run asks on its own


async def test_a_re_run_made_after_the_partition_was_asked_does_not_ask_again() -> None:
    principals = Principals()
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(True, seen), surfaces=SURFACES, partition=principals)
    assert (await ask(app, "POST", b"{}")).status_code == 200
    assert seen[0].partition == "tenant-a"
    assert seen[0].as_made()().partition == "tenant-a"
    assert principals.asked == 1


async def test_no_partition_function_gives_no_partition() -> None:
    seen: list[RequestContext] = []
    app = StaleAdvisoryMiddleware(seller(True, seen), surfaces=SURFACES, partition=None)
    assert (await ask(app, "POST", b"{}")).status_code == 200
    assert seen[0].partition is None
    assert seen[0].within().partition is None and seen[0].as_made()().partition is None


@pytest.mark.parametrize("partition", ["default", None])
async def test_a_partition_the_handler_names_wins_and_keeps_tenants_apart(
    partition: str | None,
) -> None:
    """A handler that authenticates its caller names the partition (``partition_from``); it
    keys the request's entries, its re-runs' and its flights', over the middleware's own."""
    cache = UpstreamCache(surfaces=SURFACES)
    inventory = Upstream(name="inv")
    seen: list[tuple[str | None, str | None, str | None]] = []

    async def products(request: Request) -> Response:
        tenant = (await request.json())["tenant"]
        collector = current_collector()
        assert collector is not None
        collector.context.partition_from(lambda: f"tenant:{tenant}")
        remade = collector.context.as_made()

        async def call() -> dict[str, Any]:
            return {"products": [f"secret-of-{tenant}"]}

        got = await cache.fetch(inventory, "products", call)
        context = collector.context
        seen.append((context.partition, context.within().partition, remade().partition))
        return JSONResponse(got)

    routes = [Route("/api/get_products", products, methods=["POST"])]
    seller = Starlette(routes=routes)
    if partition == "default":
        app = StaleAdvisoryMiddleware(seller, cache=cache)
    else:
        app = StaleAdvisoryMiddleware(seller, cache=cache, partition=None)
    acme = await ask(app, "POST", json.dumps({"tenant": "acme"}).encode())
    evil = await ask(app, "POST", json.dumps({"tenant": "evil"}).encode())
    assert acme.json()["products"] == ["secret-of-acme"]
    assert evil.json()["products"] == ["secret-of-evil"]
    assert seen == [("tenant:acme",) * 3, ("tenant:evil",) * 3]
