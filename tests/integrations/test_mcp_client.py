"""Reading a tool's result as the MCP clients return it (mcp 1.x and 2.x spell members apart)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is needed")

from adcp_stale_cache import InvalidPayload, UpstreamError
from adcp_stale_cache.integrations.mcp_client import _answer_of


@dataclass
class Text:
    text: str


@dataclass
class V2Result:
    """mcp 2.x's members, with the 1.x names kept as deprecated aliases (as under fastmcp 4)."""

    is_error: bool = False
    structured_content: dict[str, Any] | None = None
    content: list[Text] = field(default_factory=list)

    @property
    def isError(self) -> bool:
        warnings.warn("isError is deprecated", DeprecationWarning, stacklevel=2)
        return self.is_error

    @property
    def structuredContent(self) -> dict[str, Any] | None:
        warnings.warn("structuredContent is deprecated", DeprecationWarning, stacklevel=2)
        return self.structured_content


@dataclass
class V1Result:
    isError: bool = False
    structuredContent: dict[str, Any] | None = None
    content: list[Text] = field(default_factory=list)


def test_a_v2_result_is_read_by_its_own_names_only() -> None:
    """``False`` and ``None`` under the 2.x names are answers, not reasons to read the aliases."""
    payload = {"formats": [], "adcp_error": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _answer_of(V2Result(structured_content=payload), "t") == payload
        text = V2Result(content=[Text(json.dumps(payload))])
        assert _answer_of(text, "t") == payload


def test_a_v1_result_is_read_by_its_names() -> None:
    assert _answer_of(V1Result(structuredContent={"formats": []}), "t") == {"formats": []}
    with pytest.raises(UpstreamError):
        _answer_of(V1Result(isError=True, content=[Text("boom")]), "t")


def test_failures_read_alike_in_both() -> None:
    failed = {"adcp_error": {"code": "RATE_LIMITED", "message": "slow down"}}
    for result in (V1Result(structuredContent=failed), V2Result(structured_content=failed)):
        with pytest.raises(UpstreamError) as raised:
            _answer_of(result, "t")
        assert raised.value.code == "RATE_LIMITED"
    with pytest.raises(InvalidPayload):
        _answer_of(V2Result(content=[Text("not JSON")]), "t")


def test_an_mcp_server_answering_503_is_an_outage_not_a_bug() -> None:
    """mcp 2.x reads any HTTP error as a JSON-RPC -32603 and drops the status: a creative
    agent's 503 then classified as the caller's own bug (UNEXPECTED), never served stale."""
    import asyncio
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from adcp_stale_cache.core.failures import FailureKind, classify
    from adcp_stale_cache.core.policy import DEFAULT_STALE_ON
    from adcp_stale_cache.demo.processes import free_port, wait_for_port
    from adcp_stale_cache.integrations.mcp_client import MCP_V1, call_mcp_tool

    if MCP_V1:
        pytest.skip("mcp 1.x raises httpx's own status error, read as it is")
    status = {"code": 503}

    async def refuse(request: Request) -> Response:
        return Response("busy", status_code=status["code"], headers={"Retry-After": "7"})

    app = Starlette(routes=[Route("/mcp", refuse, methods=["GET", "POST", "DELETE"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for_port(port)
        for code, kind in ((503, FailureKind.HTTP_5XX), (429, FailureKind.RATE_LIMITED)):
            status["code"] = code
            with pytest.raises(Exception) as raised:
                asyncio.run(call_mcp_tool(f"http://127.0.0.1:{port}/mcp", "list_creative_formats"))
            failure = classify(raised.value)
            assert (failure.kind, failure.retry_after) == (kind, 7.0), code
            assert failure.kind in DEFAULT_STALE_ON
        status["code"] = 421  # a 4xx is the caller's to correct: no outage
        with pytest.raises(Exception) as raised:
            asyncio.run(call_mcp_tool(f"http://127.0.0.1:{port}/mcp", "list_creative_formats"))
        assert classify(raised.value).kind is FailureKind.UNEXPECTED
    finally:
        server.should_exit = True
        thread.join(10)


async def test_the_example_mcp_apps_answer_under_the_address_they_are_served_at() -> None:
    """The SDK guards a loopback-bound server against DNS rebinding (any other Host header is
    a 421): a creative agent or a seller served on another address (another host, a network
    namespace) must be named for it, or every call to it fails."""
    import httpx

    from adcp_stale_cache.demo.creative_agent import create_creative_agent_app
    from adcp_stale_cache.demo.seller import create_seller_app

    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    headers = {"accept": "application/json, text/event-stream", "host": "10.77.99.1:9000"}
    agent = create_creative_agent_app(name="a", public_url="http://10.77.99.1:9000/mcp")
    seller = create_seller_app(creative_agents={}, inventory_url="http://127.0.0.1:1",
                               public_url="http://10.77.99.1:9000")  # fmt: skip
    for app in (agent, seller):
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
                answer = await client.post("/mcp", json=initialize, headers=headers)
        assert answer.status_code == 200, (app, answer.status_code, answer.text[:200])


class ScriptedMcp:
    """A streamable HTTP MCP server in a few lines: it initialises like any, and answers
    ``tools/call`` as the test says (``answer``: after ``delay`` seconds, or a response
    stream that breaks off with no event in it)."""

    def __init__(self, answer: dict[str, Any] | None, delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import asyncio

        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        request = json.loads(body) if body else {}
        if scope["method"] != "POST" or "id" not in request:  # GET, DELETE, notifications
            status = {"GET": 405, "DELETE": 200}.get(scope["method"], 202)
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if request["method"] == "initialize":
            result: dict[str, Any] | None = {
                "protocolVersion": request["params"]["protocolVersion"], "capabilities": {},
                "serverInfo": {"name": "scripted", "version": "1"},
            }  # fmt: skip
        elif request["method"] == "tools/list":  # the client checks the result against it
            result = {"tools": []}
        else:
            await asyncio.sleep(self.delay)
            result = self.answer
        if result is None:  # the stream opens, then breaks off with no answer in it
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b": opened\n\n"})
            return
        answer = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
        headers = [(b"content-type", b"application/json"), (b"mcp-session-id", b"s1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer.encode()})


def _bounded_call(url: str, timeout: float) -> tuple[BaseException | dict[str, Any], float]:
    """``call_mcp_tool`` with ``timeout``: what it raised or returned, and when. The test's
    own bound (60 s) fails a call that would wait forever rather than hang the suite."""
    import asyncio
    import time

    from adcp_stale_cache.integrations.mcp_client import call_mcp_tool

    started = time.monotonic()
    try:
        call = call_mcp_tool(url, "list_creative_formats", timeout=timeout)
        outcome: BaseException | dict[str, Any] = asyncio.run(asyncio.wait_for(call, 60))
    except Exception as exc:
        outcome = exc
    return outcome, time.monotonic() - started


def test_a_server_that_never_answers_is_a_timeout_within_the_call_s_bound() -> None:
    """A loopback listener that accepts connections and never reads them (a frozen agent):
    the call ends with a TIMEOUT outage after its ``timeout``, never waits on."""
    import socket

    from adcp_stale_cache.core.failures import classify

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshakes; nothing ever reads
        port = listener.getsockname()[1]
        outcome, took = _bounded_call(f"http://127.0.0.1:{port}/mcp", timeout=1)
    assert isinstance(outcome, TimeoutError), outcome
    assert classify(outcome).code == "TIMEOUT"
    assert took < 1 + 1 + 5  # the bound, the bounded cleanup, a busy machine's margin


@pytest.mark.parametrize("answer", [None], ids=["stream-broken-off"])
def test_an_answer_lost_on_a_broken_off_stream_is_an_outage_not_a_hang(answer: Any) -> None:
    """mcp 1.x drops a response stream that ends with no answer in it, without a word: the
    session waited for ever (issue 33's hang, at the buyer). The call's bound ends it."""
    from adcp_stale_cache.core.failures import classify
    from adcp_stale_cache.core.policy import DEFAULT_STALE_ON

    from ..servers import serve

    with serve(ScriptedMcp(answer)) as url:
        outcome, took = _bounded_call(f"{url}/mcp", timeout=1)
    assert isinstance(outcome, Exception), outcome
    assert classify(outcome).kind in DEFAULT_STALE_ON, (outcome, classify(outcome))
    assert took < 1 + 1 + 5


def test_an_answer_slower_than_httpx_default_timeout_arrives() -> None:
    """httpx's own 5 s default read timeout cut an answer slower than that to start, well
    within the call's deadline (under mcp 1.x, lost without a word): the call's ``timeout``
    is every read's."""
    from ..servers import serve

    formats = {"formats": [{"format_id": {"id": "late"}}]}
    result = {"content": [], "structuredContent": formats, "isError": False}
    with serve(ScriptedMcp(result, delay=5.5)) as url:
        outcome, _ = _bounded_call(f"{url}/mcp", timeout=20)
    assert outcome == formats
