"""An answer shaped for one AdCP release is never served to a request pinned at another:
a surface declared ``varies_by_version`` keys its entries by the release each request pins
(``adcp_version``, else ``adcp_major_version``), read off the request by the middleware on a
declared JSON route and in MCP and A2A calls alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import uuid4

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
    collect_advisories,
)
from adcp_stale_cache.stores import MemoryStore

SUB_AGENT = Upstream(name="sub-seller")


def seller(varies: bool) -> tuple[Any, list[str | None]]:
    policy = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",),
                           shared_across_callers=True, varies_by_version=varies)  # fmt: skip
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    asked: list[str | None] = []

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        pin = request.get("adcp_version", request.get("adcp_major_version"))
        pinned = None if pin is None else str(pin)  # the seller reads the pin itself

        async def shaped_for_the_pin() -> dict[str, Any]:  # the sub-agent answers per release
            asked.append(pinned)
            return {"products": [{"product_id": "p1", "shape": pinned}]}

        return await cache.fetch(SUB_AGENT, "products", shaped_for_the_pin)

    async def rest(request: Request) -> Response:
        return Response(
            json.dumps(await answer(json.loads(await request.body()))),
            media_type="application/json",
        )

    async def rpc(request: Request) -> Response:
        message = await request.json()
        params = message["params"]
        if message["method"] == "tools/call":
            payload = await answer(params["arguments"])
        else:
            payload = await answer(params["message"]["parts"][0]["data"]["parameters"])
        result = {"content": [], "structuredContent": payload, "isError": False}
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = Starlette(routes=[Route("/api/get_products", rest, methods=["POST"]),
                            Route("/rpc", rpc, methods=["POST"])])  # fmt: skip
    middleware = StaleAdvisoryMiddleware(app, surfaces=cache.surfaces)
    middleware.cache = cache  # type: ignore[attr-defined]  # for the tests' own looks
    return middleware, asked


async def ask(app: Any, transport: str, **pins: Any) -> Any:
    request = {"buying_mode": "brief", "brief": "b", **pins}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        if transport == "rest":
            return (await http.post("/api/get_products", json=request)).json()["products"][0]
        if transport == "mcp":
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "get_products", "arguments": request}}  # fmt: skip
        else:
            message = {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [
                {"data": {"skill": "get_products", "parameters": request}}]}  # fmt: skip
            body = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
                    "params": {"message": message}}  # fmt: skip
        answer = (await http.post("/rpc", json=body)).json()
        return answer["result"]["structuredContent"]["products"][0]


@pytest.mark.parametrize("transport", ["rest", "mcp", "a2a"])
async def test_entries_are_kept_apart_by_the_pinned_release(transport: str) -> None:
    app, asked = seller(varies=True)
    assert (await ask(app, transport, adcp_version="3.1"))["shape"] == "3.1"
    assert (await ask(app, transport, adcp_version="3.2"))["shape"] == "3.2"
    assert (await ask(app, transport, adcp_major_version=3))["shape"] == "3"
    assert (await ask(app, transport))["shape"] is None
    assert (await ask(app, transport, adcp_version="3.1"))["shape"] == "3.1"  # a hit
    assert asked == ["3.1", "3.2", "3", None]


async def test_a_surface_that_does_not_vary_shares_one_entry() -> None:
    app, asked = seller(varies=False)
    assert (await ask(app, "rest", adcp_version="3.1"))["shape"] == "3.1"
    assert (await ask(app, "rest", adcp_version="3.2"))["shape"] == "3.1"  # declared alike
    assert asked == ["3.1"]


@pytest.mark.parametrize("content_type", ["text/plain", None])
async def test_a_json_body_however_labelled_is_read_for_its_pin(content_type: str | None) -> None:
    app, asked = seller(varies=True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        for pin in ("3.0", None):
            body = json.dumps({"brief": "b", **({"adcp_version": pin} if pin else {})})
            headers = {"content-type": content_type} if content_type else {}
            await http.post("/api/get_products", content=body, headers=headers)
    assert asked == ["3.0", None]  # two entries: the unpinned buyer never gets 3.0's shape


async def test_an_unreadable_pin_keys_apart_and_odd_pins_never_crash() -> None:
    app, asked = seller(varies=True)
    padding = "x" * (1024 * 1024 + 10)  # past max_peek_bytes: the pin cannot be read
    for pins in ({"adcp_version": "3.0", "ext": {"pad": padding}}, {},
                 {"adcp_version": "3.0", "ext": {"pad": padding}}):  # fmt: skip
        await ask(app, "rest", **pins)
    assert asked == ["3.0", None, "3.0"]  # each unreadable one alone, never shared
    assert len(await app.cache.store.scan()) == 1  # and never stored: a flood fills nothing
    app, asked = seller(varies=True)
    odd = ["1e400", "true", "[3]", json.dumps("3." + "9" * 5000), '{"x": 1}', "3.1"]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        for pin in odd:  # as a hostile buyer writes them (1e400: past a double)
            body = '{"brief": "b", "adcp_version": ' + pin + "}"
            response = await http.post("/api/get_products", content=body)
            assert response.status_code == 200
    assert len(asked) == 6  # each odd pin its own key, and no crash


async def test_outside_the_middleware_nothing_is_pinned() -> None:
    policy = SurfacePolicy(name="get_products", varies_by_version=True)
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    with collect_advisories() as collector:
        assert collector.context.pinned_release() is None

        async def call() -> dict[str, Any]:
            return {"products": []}

        assert await cache.fetch(SUB_AGENT, "k", call, surface="get_products") == {"products": []}


def test_a_collector_given_its_request_reads_its_pin() -> None:
    from adcp_stale_cache.pipeline.context import UNREAD

    with collect_advisories(request={"adcp_version": "3.1"}) as collector:
        assert collector.context.pinned_release() == 'adcp_version="3.1"'
    with collect_advisories(request=["no", "request"]) as collector:
        assert collector.context.pinned_release() is UNREAD  # what cannot be read is never shared


async def test_a_refresh_reruns_nested_fetches_under_the_pin_that_made_them() -> None:
    """The control plane re-runs a remembered call later, outside any request: its nested
    fetches must key by the release the original request pinned, not by none."""
    from adcp_stale_cache.ops.control import CacheControl

    policy = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",),
                           shared_across_callers=True, varies_by_version=True)  # fmt: skip
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    control = CacheControl(cache)
    inner_calls: list[str | None] = []

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        pin = request.get("adcp_version")

        async def inner() -> dict[str, Any]:
            inner_calls.append(pin)
            return {"shape": pin}

        async def outer() -> dict[str, Any]:
            return {"shape": pin, "inner": await cache.fetch(Upstream(name="inner"), "i", inner)}

        return await cache.fetch(Upstream(name="outer"), "o", outer)

    async def rest(request: Request) -> Response:
        return JSONResponse(await answer(json.loads(await request.body())))

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", rest,
                                                          methods=["POST"])]),
                                  surfaces=cache.surfaces)  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        await http.post("/api/get_products", json={"adcp_version": "3.0"})
        await http.post("/api/get_products", json={})
        assert await control.refresh(upstream="outer") == 2
        for _ in range(100):  # the refreshes run in the background: until both are stored
            outers = [json.loads(e.data) for _, e in await cache.store.scan()
                      if "upstream=outer" in e.labels and not e.revalidate]  # fmt: skip
            if len(outers) == 2:
                break
            await asyncio.sleep(0.01)
    assert sorted(outers, key=str) == [{"inner": {"shape": "3.0"}, "shape": "3.0"},
                                       {"inner": {"shape": None}, "shape": None}]  # fmt: skip
