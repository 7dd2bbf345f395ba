"""An advisory counts as delivered only once the answer a buyer receives holds it.

Each test serves a stale entry through a real :class:`UpstreamCache` behind
``StaleAdvisoryMiddleware`` (an ASGI app over httpx's ASGI transport), then has the app answer
in a way that cannot carry the advisory: every such answer counts it in ``advisory_lost``
(not in ``stale_serve(advisory=True)``) and logs ``advisory_lost ... reason=<why>`` at
WARNING, with names and codes only. The fastmcp and SDK delivery points are tested with
their own suites (test_fastmcp_middleware, test_adcp_sdk).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..conftest import CountingMetrics

PRODUCTS = SurfacePolicy(
    name="get_products",
    field="products",
    paths=("/api/get_products",),
    freshness_target_seconds=0,
)
INVENTORY = Upstream(name="inventory", url="http://inventory.internal:8080/api")
CATALOGUE = Upstream(name="catalogue")


Answer = Callable[[UpstreamCache, Callable[[], Awaitable[Any]]], Awaitable[Response]]


async def stale_answer(
    answer: Answer,
    body: Any = None,
    *,
    max_peek_bytes: int | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[CountingMetrics, httpx.Response | None]:
    """Warm the cache, take the upstream down, and ask again: ``answer`` builds the second
    reply from the stale value. The metrics of the second request, and its answer (None when
    the app raised)."""
    metrics = CountingMetrics()
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS), metrics=metrics)
    state = {"up": True}

    async def load() -> Any:
        if not state["up"]:
            raise ConnectionRefusedError("inventory.internal:8080 refused, token=secret")
        return {"products": ["p1"]}

    async def fetch() -> Any:
        return await cache.fetch(INVENTORY, "all", load, surface="get_products")

    async def route(request: Request) -> Response:
        await request.body()
        if state["up"]:
            await fetch()
            return JSONResponse({"products": ["p1"]})
        return await answer(cache, fetch)

    app: Any = Starlette(
        routes=[
            Route("/api/get_products", route, methods=["POST"]),
            Route("/mcp", route, methods=["POST"]),
            Route("/a2a", route, methods=["POST"]),
        ]
    )
    options = {} if max_peek_bytes is None else {"max_peek_bytes": max_peek_bytes}
    app = StaleAdvisoryMiddleware(app, surfaces=cache.surfaces, **options)
    path = "/api/get_products"
    if isinstance(body, list) or (isinstance(body, dict) and body.get("method") == "tools/call"):
        path = "/mcp"
    elif isinstance(body, dict) and "method" in body:
        path = "/a2a"
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        await http.post(path, json=body or {}, headers=headers)
        state["up"] = False
        metrics.delivered = metrics.lost = metrics.stale = 0
        stale = await http.post(path, json=body or {}, headers=headers)
    return metrics, stale


def lost_line(caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    [record] = [r for r in caplog.records if r.getMessage().startswith("advisory_lost")]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "upstream=inventory surface=get_products" in message
    assert "code=CONNECTION_REFUSED" in message
    assert "inventory.internal" not in message and "secret" not in message
    return record


def tool_call(name: str = "get_products", **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def mcp_result(result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": 7, "result": result})


async def json_answer(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    return JSONResponse(await fetch())


async def text_answer(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    return Response(", ".join((await fetch())["products"]), media_type="text/plain")


async def failed_status(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    await fetch()
    return JSONResponse({"products": []}, status_code=500)


async def failed_task(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    products = (await fetch())["products"]
    failure = {"code": "INTERNAL_ERROR", "message": "failed"}
    return JSONResponse({"products": products, "adcp_error": failure})


async def compressed(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    body = json.dumps(await fetch()).encode()
    return Response(body, media_type="application/json", headers={"content-encoding": "br"})


async def is_error(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    text = f"no products: {(await fetch())['products']}"
    return mcp_result({"content": [{"type": "text", "text": text}], "isError": True})


async def not_json_tool(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    text = ", ".join((await fetch())["products"])
    return mcp_result({"content": [{"type": "text", "text": text}]})


async def rpc_error(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    await fetch()
    error = {"code": -32603, "message": "internal error"}
    return JSONResponse({"jsonrpc": "2.0", "id": 7, "error": error})


async def mcp_json(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    payload = await fetch()
    return mcp_result(
        {"structuredContent": payload, "content": [{"type": "text", "text": json.dumps(payload)}]}
    )


BATCHED = {**tool_call(), "id": 8}


async def batch(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    result = {"structuredContent": await fetch()}
    answers = [{"jsonrpc": "2.0", "id": id, "result": result} for id in (7, 8)]
    return JSONResponse(answers)


async def a2a_failed(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    products = (await fetch())["products"]
    artifact = {"artifactId": "a", "parts": [{"kind": "data", "data": {"products": products}}]}
    task = {
        "kind": "task",
        "id": "t",
        "contextId": "c",
        "status": {"state": "failed"},
        "artifacts": [artifact],
    }
    return JSONResponse({"jsonrpc": "2.0", "id": 5, "result": task})


async def sse_without_answer(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    await fetch()

    async def events() -> AsyncIterator[bytes]:
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
        yield b"event: message\r\ndata: " + json.dumps(note).encode() + b"\r\n\r\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def sse_answer(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    payload = await fetch()

    async def events() -> AsyncIterator[bytes]:
        message = {"jsonrpc": "2.0", "id": 7, "result": {"structuredContent": payload}}
        yield b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def fetch_while_streaming(
    cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]
) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"products": '
        yield json.dumps((await fetch())["products"]).encode() + b"}"

    return StreamingResponse(body(), media_type="application/json")


async def raises(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
    await fetch()
    raise RuntimeError("the tool failed after reading the cache")


A2A_SEND = {
    "jsonrpc": "2.0",
    "id": 5,
    "method": "message/send",
    "params": {
        "message": {
            "role": "user",
            "messageId": "m",
            "kind": "message",
            "parts": [{"kind": "data", "data": {"skill": "get_products", "parameters": {}}}],
        }
    },
}
SSE = {"accept": "application/json, text/event-stream"}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("answer", "body", "headers"),
    [
        (json_answer, None, None),
        (mcp_json, tool_call(), None),
        (sse_answer, tool_call(), SSE),
    ],
    ids=["json", "mcp", "mcp_sse"],
)
async def test_an_advisory_the_answer_carries_counts_as_delivered(
    answer: Answer, body: Any, headers: Any, caplog: pytest.LogCaptureFixture
) -> None:
    metrics, stale = await stale_answer(answer, body, headers=headers)
    assert stale is not None and "STALE_RESPONSE" in stale.text
    assert (metrics.delivered, metrics.lost, metrics.stale) == (1, 0, 1)
    assert not [r for r in caplog.records if r.getMessage().startswith("advisory_lost")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("answer", "body", "reason", "headers", "max_peek_bytes"),
    [
        pytest.param(text_answer, None, "not_json", None, None, id="not_json"),
        pytest.param(failed_status, None, "error_status", None, None, id="error_status"),
        pytest.param(failed_task, None, "failed_task", None, None, id="adcp_error"),
        pytest.param(compressed, None, "compressed", None, None, id="compressed"),
        pytest.param(is_error, tool_call(), "is_error", None, None, id="is_error"),
        pytest.param(not_json_tool, tool_call(), "not_json", None, None, id="tool_text"),
        pytest.param(rpc_error, tool_call(), "rpc_error", None, None, id="rpc_error"),
        pytest.param(
            mcp_json,
            tool_call("list_products"),
            "no_errors_member",
            None,
            None,
            id="no_errors_member",
        ),
        pytest.param(batch, [tool_call(), BATCHED], "batch", None, None, id="batch"),
        pytest.param(mcp_json, tool_call(pad="x" * 4096), "too_large", None, 1024, id="too_large"),
        pytest.param(a2a_failed, A2A_SEND, "failed_task", None, None, id="a2a_failed_task"),
        pytest.param(sse_without_answer, tool_call(), "after_start", SSE, None, id="sse_no_answer"),
        pytest.param(fetch_while_streaming, None, "after_start", None, None, id="after_start"),
        # Starlette answers an app that raised: a 500
        pytest.param(raises, None, "error_status", None, None, id="app_raised"),
    ],
)
async def test_an_advisory_the_answer_drops_counts_as_lost(
    answer: Answer,
    body: Any,
    reason: str,
    headers: Any,
    max_peek_bytes: int | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"):
        metrics, stale = await stale_answer(
            answer, body, headers=headers, max_peek_bytes=max_peek_bytes
        )
    assert stale is not None and "STALE_RESPONSE" not in stale.text
    assert (metrics.delivered, metrics.lost, metrics.stale) == (0, 1, 1)
    assert f"reason={reason}:" in lost_line(caplog).getMessage()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("dropped", [False, True], ids=["delivered", "dropped"])
async def test_a_value_built_on_stale_data_counts_where_its_answer_is_written(
    dropped: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The stale serve happened in a nested fetch (the flight's own collector): it counts
    once, in the request whose answer carries (or drops) it, never in the flight."""

    async def answer(cache: UpstreamCache, fetch: Callable[[], Awaitable[Any]]) -> Response:
        async def page() -> Any:
            return {"products": (await fetch())["products"]}

        value = await cache.fetch(CATALOGUE, "page", page, surface="get_products")
        if dropped:
            return Response(str(value), media_type="text/plain")
        return JSONResponse(value)

    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"):
        metrics, stale = await stale_answer(answer)
    assert stale is not None and ("STALE_RESPONSE" in stale.text) is not dropped
    assert (metrics.delivered, metrics.lost, metrics.stale) == (int(not dropped), int(dropped), 1)
    if dropped:
        assert "reason=not_json:" in lost_line(caplog).getMessage()


@pytest.mark.timeout(30)
async def test_an_advisory_of_a_request_answered_unavailable_counts_as_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One upstream served stale, another with nothing cached let ``UpstreamUnavailable``
    out: the middleware answers ``SERVICE_UNAVAILABLE``, which carries no advisory."""
    metrics = CountingMetrics()
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS), metrics=metrics)
    up = {"up": True}

    async def load() -> Any:
        if not up["up"]:
            raise ConnectionRefusedError
        return {"products": ["p1"]}

    async def nothing() -> Any:
        raise ConnectionRefusedError

    async def app(scope: Any, receive: Any, send: Any) -> None:  # a bare ASGI app
        await cache.fetch(INVENTORY, "all", load, surface="get_products")
        if not up["up"]:
            await cache.fetch(CATALOGUE, "all", nothing, surface="get_products")
        await JSONResponse({"products": ["p1"]})(scope, receive, send)

    wrapped = StaleAdvisoryMiddleware(app, surfaces=cache.surfaces)
    transport = httpx.ASGITransport(app=wrapped)
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"):
        async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
            await http.post("/api/get_products", json={})
            up["up"] = False
            metrics.delivered = metrics.lost = metrics.stale = 0
            answer = await http.post("/api/get_products", json={})
    assert answer.status_code == 503 and "STALE_RESPONSE" not in answer.text
    assert (metrics.delivered, metrics.lost, metrics.stale) == (0, 1, 1)
    assert "reason=no_answer:" in lost_line(caplog).getMessage()


def test_threads_recording_while_the_loop_settles_count_each_advisory_once() -> None:
    """Worker threads (``carry_context``, ``fetch_blocking``) record into a request's
    collector while its answer is settled and closed: each report is called exactly once."""
    policy = SurfacePolicy(name="get_products", field="products")
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes: races show
    try:
        run_races(policy)
    finally:
        sys.setswitchinterval(switching)


def run_races(policy: SurfacePolicy) -> None:
    from adcp_stale_cache.core.advisory import stale_response
    from adcp_stale_cache.pipeline.collector import AdvisoryCollector

    for _ in range(50):
        collector = AdvisoryCollector(policy, counted_at_delivery=True)
        fates: dict[int, list[object]] = {n: [] for n in range(400)}
        start = threading.Barrier(5)

        def records(
            first: int,
            collector: AdvisoryCollector = collector,
            start: threading.Barrier = start,
            fates: dict[int, list[object]] = fates,
        ) -> None:
            start.wait(5)
            for n in range(first, 400, 4):
                upstream = Upstream(name=f"u{n}")
                report = fates[n].append
                collector.record(upstream.name, stale_response(upstream, policy, 1, None), report)

        threads = [threading.Thread(target=records, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        start.wait(5)
        while any(thread.is_alive() for thread in threads):
            collector.delivered()
        collector.close()
        assert all(len(told) == 1 for told in fates.values()), {
            n: told for n, told in fates.items() if len(told) != 1
        }
