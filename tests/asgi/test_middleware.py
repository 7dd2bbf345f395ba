"""StaleAdvisoryMiddleware on plain JSON routes."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adcp_stale_cache import (
    MemoryStore,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    current_collector,
    stale_response,
)
from adcp_stale_cache.core.failures import Failure
from adcp_stale_cache.core.policy import FailureKind

from ..conftest import CountingUpstream

PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
SURFACES = Surfaces.of(PRODUCTS)
TIMEOUT = Failure(FailureKind.TIMEOUT, "TIMEOUT", "Upstream did not answer within 1s")


def record(*names: str) -> None:
    collector = current_collector()
    assert collector is not None
    for name in names:
        advisory = stale_response(Upstream(name=name), collector.surface or PRODUCTS, 12, TIMEOUT)
        collector.record(name, advisory)


def make_app(
    body: bytes,
    *,
    status: int = 200,
    content_type: str = "application/json",
    stale: tuple[str, ...] = (),
    headers: dict[str, str] | None = None,
    chunks: int = 1,
    gzip_outside: bool = False,
    gzip_inside: bool = False,
    stale_headers: bool = True,
) -> Any:
    async def handler(request: Request) -> Response:
        record(*stale)
        if chunks > 1:
            step = max(1, len(body) // chunks)

            async def parts() -> Any:
                for i in range(0, len(body), step):
                    yield body[i : i + step]

            return StreamingResponse(
                parts(), status_code=status, media_type=content_type, headers=headers
            )
        return Response(body, status_code=status, media_type=content_type, headers=headers)

    routes = [Route("/api/get_products", handler, methods=["POST", "GET", "HEAD"])]
    middleware = []
    if gzip_outside:
        middleware.append(Middleware(GZipMiddleware, minimum_size=1))
    middleware.append(
        Middleware(StaleAdvisoryMiddleware, surfaces=SURFACES, stale_headers=stale_headers)
    )
    if gzip_inside:
        middleware.append(Middleware(GZipMiddleware, minimum_size=1))
    return Starlette(routes=routes, middleware=middleware)


async def call(
    app: Any, method: str = "POST", headers: dict[str, str] | None = None
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        return await client.request(method, "/api/get_products", headers=headers)


PAYLOAD = b'{"products": [{"product_id": "p1"}],  "context": {"correlation_id": "c"}}'


async def test_no_advisory_passes_through_byte_for_byte() -> None:
    bare = Starlette(
        routes=[
            Route(
                "/api/get_products",
                lambda r: Response(PAYLOAD, media_type="application/json"),
                methods=["POST"],
            )
        ]
    )
    wrapped = StaleAdvisoryMiddleware(bare, surfaces=SURFACES)
    plain, mounted = await call(bare), await call(wrapped)
    assert plain.content == mounted.content == PAYLOAD
    assert plain.headers.raw == mounted.headers.raw
    assert plain.status_code == mounted.status_code


async def test_advisories_appended_with_status_and_length_kept(assert_valid_advisory: Any) -> None:
    response = await call(make_app(PAYLOAD, stale=("inventory-service", "pricing")))
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    body = response.json()
    assert body["products"] == [{"product_id": "p1"}]
    assert body["context"] == {"correlation_id": "c"}
    assert "adcp_error" not in body
    assert [e["details"]["upstream"]["name"] for e in body["errors"]] == [
        "inventory-service",
        "pricing",
    ]
    for error in body["errors"]:
        assert_valid_advisory(error)
        assert error["field"] == "products"


async def test_existing_errors_are_kept_first() -> None:
    payload = json.dumps({"products": [], "errors": [{"code": "X", "message": "m"}]}).encode()
    body = (await call(make_app(payload, stale=("inv",)))).json()
    assert [e["code"] for e in body["errors"]] == ["X", "STALE_RESPONSE"]


async def test_body_split_across_messages_is_reassembled() -> None:
    response = await call(make_app(PAYLOAD, stale=("inv",), chunks=7))
    assert response.json()["errors"][0]["code"] == "STALE_RESPONSE"
    assert response.json()["products"] == [{"product_id": "p1"}]


@pytest.mark.parametrize(
    ("kwargs", "method"),
    [
        ({"status": 500}, "POST"),
        ({"status": 404}, "POST"),
        ({"content_type": "text/plain"}, "POST"),
        ({"headers": {"content-encoding": "br"}}, "POST"),
        ({}, "HEAD"),
    ],
)
async def test_ineligible_responses_pass_through(kwargs: dict[str, Any], method: str) -> None:
    app = make_app(PAYLOAD, stale=("inv",), **kwargs)
    response = await call(app, method)
    if method != "HEAD":
        assert response.content == PAYLOAD


@pytest.mark.parametrize(
    "payload",
    [
        b'[{"products": []}]',
        b'"just a string"',
        b'{"products": [], "errors": {"not": "a list"}}',
        b'{"adcp_error": {"code": "SERVICE_UNAVAILABLE", "message": "down"}}',
        b'{"products": [}',
        b"",
    ],
)
async def test_bad_or_fatal_payloads_pass_through_untouched(payload: bytes, caplog: Any) -> None:
    caplog.set_level("INFO", logger="adcp_stale_cache.middleware")
    response = await call(make_app(payload, stale=("inv",)))
    assert response.status_code == 200
    assert response.content == payload
    assert "advisory_lost" in caplog.text


async def test_never_writes_adcp_error() -> None:
    body = (await call(make_app(b"{}", stale=("inv",)))).json()
    assert set(body) == {"errors"}


async def test_inside_gzip_advisories_arrive_compressed_and_intact() -> None:
    app = make_app(PAYLOAD, stale=("inv",), gzip_outside=True)
    response = await call(app, headers={"accept-encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert response.json()["errors"][0]["code"] == "STALE_RESPONSE"


async def test_outside_gzip_passes_through_with_a_warning(caplog: Any) -> None:
    app = make_app(PAYLOAD, stale=("inv",), gzip_inside=True)
    response = await call(app, headers={"accept-encoding": "gzip"})
    raw = await _raw_body(app)
    assert gzip.decompress(raw) == PAYLOAD
    assert "errors" not in response.json()
    assert "Content-Encoding is set" in caplog.text


async def _raw_body(app: Any) -> bytes:
    messages: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/get_products",
        "headers": [(b"accept-encoding", b"gzip")],
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("t", 80),
        "root_path": "",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


async def test_no_advisory_streams_without_buffering() -> None:
    """With nothing recorded, each body message goes out as it comes (no buffering)."""
    seen: list[dict[str, Any]] = []

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"a":', "more_body": True})
        assert len(seen) == 2  # the first chunk already reached the server
        await send({"type": "http.response.body", "body": b"1}", "more_body": False})

    async def send(message: Any) -> None:
        seen.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    await StaleAdvisoryMiddleware(streaming)(
        {"type": "http", "method": "POST", "path": "/x", "headers": []}, receive, send
    )
    assert [m.get("body") for m in seen[1:]] == [b'{"a":', b"1}"]


async def test_requests_do_not_share_collectors() -> None:
    import asyncio

    async def handler(request: Request) -> Response:
        if request.query_params.get("stale"):
            record("inv")
        await asyncio.sleep(0.01)
        return JSONResponse({"products": []})

    app = StaleAdvisoryMiddleware(
        Starlette(routes=[Route("/api/get_products", handler)]), surfaces=SURFACES
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://s"
    ) as client:
        responses = await asyncio.gather(
            *(
                client.get("/api/get_products", params={"stale": "1"} if i % 2 else {})
                for i in range(40)
            )
        )
    for i, response in enumerate(responses):
        assert len(response.json().get("errors", [])) == (1 if i % 2 else 0)


async def test_huge_integers_survive_rewrite() -> None:
    payload = b'{"products": [], "n": 123456789012345678901234567890}'
    body = (await call(make_app(payload, stale=("inv",)))).content
    assert b"123456789012345678901234567890" in body
    assert json.loads(body)["errors"][0]["code"] == "STALE_RESPONSE"


@pytest.mark.parametrize(
    ("payload", "expected_errors"),
    [
        (b'{"products": [], "errors": null}', 1),
        (b"{}", 1),
        (b'  {"products": [1.5e300, -0.0, "\\u00e9"]}  \n', 1),
        (
            b'{"products": [], "errors": [{"code": "A", "message": "m", "n": 99999999999999999999}]}',
            2,
        ),
    ],
)
async def test_rewrites_keep_every_value(payload: bytes, expected_errors: int) -> None:
    body = (await call(make_app(payload, stale=("inv",)))).content
    original, rewritten = json.loads(payload), json.loads(body)
    assert len(rewritten["errors"]) == expected_errors
    rewritten["errors"] = rewritten["errors"][: expected_errors - 1] or None
    original["errors"] = original.get("errors") or None
    assert rewritten == original


async def test_event_stream_without_a_tool_call_passes_untouched() -> None:
    """A GET on the MCP endpoint (a long-lived SSE stream) carries no tool answer."""
    sent: list[Any] = []
    events = [
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/x"}\r\n\r\n',
        b": ping\r\n\r\n",
    ]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        record("inv")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/mcp",
        "headers": [(b"accept", b"text/event-stream")],
    }
    await StaleAdvisoryMiddleware(app, surfaces=SURFACES)(scope, receive, send)
    assert [m.get("body") for m in sent[1:]] == [*events, b""]


async def test_stale_json_answer_gets_age_and_cache_status() -> None:
    response = await call(make_app(PAYLOAD, stale=("inv", "pricing")))
    assert response.headers["age"] == "12"
    ttl = PRODUCTS.freshness_target_seconds - 12  # negative once past the target
    assert response.headers["cache-status"] == f"adcp-stale-cache; fwd=stale; ttl={ttl}"
    assert "age" not in (await call(make_app(PAYLOAD, stale=("inv",), stale_headers=False))).headers
    assert "age" not in (await call(make_app(PAYLOAD))).headers


async def test_declared_plain_route_is_not_read_as_json_rpc() -> None:
    """A body that looks like JSON-RPC on a declared plain route: the answer is plain JSON."""
    reply = b'{"jsonrpc": "2.0", "id": 1, "result": {"products": []}}'
    app = make_app(reply, stale=("inv",))
    transport = httpx.ASGITransport(app=app)
    call_body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}'
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        response = await client.post(
            "/api/get_products", content=call_body, headers={"content-type": "application/json"}
        )
    body = response.json()
    assert [e["field"] for e in body["errors"]] == ["products"]  # top level, the route's surface
    assert "errors" not in body["result"]
    assert response.headers["age"] == "12"


async def test_the_cache_gives_the_middleware_its_surfaces(clock: Any) -> None:
    """``cache=``: the surfaces are given once, to the cache; a stale serve on a declared
    path is told under that surface's field, with no surface named at the fetch."""
    formats = SurfacePolicy(
        name="list_creative_formats",
        field="formats",
        paths=("/api/list_creative_formats",),
        freshness_target_seconds=60,
        max_stale_seconds=3600,
    )
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(formats), clock=clock)
    upstream = CountingUpstream()

    async def handler(request: Request) -> JSONResponse:
        return JSONResponse(await cache.fetch(Upstream(name="creative"), "all", upstream))

    routes = [Route("/api/list_creative_formats", handler, methods=["POST"])]
    app = StaleAdvisoryMiddleware(Starlette(routes=routes), cache=cache)
    assert app.surfaces is cache.surfaces
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        assert (await client.post("/api/list_creative_formats")).json() == {"products": [1]}
        clock.advance(61)
        upstream.down = True
        body = (await client.post("/api/list_creative_formats")).json()
    assert body["products"] == [1]
    assert [(e["code"], e["field"]) for e in body["errors"]] == [("STALE_RESPONSE", "formats")]


def test_surfaces_given_twice_must_be_the_cache_s() -> None:
    cache = UpstreamCache(surfaces=SURFACES)
    app = Starlette()
    assert StaleAdvisoryMiddleware(app, cache=cache, surfaces=SURFACES).surfaces is SURFACES
    with pytest.raises(ValueError, match="pass cache= alone"):
        StaleAdvisoryMiddleware(app, cache=cache, surfaces=Surfaces.of(PRODUCTS))
