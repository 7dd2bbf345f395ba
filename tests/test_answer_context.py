"""Every answer's ``context`` is its own request's, whatever the cache served.

The leak: a seller forwards the buyer's request, ``context`` included, to an AdCP sub-agent,
which echoes it; the answer is cached; the seller returns it as its own answer. The next
buyer then reads the first buyer's ``correlation_id``. The middleware mends it on every
transport (a declared JSON route, MCP ``tools/call`` answered in JSON or as events, A2A
``SendMessage`` and ``SendStreamingMessage``), counts it and
says so once; an answer whose context is already right passes byte for byte.
"""

from __future__ import annotations

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
from adcp_stale_cache.cache import UpstreamCache
from adcp_stale_cache.stores import MemoryStore

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
