"""Every answer's ``context`` is its own request's, whatever the cache served.

The leak: a seller forwards the buyer's request, ``context`` included, to an AdCP sub-agent,
which echoes it; the answer is cached; the seller returns it as its own answer. The next
buyer then reads the first buyer's ``correlation_id``. The middleware mends it on every
transport (a declared JSON route, MCP ``tools/call`` answered in JSON or as events, A2A
``SendMessage`` and ``SendStreamingMessage``), counts it and
says so once; an answer whose context is already right passes byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from uuid import uuid4

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adcp_stale_cache import StaleAdvisoryMiddleware, SurfacePolicy, Surfaces, Upstream
from adcp_stale_cache.core.advisory import stale_response
from adcp_stale_cache.pipeline.cache import UpstreamCache
from adcp_stale_cache.stores import MemoryStore

from ..conftest import FakeClock

PRODUCTS = SurfacePolicy(
    name="get_products", field="products", paths=("/api/get_products",),
    shared_across_callers=True, freshness_target_seconds=60,
)  # fmt: skip
SUB_AGENT = Upstream(name="sub-seller")
TRANSPORTS = ["rest", "mcp", "mcp-sse", "a2a", "a2a-stream"]


def seller(*, echo: bool) -> tuple[Starlette, StaleAdvisoryMiddleware, list[dict[str, Any]]]:
    """A seller answering get_products with its sub-agent's cached answer; ``echo``: it
    sets the request's own context on the answer (as it should)."""
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PRODUCTS))
    asked: list[dict[str, Any]] = []

    async def sub_agent(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"products": [{"product_id": "p1"}], "context": request.get("context")}

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        cached = await cache.fetch(SUB_AGENT, "products", lambda: sub_agent(request))
        if echo:
            return {**cached, "context": request.get("context")}
        return cached  # the sub-agent's answer as it is: its context is the first buyer's

    async def rest(request: Request) -> Response:
        return JSONResponse(await answer(await request.json()))

    async def rpc(request: Request) -> Response:
        message = await request.json()
        params = message["params"]
        if message["method"] == "SendStreamingMessage":  # an artifact, then the final status
            [part] = params["message"]["parts"]
            payload = await answer(part["data"]["parameters"])
            events = [
                {"artifactUpdate": {"taskId": "t", "artifact": {"parts": [{"data": payload}]}}},
                {"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"},
                                  "final": True}},
            ]  # fmt: skip
            return sse(message["id"], events)
        if message["method"] == "tools/call":
            payload = await answer(params["arguments"])
            result: dict[str, Any] = {
                "content": [{"type": "text", "text": json.dumps(payload)}],
                "structuredContent": payload, "isError": False,
            }  # fmt: skip
        else:
            [part] = params["message"]["parts"]
            payload = await answer(part["data"]["parameters"])
            result = {"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
                               "artifacts": [{"parts": [{"data": payload}]}]}}  # fmt: skip
        if request.headers.get("accept") == "text/event-stream":
            return sse(message["id"], [result])
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def sse(id_: Any, results: list[dict[str, Any]]) -> Response:
        events = (json.dumps({"jsonrpc": "2.0", "id": id_, "result": r}) for r in results)
        body = "".join(f"event: message\ndata: {event}\n\n" for event in events)
        return Response(body, media_type="text/event-stream")

    app = Starlette(routes=[Route("/api/get_products", rest, methods=["POST"]),
                            Route("/rpc", rpc, methods=["POST"])])  # fmt: skip
    middleware = StaleAdvisoryMiddleware(app, surfaces=cache.surfaces)
    return app, middleware, asked


async def ask(middleware: Any, transport: str, context: Any) -> tuple[dict[str, Any], bytes]:
    request: dict[str, Any] = {"buying_mode": "brief", "brief": "b"}
    if context is not None:
        request["context"] = context
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=middleware), base_url="http://seller"
    ) as http:
        if transport == "rest":
            response = await http.post("/api/get_products", json=request)
            return response.json(), response.content
        if transport in ("mcp", "mcp-sse"):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "get_products", "arguments": request}}  # fmt: skip
            sse = {"accept": "text/event-stream"} if transport == "mcp-sse" else {}
            response = await http.post("/rpc", json=body, headers=sse)
            result = events(response)[0] if sse else response.json()["result"]
            assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
            return result["structuredContent"], response.content
        message = {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [
            {"data": {"skill": "get_products", "parameters": request}}]}  # fmt: skip
        method = "SendStreamingMessage" if transport == "a2a-stream" else "SendMessage"
        body = {"jsonrpc": "2.0", "id": 2, "method": method, "params": {"message": message}}
        response = await http.post("/rpc", json=body)
        if transport == "a2a-stream":
            artifact, status = events(response)
            assert status["statusUpdate"]["final"] is True
            return artifact["artifactUpdate"]["artifact"]["parts"][0]["data"], response.content
        parts = response.json()["result"]["task"]["artifacts"][0]["parts"]
        return parts[0]["data"], response.content


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC results of an event stream, in order."""
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    return [json.loads(line)["result"] for line in lines]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_cached_answer_never_carries_another_buyers_context(
    transport: str, caplog: Any
) -> None:
    _, middleware, asked = seller(echo=False)
    first, _ = await ask(middleware, transport, {"correlation_id": "buyer-a"})
    assert first["context"] == {"correlation_id": "buyer-a"}  # its own, from the call itself
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        second, _ = await ask(middleware, transport, {"correlation_id": "buyer-b"})
        third, _ = await ask(middleware, transport, None)
        fourth, _ = await ask(middleware, transport, {"correlation_id": "buyer-d"})
    assert len(asked) == 1  # one upstream call: the rest were cache hits
    assert second["context"] == {"correlation_id": "buyer-b"}
    assert "context" not in third  # none asked for: none given, least of all buyer a's
    assert fourth["context"] == {"correlation_id": "buyer-d"}
    assert second["products"] == first["products"]  # nothing else touched
    assert middleware.contexts_replaced == 3
    said = [r for r in caplog.records if "answer_context_replaced" in r.getMessage()]
    assert len(said) == 1  # once, not per answer


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_answer_with_its_own_context_passes_byte_for_byte(transport: str) -> None:
    app, middleware, _ = seller(echo=True)
    await ask(middleware, transport, {"correlation_id": "buyer-a"})
    _, through = await ask(middleware, transport, {"correlation_id": "buyer-b"})

    # The same request straight to the app, without the middleware: the same bytes.
    class Bare:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await app(scope, receive, send)

    _, bare = await ask(Bare(), transport, {"correlation_id": "buyer-b"})
    assert through == bare
    assert middleware.contexts_replaced == 0


# Hostile review: every way the request's context could go unread, and values kept as text.


async def _post(
    app: Any, content: bytes, headers: dict[str, str], path: str = "/api/get_products"
) -> Any:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://seller") as http:  # fmt: skip
        return await http.post(path, content=content, headers=headers)


@pytest.mark.parametrize("content_type", ["text/plain", None])
async def test_a_json_request_however_labelled_gets_its_own_context(
    content_type: str | None,
) -> None:
    _, middleware, _ = seller(echo=False)
    await ask(middleware, "rest", {"correlation_id": "buyer-a"})
    body = json.dumps({"brief": "b", "context": {"correlation_id": "buyer-b"}}).encode()
    headers = {"content-type": content_type} if content_type else {}
    answer = (await _post(middleware, body, headers)).json()
    assert answer["context"] == {"correlation_id": "buyer-b"}


async def test_an_unreadable_request_never_gets_another_buyers_context() -> None:
    """Too large to read (max_peek_bytes), or never read by the app: its own context is
    unknown, so the one the cache served goes."""
    _, middleware, _ = seller(echo=False)
    await ask(middleware, "rest", {"correlation_id": "buyer-a"})
    padded = {"brief": "b", "ext": {"pad": "x" * (1024 * 1024 + 1)},
              "context": {"correlation_id": "buyer-b"}}  # fmt: skip
    answer = (await _post(middleware, json.dumps(padded).encode(), {})).json()
    assert "context" not in answer and answer["products"]


async def test_each_answer_of_a_batch_gets_its_own_calls_context() -> None:
    calls = [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "get_products", "arguments": {"context": {"correlation_id": f"b-{i}"}}}}
        for i in (1, 2)]  # fmt: skip

    # A batch reaches one route answering each message, each from a value holding "a".
    async def batch_route(request: Request) -> Response:
        answers = []
        for call in await request.json():
            payload = {"products": [{"product_id": "p1"}], "context": {"correlation_id": "a"}}
            result = {"content": [], "structuredContent": payload, "isError": False}
            answers.append({"jsonrpc": "2.0", "id": call["id"], "result": result})
        collector = request.scope["state"]["adcp_stale_cache"]
        collector.traced().served_context = True  # as when the cache served a value holding one
        return JSONResponse(answers)

    wrapped = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", batch_route,
                                                              methods=["POST"])]))  # fmt: skip
    response = await _post(
        wrapped, json.dumps(calls).encode(), {"content-type": "application/json"}, "/rpc"
    )
    contexts = [m["result"]["structuredContent"]["context"] for m in response.json()]
    assert contexts == [{"correlation_id": "b-1"}, {"correlation_id": "b-2"}]


async def test_an_a2a_call_in_a_text_part_is_read_for_its_context() -> None:
    from adcp_stale_cache.codecs.jsonrpc import parse_calls

    text = json.dumps({"skill": "get_products", "parameters": {"context": {"correlation_id": "t"}}})
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                       "params": {"message": message}}).encode()  # fmt: skip
    [call] = parse_calls(body)
    assert (call.surface, call.context) == ("get_products", {"correlation_id": "t"})
    two = {**message, "parts": [{"text": text}, {"data": json.loads(text)}]}  # ambiguous
    [ambiguous] = parse_calls(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                          "params": {"message": two}}).encode())  # fmt: skip
    assert ambiguous.surface is None  # as the adcp SDK server reads it: no invocation


async def test_a_value_kept_as_text_is_checked_for_its_context() -> None:
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PRODUCTS))

    async def route(request: Request) -> Response:
        asked = await request.json()

        async def sub_agent() -> str:  # the sub-agent's answer, kept as the text it was
            return json.dumps({"products": [{"product_id": "p1"}], "context": asked.get("context")})

        return Response(await cache.fetch(SUB_AGENT, "text", sub_agent),
                        media_type="application/json")  # fmt: skip

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]),
                                  surfaces=cache.surfaces)  # fmt: skip
    for buyer in ("buyer-a", "buyer-b"):
        body = json.dumps({"context": {"correlation_id": buyer}}).encode()
        answer = (await _post(app, body, {"content-type": "application/json"})).json()
        assert answer["context"] == {"correlation_id": buyer}


async def test_a_null_context_is_no_context_and_unchanged_answers_keep_their_headers() -> None:
    _, middleware, _ = seller(echo=False)
    await ask(middleware, "rest", {"correlation_id": "buyer-a"})
    body = json.dumps({"brief": "b", "context": None}).encode()
    answer = (await _post(middleware, body, {"content-type": "application/json"})).json()
    assert "context" not in answer

    async def route(request: Request) -> Response:
        await request.body()
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        return Response(b'{"products": [], "context": {"correlation_id": "c"}}',
                        headers={"age": "42", "cache-status": "edge; hit"},
                        media_type="application/json")  # fmt: skip

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    body = json.dumps({"context": {"correlation_id": "c"}}).encode()
    response = await _post(app, body, {"content-type": "application/json"})
    assert response.headers["age"] == "42" and response.headers["cache-status"] == "edge; hit"
    assert response.content == b'{"products": [], "context": {"correlation_id": "c"}}'


DEEP = b"[" * 600 + b"]" * 600  # past what the stdlib re-encodes (orjson reads it)


@pytest.mark.parametrize(
    "answer",
    [
        b'{"cpm": NaN, "context": {"correlation_id": "a"}}',
        # Found by a review (session 44): these went out silently, no WARNING.
        b'{"x": ' + DEEP + b', "context": {"correlation_id": "a"}}',  # re-encoding fails
        b'{"n": 123456789012345678901, "x": ' + DEEP + b', "context": {"correlation_id": "a"}}',
        # Found by a review (session 44): nested past any reading, it went unsaid.
        b'{"x": ' + b"[" * 1030 + b"]" * 1030 + b', "context": {"correlation_id": "b"}}',
    ],
    ids=["nan", "deep", "deep-long-number", "too-deep-to-read"],
)
@pytest.mark.parametrize("stale", [False, True], ids=["context-only", "with-advisory"])
async def test_a_foreign_context_that_cannot_be_mended_is_said_loudly(
    caplog: Any, answer: bytes, stale: bool
) -> None:
    async def route(request: Request) -> Response:
        await request.body()
        collector = request.scope["state"]["adcp_stale_cache"]
        collector.traced().served_context = True
        if stale:
            policy = SurfacePolicy(name="get_products", field="products")
            collector.record(
                "inventory", stale_response(Upstream(name="inventory"), policy, 12, None)
            )
        return Response(answer, media_type="application/json")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        body = json.dumps({"context": {"correlation_id": "b"}}).encode()
        response = await _post(app, body, {"content-type": "application/json"})
    assert response.content == answer  # as it came: no re-encoding could keep it exact
    assert any("answer_context_not_mended" in r.getMessage() for r in caplog.records)
    assert app.contexts_replaced == 0  # none was


# Second hostile pass: JSON-RPC read as servers read it, any answer label, joined flights.


def rpc_seller(answer_payload: dict[str, Any], *, media_type: str = "application/json") -> Any:
    """A route answering every JSON-RPC message of a request (a batch too) with
    ``answer_payload`` as an MCP tool result, after the cache served a value with a context."""

    async def route(request: Request) -> Response:
        body = await request.body()
        messages = json.loads(body.decode("utf-8-sig"))
        single = not isinstance(messages, list)
        answers = []
        for message in [messages] if single else messages:
            result = {"content": [], "structuredContent": dict(answer_payload), "isError": False}
            if message.get("method") == "ping":
                result = {}
            answers.append({"jsonrpc": "2.0", "id": message["id"], "result": result})
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        out = answers[0] if single else answers
        text = json.dumps(out)  # (ids past 64 bits kept exactly, as a Python server does)
        return Response(text, media_type=media_type)

    return StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


LEAKED = {"products": [{"product_id": "p1"}], "context": {"correlation_id": "buyer-a-secret"}}


def call(id_: Any, correlation: str = "buyer-b") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {
        "name": "get_products", "arguments": {"context": {"correlation_id": correlation}}}}  # fmt: skip


def structured(response: httpx.Response) -> list[Any]:
    answers = response.json()
    answers = answers if isinstance(answers, list) else [answers]
    return [a["result"].get("structuredContent", {}).get("context") for a in answers]


@pytest.mark.parametrize("batch", [False, True], ids=["one-call", "batch"])
async def test_an_rpc_answer_in_doubt_that_cannot_be_rewritten_is_said_loudly(
    caplog: Any, batch: bool
) -> None:
    """Found by a review (session 44): an MCP answer holding another buyer's context, nested
    past what re-encodes, went out with no WARNING (and counted as mended)."""
    app = rpc_seller({**LEAKED, "x": nested(600)})
    request = [call(1), call(2, "buyer-c")] if batch else call(1)
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        response = await _post(app, json.dumps(request).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" in response.content  # as it came: it cannot be mended
    assert any("answer_context_not_mended" in r.getMessage() for r in caplog.records)
    assert app.contexts_replaced == 0  # none was


async def test_a_streamed_answer_in_doubt_that_cannot_be_rewritten_is_said_loudly(
    caplog: Any,
) -> None:
    """The same over an event stream: codecs/stream.py told only advisories' failures."""

    async def route(request: Request) -> Response:
        message = json.loads(await request.body())
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        result = {"content": [], "structuredContent": {**LEAKED, "x": nested(600)}}
        data = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return Response(f"event: message\ndata: {data}\n\n", media_type="text/event-stream")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" in response.content  # as it came: it cannot be mended
    assert any("answer_context_not_mended" in r.getMessage() for r in caplog.records)
    assert app.contexts_replaced == 0


@pytest.mark.parametrize("batch", [
    [{"jsonrpc": "2.0", "id": 7, "method": "ping"}, call(7)],  # a reused id, first a ping
    [{"jsonrpc": "2.0", "id": True, "method": "ping"}, call(1)],  # true is not 1
])  # fmt: skip
async def test_a_reused_id_hides_no_answer(batch: list[dict[str, Any]]) -> None:
    response = await _post(rpc_seller(LEAKED), json.dumps(batch).encode(),
                           {"content-type": "application/json"}, "/rpc")  # fmt: skip
    contexts = [c for c in structured(response) if c is not None]
    assert {"correlation_id": "buyer-a-secret"} not in contexts


@pytest.mark.parametrize("body", [
    json.dumps(call(1)).replace('"jsonrpc"', '"json\\u0072pc"').encode(),  # escaped key
    b"\xef\xbb\xbf" + json.dumps(call(1)).encode(),  # a UTF-8 BOM
    json.dumps(call(18446744073709551617)).encode(),  # an id past 64 bits
])  # fmt: skip
async def test_json_rpc_read_as_a_server_reads_it(body: bytes) -> None:
    response = await _post(rpc_seller(LEAKED), body, {"content-type": "application/json"}, "/rpc")
    assert structured(response) == [{"correlation_id": "buyer-b"}]


@pytest.mark.parametrize("media_type", ["text/plain", "text/json", "application/octet-stream"])
async def test_an_answer_labelled_otherwise_is_read_as_json_when_in_doubt(media_type: str) -> None:
    async def route(request: Request) -> Response:
        await request.body()
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        return Response(json.dumps(LEAKED), media_type=media_type)

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    body = json.dumps({"context": {"correlation_id": "buyer-b"}}).encode()
    answer = (await _post(app, body, {"content-type": "application/json"})).json()
    assert answer["context"] == {"correlation_id": "buyer-b"}


async def test_a_joined_flight_not_stored_is_searched_for_a_context_anywhere() -> None:
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PRODUCTS))
    release = asyncio.Event()

    async def route(request: Request) -> Response:
        asked = await request.json()

        async def sub_agent() -> dict[str, Any]:
            await release.wait()
            return {"result": {"products": [], "context": asked.get("context")}}  # nested

        value = await cache.fetch(SUB_AGENT, "k", sub_agent, cacheable=lambda v: False)
        return JSONResponse({"products": [], "context": value["result"]["context"]})

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]),
                                  surfaces=cache.surfaces)  # fmt: skip

    async def as_(buyer: str) -> Any:
        body = json.dumps({"context": {"correlation_id": buyer}}).encode()
        return (await _post(app, body, {"content-type": "application/json"})).json()

    first = asyncio.ensure_future(as_("buyer-a"))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(as_("buyer-b"))  # joins buyer a's flight
    await asyncio.sleep(0.05)
    release.set()
    assert (await first)["context"] == {"correlation_id": "buyer-a"}
    assert (await second)["context"] == {"correlation_id": "buyer-b"}


async def test_a_context_served_after_the_answer_started_is_said(caplog: Any) -> None:
    from starlette.responses import StreamingResponse

    async def route(request: Request) -> Response:
        await request.body()
        collector = request.scope["state"]["adcp_stale_cache"]

        async def parts() -> Any:
            yield b'{"products": [], '
            collector.traced().served_context = True  # the cache served it mid-stream
            yield b'"context": {"correlation_id": "buyer-a"}}'

        return StreamingResponse(parts(), media_type="application/json")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        await _post(app, b'{"context": {"correlation_id": "buyer-b"}}', {})
    assert any("answer_context_unchecked" in r.getMessage() for r in caplog.records)


def null_context_seller(
    clock: FakeClock,
) -> tuple[StaleAdvisoryMiddleware, UpstreamCache, dict[str, bool]]:
    """A FastAPI-style seller whose response model writes every unset field as null
    (``"context": null``, ``"errors": null``), over a cached upstream answer holding a
    ``context`` (so the middleware checks the answer's)."""
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    upstream = {"up": True}

    async def inventory() -> dict[str, Any]:
        if not upstream["up"]:
            raise ConnectionRefusedError(111, "refused")
        return {"products": [{"product_id": "p1"}], "context": None}

    async def route(request: Request) -> Response:
        await request.body()
        cached = await cache.fetch(SUB_AGENT, "products", inventory)
        return JSONResponse({"products": cached["products"], "context": None, "errors": None})

    app = Starlette(routes=[Route("/api/get_products", route, methods=["POST"])])
    return StaleAdvisoryMiddleware(app, surfaces=cache.surfaces), cache, upstream


@pytest.mark.parametrize("request_context", [None, {"correlation_id": "c"}], ids=["none", "own"])
async def test_a_null_context_answer_is_never_foreign(
    request_context: Any, caplog: Any, clock: FakeClock
) -> None:
    middleware, _, upstream = null_context_seller(clock)
    body = json.dumps({"brief": "b", "context": request_context}).encode()
    headers = {"content-type": "application/json"}
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"):
        await _post(middleware, body, headers)  # stored
        fresh = await _post(middleware, body, headers)  # served from the store
        upstream["up"] = False
        clock.advance(61)
        stale = await _post(middleware, body, headers)
    assert fresh.content == b'{"products":[{"product_id":"p1"}],"context":null,"errors":null}'
    answer = stale.json()
    assert "context" in answer and answer["context"] is None  # rewritten, null kept
    assert [e["code"] for e in answer["errors"]] == ["STALE_RESPONSE"]
    assert middleware.contexts_replaced == 0
    assert not [r for r in caplog.records if "answer_context" in r.getMessage()]


def deep_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


DEEP_ANSWERS = {  # what the app answers: each holds a value nested past Python's stack
    "context": b'{"products": [], "context": %s}',
    "rpc-id": b'{"jsonrpc": "2.0", "id": %s, "result": {"structuredContent": {}}}',
    "rpc-context": b'{"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"context": %s}}}',
    "a2a-kind": b'{"jsonrpc": "2.0", "id": 1, "result": {"kind": %s}}',
    "a2a-skill": b'{"jsonrpc": "2.0", "id": 1, "result": {}}',
}
DEEP_REQUESTS = {  # and what the buyer asked
    "context": b'{"context": %s}',
    "rpc-id": b'{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": "n"}}',
    "rpc-context": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
    b'"params": {"name": "n", "arguments": {"context": %s}}}',
    "a2a-kind": b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
    b'{"parts": [{"data": {"skill": "s", "parameters": {"context": {}}}}]}}, "x": %s}',
    "a2a-skill": b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
    b'{"parts": [{"data": {"skill": %s}}]}}}',
}


@pytest.mark.parametrize("where", list(DEEP_ANSWERS))
async def test_a_value_nested_past_the_stack_is_read_not_a_500(where: str) -> None:
    """Found by a review (session 44): a context nested about 1,000 deep, echoed by the app,
    made the comparison recurse past Python's limit: a 500. JSON-RPC ids, A2A kinds and
    skills too (found looking for the same pattern)."""
    deep = deep_json(1015)  # orjson reads 1,024 levels; Python's == and str() recursed at 1,000

    async def route(request: Request) -> Response:
        await request.body()
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        return Response(DEEP_ANSWERS[where].replace(b"%s", deep), media_type="application/json")

    app = StaleAdvisoryMiddleware(Starlette(routes=[
        Route("/api/get_products", route, methods=["POST"]),
        Route("/rpc", route, methods=["POST"])]))  # fmt: skip
    path = "/api/get_products" if where == "context" else "/rpc"
    json_ = {"content-type": "application/json"}
    response = await _post(app, DEEP_REQUESTS[where].replace(b"%s", deep), json_, path=path)
    assert response.status_code == 200
    assert response.content == DEEP_ANSWERS[where].replace(b"%s", deep)  # nothing to mend


def mcp_answer(result: dict[str, Any], *, events: bool = False, batch: bool = False) -> Any:
    """A route answering each tools/call of a request with ``result`` (a JSON text, so that
    what the stdlib writes goes out as written), after the cache served a context."""

    async def route(request: Request) -> Response:
        body = json.loads(await request.body())
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        answers = [f'{{"jsonrpc": "2.0", "id": {m["id"]}, "result": {result}}}'
                   for m in (body if batch else [body])]  # fmt: skip
        if events:
            return Response(f"event: message\ndata: {answers[0]}\n\n",
                            media_type="text/event-stream")  # fmt: skip
        text = f"[{', '.join(answers)}]" if batch else answers[0]
        return Response(text, media_type="application/json")

    return StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))


SECRET = '{"correlation_id": "buyer-a-secret"}'
OWN = '{"correlation_id": "buyer-b"}'
MIRROR_RESULTS = {  # each: an MCP result holding %s as its payload's context
    # Found by a review (session 44): a mirror no re-encoding keeps exact, then none at all.
    "mirror-long-float": '{"structuredContent": {"cpm": 1.5, "context": %s}, "content": [{"type": '
    '"text", "text": "{\\"cpm\\": 1.50000000000000000001, \\"context\\": %s}"}]}',
    "two-text-blocks": '{"content": [{"type": "text", "text": "{\\"context\\": %s}"}, '
    '{"type": "text", "text": "{\\"products\\": [], \\"context\\": %s}"}]}',
    # Found looking for the same pattern: a NaN on JSON-RPC (the plain-JSON one was said).
    "nan": '{"structuredContent": {"cpm": NaN, "context": %s}}',
    "too-deep-to-read": '{"structuredContent": {"x": '
    + "[" * 1030
    + "]" * 1030
    + ', "context": %s}}',
}


def escaped(context: str, result: str) -> str:
    """``result`` holding ``context`` (escaped where it sits in a JSON text)."""
    inner = context.replace('"', '\\"')
    return result.replace('\\"context\\": %s', f'\\"context\\": {inner}').replace("%s", context)


SHAPES_AND_HOWS = [(shape, how) for shape in MIRROR_RESULTS
                   for how in ("one-call", "batch", "events")]  # fmt: skip


@pytest.mark.parametrize(("shape", "how"), SHAPES_AND_HOWS)
@pytest.mark.parametrize("whose", ["another", "own"])
async def test_an_mcp_answer_that_cannot_be_mended_is_said_loudly(
    caplog: Any, shape: str, how: str, whose: str
) -> None:
    """Each answer goes as it came (nothing could be rewritten exactly); when it holds another
    buyer's context, ``answer_context_not_mended`` says so, and only then (an answer too deep
    to read cannot be compared: said whoever's it is)."""
    result = escaped(SECRET if whose == "another" else OWN, MIRROR_RESULTS[shape])
    app = mcp_answer(result, events=how == "events", batch=how == "batch")
    request = [call(1), call(2)] if how == "batch" else call(1)
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache.middleware"):
        response = await _post(app, json.dumps(request).encode(), {}, path="/rpc")
    said = [r for r in caplog.records if "answer_context_not_mended" in r.getMessage()]
    assert response.status_code == 200 and app.contexts_replaced == 0
    assert (b"buyer-a-secret" in response.content) == (whose == "another")  # as it came
    assert bool(said) == (whose == "another" or shape == "too-deep-to-read")
    if shape == "too-deep-to-read":  # not "another request's": it could not be told
        assert all("a context that cannot be compared" in r.getMessage() for r in said)


@pytest.mark.parametrize("twice", [
    b'"context": {"correlation_id": "a"}, "context": {"correlation_id": "b"}',
    b'"context": {"correlation_id": "a"}, "con\\u0074ext": {"correlation_id": "b"}',
], ids=["plain", "escaped"])  # fmt: skip
async def test_a_context_named_twice_goes_out_once_its_own(twice: bytes) -> None:
    """Found by a review (session 44): the last of two ``context`` members, the request's own,
    is what orjson reads, so the answer went as it came; a client keeping the first read
    another buyer's."""

    async def route(request: Request) -> Response:
        await request.body()
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        return Response(b'{"products": [], ' + twice + b"}", media_type="application/json")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    body = json.dumps({"context": {"correlation_id": "b"}}).encode()
    response = await _post(app, body, {"content-type": "application/json"})
    pairs = json.loads(response.content, object_pairs_hook=list)
    assert [value for key, value in pairs if key == "context"] == [[("correlation_id", "b")]]
    assert response.headers["content-length"] == str(len(response.content))
    assert app.contexts_replaced == 1


async def test_every_answer_under_a_reused_id_gets_its_context_advisory_or_not() -> None:
    """Found by a review (session 44): with an advisory to deliver, the second answer under
    the call's id kept another buyer's context."""

    async def route(request: Request) -> Response:
        message = json.loads(await request.body())
        collector = request.scope["state"]["adcp_stale_cache"]
        collector.traced().served_context = True
        policy = SurfacePolicy(name="get_products", field="products")
        collector.record("inventory", stale_response(Upstream(name="inventory"), policy, 12, None))
        result = {"content": [], "structuredContent": LEAKED, "isError": False}
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        return JSONResponse([answer, answer])

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))
    response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    assert structured(response) == [{"correlation_id": "buyer-b"}] * 2
    codes = [[e["code"] for e in a["result"]["structuredContent"].get("errors", [])]
             for a in response.json()]  # fmt: skip
    assert codes == [["STALE_RESPONSE"], []]  # the advisory goes to one answer


def served_in_doubt(request: Request, *, advisory: bool) -> None:
    """Mark ``request`` served a value holding a context, and record a stale advisory if
    ``advisory``."""
    collector = request.scope["state"]["adcp_stale_cache"]
    collector.traced().served_context = True
    if advisory:
        policy = SurfacePolicy(name="get_products", field="products")
        collector.record("inventory", stale_response(Upstream(name="inventory"), policy, 12, None))


def raw_answer(template: str, *, events: bool = False) -> Any:
    """A route answering a JSON-RPC call with ``template`` (its ``@ID`` the call's id) as
    written, one event when ``events``, after the cache served a context."""

    async def route(request: Request) -> Response:
        body = json.loads(await request.body())
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        ids = [m["id"] for m in (body if isinstance(body, list) else [body])]
        answers = [template.replace("@ID", str(id_)) for id_ in ids]
        if events:
            return Response(f"event: message\ndata: {answers[0]}\n\n",
                            media_type="text/event-stream")  # fmt: skip
        text = f"[{', '.join(answers)}]" if isinstance(body, list) else answers[0]
        return Response(text, media_type="application/json")

    return StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))


def a2a_call(id_: int) -> dict[str, Any]:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {
        "skill": "get_products", "parameters": {"context": json.loads(OWN)}}}]}  # fmt: skip
    return {"jsonrpc": "2.0", "id": id_, "method": "SendMessage", "params": {"message": message}}


def answering(result: str) -> str:
    """A JSON-RPC answer holding ``result``, its ``@TWICE`` (``@TWICE_TEXT`` in a JSON text)
    two ``context`` members, the first another buyer's, the last the request's."""
    twice = f'"context": {SECRET}, "context": {OWN}'
    result = result.replace("@TWICE_TEXT", twice.replace('"', '\\"')).replace("@TWICE", twice)
    return '{"jsonrpc": "2.0", "id": @ID, "result": ' + result + "}"


NAMED_TWICE = {  # (an answer naming its payload's context twice, its request)
    "mcp-structured": (answering('{"structuredContent": {"products": [], @TWICE}}'), call),
    "mcp-mirrored": (answering('{"structuredContent": {"products": [], @TWICE}, "content": '
                               '[{"type": "text", "text": "{\\"products\\": [], @TWICE_TEXT}"}]}'), call),
    "mcp-text-only": (answering('{"content": [{"type": "text", "text": '
                                '"{\\"products\\": [], @TWICE_TEXT}"}]}'), call),
    "mcp-escaped-name": (answering('{"structuredContent": {"context": ' + SECRET
                                   + ', "con\\u0074ext": ' + OWN + "}}"), call),
    "mcp-null-last": (answering('{"structuredContent": {"context": ' + SECRET
                                + ', "context": null}}'), call),
    "a2a-task": (answering('{"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}, '
                           '"artifacts": [{"parts": [{"data": {"products": [], @TWICE}}]}]}}'),
                 a2a_call),
}  # fmt: skip


@pytest.mark.parametrize("how", ["one-call", "batch", "events"])
@pytest.mark.parametrize("shape", NAMED_TWICE)
async def test_a_context_named_twice_in_an_rpc_answer_goes_out_once_its_own(
    shape: str, how: str
) -> None:
    """Found by a review (session 45): on MCP and A2A the last of two ``context`` members,
    the request's own, was what was compared, so the answer went as it came; a client
    keeping the first read another buyer's."""
    template, request = NAMED_TWICE[shape]
    app = raw_answer(template, events=how == "events")
    body = [request(1), request(2)] if how == "batch" else request(1)
    response = await _post(app, json.dumps(body).encode(), {}, path="/rpc")
    assert response.status_code == 200
    assert b"buyer-a-secret" not in response.content
    assert app.contexts_replaced == 1  # (answers counted, not payloads)

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in pairs]
        assert len(names) == len(set(names)), names
        return dict(pairs)

    lines = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    for text in lines if how == "events" else [response.text]:
        messages = json.loads(text, object_pairs_hook=once)
        for message in messages if isinstance(messages, list) else [messages]:
            for block in message["result"].get("content", []):
                json.loads(block["text"], object_pairs_hook=once)


async def test_a_context_named_twice_both_its_own_passes_byte_for_byte() -> None:
    template = answering('{"structuredContent": {"context": ' + OWN + ', "context": ' + OWN + "}}")
    app = raw_answer(template)
    response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    assert response.content == template.replace("@ID", "1").encode()
    assert app.contexts_replaced == 0


@pytest.mark.parametrize("how", ["one-call", "events"])
async def test_an_answer_echoing_a_number_id_otherwise_written_is_its_answer(how: str) -> None:
    """Found by a review (session 45): an answer with id ``1`` to a request with id ``1.0``
    (one JSON number; a JavaScript server echoes it so) counted as no answer: another buyer's
    context went out, neither mended nor said."""
    result = '{"structuredContent": {"products": [], "context": ' + SECRET + "}}"
    app = raw_answer(
        '{"jsonrpc": "2.0", "id": 1, "result": ' + result + "}", events=how == "events"
    )
    body = json.dumps(call(1)).replace('"id": 1,', '"id": 1.0,').encode()
    response = await _post(app, body, {}, path="/rpc")
    assert b"buyer-a-secret" not in response.content
    assert app.contexts_replaced == 1


def a2a_stream(ends: str, *, advisory: bool) -> Any:
    """An A2A stream: an artifact holding another buyer's context, then ``ends``: a failed
    final status, a working one, or nothing."""

    async def route(request: Request) -> Response:
        message = json.loads(await request.body())
        served_in_doubt(request, advisory=advisory)
        data = {"products": [], "context": json.loads(SECRET)}
        results = [{"artifactUpdate": {"taskId": "t", "artifact": {"parts": [{"data": data}]}}}]
        if ends != "nothing":
            state = {"failed": "TASK_STATE_FAILED", "working": "TASK_STATE_WORKING"}[ends]
            results.append({"statusUpdate": {"taskId": "t", "status": {"state": state},
                                             "final": ends == "failed"}})  # fmt: skip
        lines = (json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": r}) for r in results)
        text = "".join(f"event: message\ndata: {line}\n\n" for line in lines)
        return Response(text, media_type="text/event-stream")

    return StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))


@pytest.mark.parametrize("advisory", [False, True], ids=["context-only", "with-advisory"])
@pytest.mark.parametrize("ends", ["failed", "working", "nothing"])
async def test_a_held_artifact_released_without_advisories_gets_its_own_context(
    ends: str, advisory: bool, caplog: Any
) -> None:
    """Found by a review (session 45): an A2A artifact held for the final status, then let
    go without advisories (the task failed, no final status came), kept another buyer's
    context. It now gets its own; the advisories are still counted lost, once."""
    body = {**a2a_call(1), "method": "SendStreamingMessage"}
    app = a2a_stream(ends, advisory=advisory)
    with caplog.at_level(logging.INFO):
        response = await _post(app, json.dumps(body).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" not in response.content
    artifact = events(response)[0]["artifactUpdate"]["artifact"]
    assert artifact["parts"][0]["data"] == {"products": [], "context": json.loads(OWN)}
    assert app.contexts_replaced == 1
    lost = [r for r in caplog.records if "advisor" in r.getMessage() and "lost" in r.getMessage()]
    assert len(lost) == (1 if advisory else 0), [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("result", [
    '{"task": {"id": "t", "status": {"state": "TASK_STATE_FAILED"}, "artifacts": [{"parts": '
    '[{"data": {"adcp_error": {"code": "X"}, "context": ' + SECRET + "}}]}]}}",
    '{"isError": true, "structuredContent": {"adcp_error": {"code": "X"}, "context": ' + SECRET
    + "}}",
], ids=["a2a-failed-task", "mcp-is-error"])  # fmt: skip
async def test_a_failed_answer_in_doubt_gets_its_own_context(result: str) -> None:
    """Found by a review (session 45): a failed task or an ``isError`` result takes no
    advisory, and so its context was never mended either: another buyer's went out."""
    request = a2a_call if result.startswith('{"task"') else call
    app = raw_answer('{"jsonrpc": "2.0", "id": @ID, "result": ' + result + "}")
    response = await _post(app, json.dumps(request(1)).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" not in response.content and b"buyer-b" in response.content
    assert app.contexts_replaced == 1


@pytest.mark.parametrize("advisory", [False, True], ids=["context-only", "with-advisory"])
async def test_a_json_text_not_a_mirror_gets_its_own_context_too(advisory: bool) -> None:
    """Found by a review (session 44): a JSON text block that is not an exact mirror of
    ``structuredContent`` (one key more) kept another buyer's context, while the answer
    counted as mended."""
    text = json.dumps({"products": [], "summary": "1 product", "context": json.loads(SECRET)})
    result = {"structuredContent": {"products": [], "context": json.loads(SECRET)},
              "content": [{"type": "text", "text": text}], "isError": False}  # fmt: skip

    async def route(request: Request) -> Response:
        message = json.loads(await request.body())
        served_in_doubt(request, advisory=advisory)
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))
    response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" not in response.content
    answer = response.json()["result"]
    block = json.loads(answer["content"][0]["text"])
    assert block == {"products": [], "summary": "1 product", "context": json.loads(OWN)}
    codes = [e["code"] for e in answer["structuredContent"].get("errors", [])]
    assert codes == (["STALE_RESPONSE"] if advisory else [])  # the text is not the payload
    assert app.contexts_replaced == 1


def refusing(result: str, *, batch: bool = False) -> Any:
    """A route answering with ``result`` (its ``@ID`` each call's id) after the cache served
    a context and recorded an advisory the answer cannot take."""

    async def route(request: Request) -> Response:
        body = json.loads(await request.body())
        served_in_doubt(request, advisory=True)
        messages = body if isinstance(body, list) else [body]
        answers = [result.replace("@ID", json.dumps(m.get("id"))) for m in messages]
        text = f"[{', '.join(answers)}]" if batch else answers[0]
        return Response(text, media_type="application/json")

    return StaleAdvisoryMiddleware(Starlette(routes=[
        Route("/rpc", route, methods=["POST"]),
        Route("/api/get_products", route, methods=["POST"])]), surfaces=Surfaces.of(PRODUCTS))  # fmt: skip


FAILED_TASK = ('{"jsonrpc": "2.0", "id": @ID, "result": {"task": {"id": "t", "status": {"state": '
               '"TASK_STATE_FAILED"}, "artifacts": [{"parts": [{"data": {"adcp_error": {"code": '
               '"X"}, "context": ' + SECRET + "}}]}]}}}")  # fmt: skip
MCP_ANSWER = ('{"jsonrpc": "2.0", "id": @ID, "result": {"structuredContent": {"products": [], '
              '"context": ' + SECRET + '}, "isError": false}}')  # fmt: skip


@pytest.mark.parametrize("case", ["a2a-failed-task", "mcp-batch", "plain-failed"])
async def test_an_answer_refusing_its_advisories_still_gets_its_own_context(
    case: str, caplog: Any
) -> None:
    """Found reading the responder (session 46): an answer that could not take the advisories
    (a failed task, a batch, a plain payload with ``adcp_error``) was never given its own
    context either: another buyer's went out, silently for a batch."""
    if case == "a2a-failed-task":
        app, path, request = refusing(FAILED_TASK), "/rpc", a2a_call(1)
    elif case == "mcp-batch":
        app, path, request = refusing(MCP_ANSWER, batch=True), "/rpc", [call(1), call(2)]
    else:
        plain = '{"adcp_error": {"code": "X"}, "context": ' + SECRET + "}"
        app, path = refusing(plain), "/api/get_products"
        request = {"context": json.loads(OWN)}
    with caplog.at_level(logging.WARNING):
        response = await _post(app, json.dumps(request).encode(), {"content-type":
                               "application/json"}, path=path)  # fmt: skip
    assert response.status_code == 200
    assert b"buyer-a-secret" not in response.content and b"buyer-b" in response.content
    assert b"STALE_RESPONSE" not in response.content
    assert app.contexts_replaced == 1
    assert not any("answer_context_not_mended" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("case", ["a2a-failed-task", "mcp-is-error"])
async def test_an_event_refusing_its_advisories_still_gets_its_own_context(
    case: str, caplog: Any
) -> None:
    """Found by a review (session 46): the same as a JSON answer, over an event stream."""
    if case == "a2a-failed-task":
        result, request = FAILED_TASK, a2a_call(1)
    else:
        result, request = MCP_ANSWER.replace('"isError": false', '"isError": true'), call(1)
    app = raw_answer(result, events=True)
    inner = app.app

    async def record(scope: Any, receive: Any, send: Any) -> None:
        async def recorded(message: Any) -> None:
            if message["type"] == "http.response.start":
                collector = scope["state"]["adcp_stale_cache"]
                policy = SurfacePolicy(name="get_products", field="products")
                advisory = stale_response(Upstream(name="inventory"), policy, 12, None)
                collector.record("inventory", advisory)
            await send(message)

        await inner(scope, receive, recorded)

    app.app = record
    with caplog.at_level(logging.WARNING):
        response = await _post(app, json.dumps(request).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" not in response.content and b"buyer-b" in response.content
    assert b"STALE_RESPONSE" not in response.content
    assert app.contexts_replaced == 1
    messages = [r.getMessage() for r in caplog.records]
    assert sum("advisory_lost" in m for m in messages) == 1, messages
    assert not any("answer_context_not_mended" in m for m in messages)


@pytest.mark.parametrize("case", ["status-422", "text-plain-with-advisory"])
async def test_an_answer_in_doubt_never_read_is_said_unchecked(case: str, caplog: Any) -> None:
    """Found by a review (session 46): an error status in doubt went out unsaid, and so did
    an answer labelled other than JSON while an advisory was pending."""
    text = '{"adcp_error": {"code": "X"}, "context": ' + SECRET + "}"

    async def route(request: Request) -> Response:
        await request.body()
        served_in_doubt(request, advisory=case != "status-422")
        if case == "status-422":
            return Response(text, status_code=422, media_type="application/json")
        return Response(text, media_type="text/plain")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/api/get_products", route,
                                                          methods=["POST"])]))  # fmt: skip
    with caplog.at_level(logging.WARNING):
        response = await _post(app, b'{"context": ' + OWN.encode() + b"}", {})
    assert response.content == text.encode()  # as it came
    assert any("answer_context_unchecked" in r.getMessage() for r in caplog.records)


async def test_a_batch_under_ids_1_and_1_0_passes_byte_for_byte() -> None:
    """Found by a review (session 46): once ``1`` matched ``1.0``, a batch under both ids
    read as two calls under one id, and each answer's own context was taken away."""
    other = '{"correlation_id": "buyer-c"}'
    answers = [f'{{"jsonrpc": "2.0", "id": {id_}, "result": {{"structuredContent": '
               f'{{"products": [], "context": {context}}}}}}}'
               for id_, context in (("1", OWN), ("1.0", other))]  # fmt: skip
    text = "[" + ", ".join(answers) + "]"

    async def route(request: Request) -> Response:
        await request.body()
        request.scope["state"]["adcp_stale_cache"].traced().served_context = True
        return Response(text, media_type="application/json")

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))
    first, second = call(1), call(2, "buyer-c")
    body = json.dumps([first, second]).replace('"id": 2', '"id": 1.0').encode()
    response = await _post(app, body, {}, path="/rpc")
    assert response.content == text.encode()
    assert app.contexts_replaced == 0


async def test_a_stream_opening_with_a_working_task_delivers_its_advisory_once(
    caplog: Any,
) -> None:
    """Found by a review (session 46): the usual A2A stream opens with a task still working;
    that event refused the advisory, counted it lost ("A2A task is not completed"), and the
    completed artifact then carried it all the same."""
    app = a2a_stream("nothing", advisory=True)
    inner = app.app

    async def opening(scope: Any, receive: Any, send: Any) -> None:
        async def send_first(message: Any) -> None:
            if message["type"] == "http.response.body":
                working = {"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}}}
                first = json.dumps({"jsonrpc": "2.0", "id": 1, "result": working})
                done = {"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"},
                                         "final": True}}  # fmt: skip
                last = json.dumps({"jsonrpc": "2.0", "id": 1, "result": done})
                body = f"event: message\ndata: {first}\n\n".encode() + message["body"]
                message = {**message, "body": body + f"event: message\ndata: {last}\n\n".encode()}
            await send(message)

        await inner(scope, receive, send_first)

    app.app = opening
    body = {**a2a_call(1), "method": "SendStreamingMessage"}
    with caplog.at_level(logging.WARNING):
        response = await _post(app, json.dumps(body).encode(), {}, path="/rpc")
    assert response.content.count(b"STALE_RESPONSE") == 1
    assert b"buyer-a-secret" not in response.content
    assert not any("advisory_lost" in r.getMessage() for r in caplog.records)


async def test_a_text_not_a_mirror_that_cannot_be_written_leaves_the_payload_mended() -> None:
    """Found by a review (session 46): since 97cf24b such a text (a NaN in it) left the whole
    result untouched, the payload keeping another buyer's context and the advisory lost."""
    text = '{"summary": NaN, "context": ' + SECRET + "}"
    result = {"structuredContent": {"products": [], "context": json.loads(SECRET)},
              "content": [{"type": "text", "text": text}], "isError": False}  # fmt: skip

    async def route(request: Request) -> Response:
        message = json.loads(await request.body())
        served_in_doubt(request, advisory=True)
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/rpc", route, methods=["POST"])]))
    response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    answer = response.json()["result"]
    assert answer["structuredContent"]["context"] == json.loads(OWN)
    assert [e["code"] for e in answer["structuredContent"]["errors"]] == ["STALE_RESPONSE"]
    assert answer["content"][0]["text"] == text  # as it came: no re-encoding keeps a NaN


@pytest.mark.parametrize("events", [False, True], ids=["json", "events"])
async def test_an_answer_in_doubt_under_no_calls_id_is_said_unchecked(
    events: bool, caplog: Any
) -> None:
    """Found by a review (session 46): an answer whose id matched no call (a server echoing
    ``"1"`` for ``1``) went out holding another buyer's context, with nothing said."""
    answer = '{"jsonrpc": "2.0", "id": "1", "result": {"structuredContent": {"context": '
    app = raw_answer(answer + SECRET + "}}}", events=events)
    with caplog.at_level(logging.WARNING):
        response = await _post(app, json.dumps(call(1)).encode(), {}, path="/rpc")
    assert b"buyer-a-secret" in response.content  # whose it is cannot be told: as it came
    said = [r for r in caplog.records if "answer_context_unchecked" in r.getMessage()]
    assert len(said) == 1
