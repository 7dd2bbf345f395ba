"""A request's own objects (its collector, context, body reader, answer) form no reference
cycle: they are freed as the request ends, not left for the garbage collector (which cost a
pass-through request 3% of its time). A task that outlives its request still reads the
request's partition, fields and surface."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from adcp_stale_cache import StaleAdvisoryMiddleware, SurfacePolicy, Surfaces, ToolCall, Upstream
from adcp_stale_cache.core.advisory import stale_response
from adcp_stale_cache.core.failures import Failure, UpstreamUnavailable
from adcp_stale_cache.core.policy import FailureKind
from adcp_stale_cache.pipeline.collector import STATE_KEY, current_collector

PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
SURFACES = Surfaces.of(PRODUCTS)
TIMEOUT = Failure(FailureKind.TIMEOUT, "TIMEOUT", "Upstream did not answer within 1s")
PLAIN = json.dumps({"adcp_version": "3.0", "context": {"trace": "t"}}).encode()
MCP_CALL = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "get_products", "arguments": {"brief": "b"}}}).encode()  # fmt: skip


def app_of(stale: bool, **options: Any) -> Any:
    async def plain(request: Request) -> Response:
        await request.body()
        collector = current_collector()
        assert collector is not None
        collector.partition  # asked: the partition closure is spent  # noqa: B018
        if stale:
            record_stale()
        return JSONResponse({"products": [], "context": {"trace": "t"}})

    async def mcp(request: Request) -> Response:
        call = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": call["id"], "result": {"content": []}})

    async def events(request: Request) -> Response:  # streamable HTTP's usual answer
        call = await request.json()
        result = {"content": [{"type": "text", "text": '{"products": []}'}],
                  "structuredContent": {"products": []}, "isError": False}  # fmt: skip
        answer = {"jsonrpc": "2.0", "id": call["id"], "result": result}
        if stale:
            record_stale()

        async def stream() -> Any:
            yield b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def down(request: Request) -> Response:
        await request.body()
        raise UpstreamUnavailable(Upstream(name="inv"), TIMEOUT)

    routes = [Route("/api/get_products", plain, methods=["POST"]), Route("/mcp", mcp, methods=["POST"]),
              Route("/events", events, methods=["POST"]), Route("/down", down, methods=["POST"])]  # fmt: skip
    # Inside Starlette's error middleware, as app.add_middleware mounts it.
    ours = Middleware(StaleAdvisoryMiddleware, surfaces=SURFACES, **options)
    return Starlette(routes=routes, middleware=[ours])


def record_stale() -> None:
    collector = current_collector()
    assert collector is not None
    collector.record("inv", stale_response(Upstream(name="inv"), PRODUCTS, 12, TIMEOUT))


class ServerCycle:
    """What a server keeps per request, as uvicorn's ``RequestResponseCycle`` does: the scope,
    and ``receive`` and ``send`` as its own bound methods."""

    def __init__(self, scope: dict[str, Any], body: bytes) -> None:
        self.scope, self.body, self.sent = scope, body, list[Any]()

    async def receive(self) -> Any:
        if self.body is None:
            return {"type": "http.disconnect"}
        body, self.body = self.body, None
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(self, message: Any) -> None:
        self.sent.append(message)


async def ask(
    app: Any, path: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> list[Any]:
    scope = {"type": "http", "method": "POST", "path": path, "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), *headers], "http_version": "1.1",
             "scheme": "http", "server": ("seller", 80)}  # fmt: skip
    cycle = ServerCycle(scope, body)
    await app(scope, cycle.receive, cycle.send)
    return cycle.sent


def cyclic_garbage(requests: Callable[[], Any]) -> list[str]:
    """The type names of what ``requests`` left that only the garbage collector frees."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        asyncio.run(requests())
        gc.collect()
        return sorted({type(thing).__qualname__ for thing in gc.garbage})
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


@pytest.mark.parametrize(
    ("path", "body", "stale", "options", "status"),
    [
        ("/api/get_products", PLAIN, False, {}, 200),  # the pass-through
        ("/api/get_products", PLAIN, True, {}, 200),  # an advisory written into the answer
        ("/mcp", MCP_CALL, False, {}, 200),  # a JSON-RPC call, its surface read off the body
        ("/events", MCP_CALL, False, {}, 200),  # its answer an event stream
        ("/events", MCP_CALL, True, {}, 200),  # the same with an advisory
        ("/down", PLAIN, False, {}, 503),  # the upstream down, nothing stored
        ("/api/get_products", PLAIN, False, {"partition_from_call": lambda call: "p"}, 200),
        ("/api/get_products", PLAIN, False, {"partition": None}, 200),
    ],
    ids=[
        "pass-through",
        "advisory",
        "json-rpc",
        "event-stream",
        "event-stream-advisory",
        "unavailable",
        "partition-from-call",
        "unpartitioned",
    ],
)
def test_a_request_leaves_nothing_for_the_garbage_collector(
    path: str, body: bytes, stale: bool, options: dict[str, Any], status: int
) -> None:
    app = app_of(stale, **options)

    async def requests() -> None:
        for _ in range(3):
            sent = await ask(app, path, body)
            assert sent[0]["status"] == status
            if stale:
                assert b"STALE_RESPONSE" in b"".join(m.get("body", b"") for m in sent[1:])

    asyncio.run(requests())  # (first use: module-level caches filled outside the count)
    assert cyclic_garbage(requests) == []


def read_after_its_request(
    path: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = (), **options: Any
) -> dict[str, Any]:
    """Ask once; a task the route starts reads the request's collector once it is answered."""
    seen: dict[str, Any] = {}

    async def main() -> None:
        answered = asyncio.Event()
        late: list[asyncio.Task[None]] = []

        async def outlives() -> None:
            await answered.wait()
            collector = current_collector()
            assert collector is not None and collector.closed
            seen["partition"] = collector.partition
            seen["pin"] = collector.context.pinned_release()
            seen["surface"] = collector.surface

        async def route(request: Request) -> Response:
            await request.body()
            late.append(asyncio.create_task(outlives()))
            return JSONResponse({"products": []})

        routes = [Route(path, route, methods=["POST"])]
        app = StaleAdvisoryMiddleware(Starlette(routes=routes), surfaces=SURFACES, **options)
        await ask(app, path, body, headers)
        answered.set()
        await asyncio.wait_for(late[0], 5)

    asyncio.run(main())
    return seen


def test_a_task_outliving_its_request_reads_its_partition_fields_and_surface() -> None:
    states: list[dict[str, Any]] = []

    def partition(scope: Any) -> str:
        states.append(dict(scope.get("state", {})))
        return dict(scope["headers"])[b"x-tenant"].decode()

    seen = read_after_its_request(
        "/api/get_products", PLAIN, ((b"x-tenant", b"acme"),), partition=partition
    )
    assert seen["partition"] == "acme" and seen["pin"] == 'adcp_version="3.0"'
    assert seen["surface"] is PRODUCTS
    assert len(states) == 1 and STATE_KEY not in states[0]  # its scope, less its collector


def test_a_late_call_hook_still_sees_the_calls_tool() -> None:
    calls: list[ToolCall] = []

    def hook(call: ToolCall) -> str:
        calls.append(call)
        return "p"

    assert read_after_its_request("/mcp", MCP_CALL, partition_from_call=hook)["partition"] == "p"
    assert [(call.tool, call.arguments) for call in calls] == [("get_products", {"brief": "b"})]


def test_a_read_ahead_that_fails_still_ends_the_request() -> None:
    """``partition_from_call`` reads the body before the app runs: a client gone meanwhile
    fails that read, and the request's collector is closed and its objects freed all the
    same."""
    app = app_of(False, partition_from_call=lambda call: "p")
    collectors: list[Any] = []

    async def requests() -> None:
        scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/api/get_products",
                                 "root_path": "", "query_string": b"", "headers": []}  # fmt: skip

        async def receive() -> Any:
            collectors.append(scope["state"]["adcp_stale_cache"])
            raise OSError("client gone")

        async def send(message: Any) -> None:
            pass  # (Starlette's error middleware answers 500)

        with pytest.raises(OSError, match="client gone"):
            await app(scope, receive, send)

    assert cyclic_garbage(requests) == []
    assert collectors and collectors[0].closed
