"""Bodies nested past what a parser or encoder holds (issue 32, 4): the app's own answer, or
the body untouched, never a 500. Each test failed before its fix (a ``RecursionError``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    Surfaces,
    Upstream,
    UpstreamUnavailable,
    current_collector,
    stale_response,
)
from adcp_stale_cache.codecs import Untouched
from adcp_stale_cache.codecs.json import NotJson, dumps, loads
from adcp_stale_cache.core.failures import Failure, FailureKind

from ..codecs.test_hardening import POLICY

#: 40 KB: past orjson's 1,024 levels and every stdlib's (3.13's C stack holds 10,000).
DEEP = b"[" * 20_000 + b"]" * 20_000
#: Read by orjson (under 1,024 levels), but past what orjson (255) and the package's stdlib
#: (STDLIB_DEPTH, 512, on every Python: 3.12's own holds 1,500) re-encode.
READABLE_DEEP = b"[" * 1000 + b"]" * 1000
DOWN = Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "Upstream refused the connection")
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_products",'


def app_of(endpoint: Any, path: str) -> StaleAdvisoryMiddleware:
    routes = [Route(path, endpoint, methods=["POST"])]
    return StaleAdvisoryMiddleware(Starlette(routes=routes), surfaces=Surfaces.of(POLICY))


async def post(app: StaleAdvisoryMiddleware, path: str, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # app exceptions raise: a 500 fails the test
    async with httpx.AsyncClient(transport=transport, base_url="http://s") as client:
        return await client.post(path, content=body, headers={"content-type": "application/json"})


def record_stale() -> None:
    collector = current_collector()
    assert collector is not None
    upstream = Upstream(name="inventory-service")
    collector.record(upstream.name, stale_response(upstream, POLICY, 12, None))


@pytest.mark.parametrize("path", ["/get_products", "/mcp"])
@pytest.mark.parametrize(
    "body", [DEEP, CALL + b'"arguments":{"context":' + DEEP + b"}}}"], ids=["bare", "in a call"]
)
async def test_a_body_nested_past_any_parser_keeps_the_apps_own_400(path: str, body: bytes) -> None:
    async def endpoint(request: Request) -> JSONResponse:
        raw = await request.body()
        try:
            json.loads(raw)
        except (ValueError, RecursionError):
            return JSONResponse({"error": "not JSON we read"}, status_code=400)
        record_stale()
        return JSONResponse({"products": []})

    answer = await post(app_of(endpoint, path), path, body)
    assert (answer.status_code, answer.json()) == (400, {"error": "not JSON we read"})


def test_the_one_json_reading_refuses_depth_as_not_json() -> None:
    with pytest.raises(NotJson):  # (a ValueError: callers answering bad input with 400)
        loads(DEEP)
    with pytest.raises(Untouched):
        dumps(loads(READABLE_DEEP))


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/get_products", b'{"products":[' + READABLE_DEEP + b'],"errors":[]}'),
        (
            "/mcp",
            b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"products":['
            + READABLE_DEEP
            + b'],"errors":[]},"isError":false}}',
        ),
    ],
    ids=["plain", "mcp"],
)
async def test_an_answer_nested_past_what_re_encodes_goes_out_untouched(
    path: str, body: bytes
) -> None:
    async def endpoint(request: Request) -> Response:
        await request.body()
        record_stale()
        return Response(body, media_type="application/json")

    request = CALL + b'"arguments":{}}}' if path == "/mcp" else b"{}"
    answer = await post(app_of(endpoint, path), path, request)
    assert (answer.status_code, answer.content) == (200, body)


async def test_a_context_nested_past_what_re_encodes_still_gets_its_503() -> None:
    async def seller(scope: Scope, receive: Receive, send: Send) -> None:
        await Request(scope, receive).body()
        raise UpstreamUnavailable(Upstream(name="inventory-service"), DOWN)

    app = StaleAdvisoryMiddleware(seller, surfaces=Surfaces.of(POLICY))
    body = b'{"context":' + READABLE_DEEP + b"}"
    answer = await post(app, "/get_products", body)
    assert answer.status_code == 503
    payload = answer.json()
    assert payload["adcp_error"]["code"] == "SERVICE_UNAVAILABLE" and "context" not in payload


def test_a_key_nested_past_the_stack_is_refused_with_the_clear_error() -> None:
    from adcp_stale_cache.core.keys import digest

    with pytest.raises(TypeError, match="exact cache key"):  # as every unkeyable value is
        digest([("get_products", loads(READABLE_DEEP))])


async def test_a_release_pin_nested_past_what_encodes_is_unread_never_a_500() -> None:
    from adcp_stale_cache import MemoryStore, UpstreamCache

    policy = POLICY.model_copy(update={"varies_by_version": True, "paths": ("/get_products",)})
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(policy))
    calls = []

    async def endpoint(request: Request) -> JSONResponse:
        await request.body()

        async def call() -> dict[str, Any]:
            calls.append(1)
            return {"products": [len(calls)]}

        return JSONResponse(
            await cache.fetch(Upstream(name="inventory"), "k", call, surface=policy)
        )

    app = StaleAdvisoryMiddleware(
        Starlette(routes=[Route("/get_products", endpoint, methods=["POST"])]),
        surfaces=Surfaces.of(policy),
    )
    body = b'{"adcp_version":' + READABLE_DEEP[10:-10] + b"}"  # 990 levels
    answers = [await post(app, "/get_products", body) for _ in range(2)]
    assert [a.json() for a in answers] == [{"products": [1]}, {"products": [2]}]  # not shared


def test_the_one_json_reading_keeps_long_integers_exact() -> None:
    """orjson reads an integer past 64 bits as a float: an MCP text mirror holding one no
    longer matched its structuredContent (found by test_fuzz_rewriter)."""
    assert loads(b"[-9223372036854775809, 18446744073709551616]") == [
        -9223372036854775809,
        18446744073709551616,
    ]
