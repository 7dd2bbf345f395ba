"""Property tests of the response rewriter (hypothesis, 10,000+ examples in all).

Whatever the payload, its splitting across ASGI messages, its ``errors`` value or content
type, the output is the input plus exactly the advisories, or the input byte for byte.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    current_collector,
    stale_response,
)
from adcp_stale_cache.codecs.sse import EventSplitter, event_data
from adcp_stale_cache.core.failures import Failure
from adcp_stale_cache.core.policy import FailureKind

POLICY = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
SURFACES = Surfaces.of(POLICY)
FAILURE = Failure(FailureKind.TIMEOUT, "TIMEOUT", "Upstream did not answer within 1s")
LOOP = asyncio.new_event_loop()  # one loop for all examples: asyncio.run per example is slow
FUZZ = settings(max_examples=4000, deadline=None, suppress_health_check=list(HealthCheck))

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
errors_values = st.one_of(
    st.just("absent"),
    st.none(),
    st.lists(st.dictionaries(st.text(max_size=4), scalars, max_size=3), max_size=3),
    scalars,
    st.dictionaries(st.text(max_size=3), scalars, max_size=2),
)
content_types = st.sampled_from(
    [
        b"application/json",
        b"application/json; charset=utf-8",
        b"application/problem+json",
        b"text/plain",
        b"text/html",
        b"",
    ]
)


def advisories(count: int) -> list[dict[str, Any]]:
    return [
        stale_response(Upstream(name=f"up-{i}"), POLICY, 30 + i, FAILURE).to_dict()
        for i in range(count)
    ]


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(body[start:point])
        start = point
    pieces.append(body[start:])
    return pieces


def run(
    app: Any, method: bytes = b"POST", path: str = "/api/get_products", request: bytes = b"{}"
) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": request, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method.decode(),
        "path": path,
        "headers": [(b"content-type", b"application/json")],
    }
    LOOP.run_until_complete(StaleAdvisoryMiddleware(app, surfaces=SURFACES)(scope, receive, send))
    return sent


def app_sending(pieces: list[bytes], content_type: bytes, recorded: int) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        collector = current_collector()
        assert collector is not None
        for i, advisory in enumerate(advisories(recorded)):
            collector.record(
                f"up-{i}",
                stale_response(
                    Upstream(name=f"up-{i}"),
                    POLICY,
                    advisory["details"]["cache_age_seconds"],
                    FAILURE,
                ),
            )
        headers = [(b"content-type", content_type)] if content_type else []
        headers.append((b"content-length", str(sum(map(len, pieces))).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i, piece in enumerate(pieces):
            await send(
                {"type": "http.response.body", "body": piece, "more_body": i < len(pieces) - 1}
            )

    return app


@FUZZ
@given(payload=st.dictionaries(st.text(max_size=8), json_values, max_size=5), errors=errors_values,
       fatal=st.booleans(), top=st.sampled_from(["object", "array", "scalar", "garbage"]),
       content_type=content_types, cuts=st.lists(st.integers(0, 10_000), max_size=6), recorded=st.integers(0, 3),
       pretty=st.booleans())  # fmt: skip
def test_json_rewrite_is_exact_or_untouched(payload: dict[str, Any], errors: Any, fatal: bool, top: str,
                                            content_type: bytes, cuts: list[int], recorded: int, pretty: bool) -> None:  # fmt: skip
    payload = dict(payload)
    payload.pop("errors", None)
    payload.pop("adcp_error", None)
    if errors != "absent":
        payload["errors"] = errors
    if fatal:
        payload["adcp_error"] = {"code": "SERVICE_UNAVAILABLE", "message": "m"}
    document: Any = {"object": payload, "array": [payload], "scalar": 42}.get(top)
    body = (
        b'{"products": [1,'
        if top == "garbage"
        else json.dumps(document, indent=2 if pretty else None).encode()
    )
    pieces = split(body, cuts)
    sent = run(app_sending(pieces, content_type, recorded))
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    start = sent[0]
    length = dict(start["headers"]).get(b"content-length")
    assert length == str(len(out)).encode()
    if recorded == 0:
        assert [m.get("body") for m in sent[1:]] == pieces  # untouched, message for message
        return
    if out == body:
        return  # left untouched, as a whole
    assert content_type.split(b";")[0] in (b"application/json", b"application/problem+json")
    assert (
        top == "object"
        and not fatal
        and (errors == "absent" or errors is None or isinstance(errors, list))
    )
    result = json.loads(out)
    added = advisories(recorded)
    before = [] if errors in ("absent", None) else errors
    assert result["errors"] == before + added
    del result["errors"]
    expected = {k: v for k, v in payload.items() if k != "errors"}
    assert result == json.loads(json.dumps(expected))


def mcp_answer(call_id: int, payload: dict[str, Any], mirrored: bool) -> dict[str, Any]:
    content = (
        [{"type": "text", "text": json.dumps(payload)}]
        if mirrored
        else [{"type": "text", "text": "summary"}]
    )
    return {
        "jsonrpc": "2.0",
        "id": call_id,
        "result": {"content": content, "structuredContent": payload, "isError": False},
    }


@FUZZ
@given(payload=st.dictionaries(st.text(max_size=8), json_values, max_size=4), crlf=st.booleans(),
       noise=st.lists(st.sampled_from([b": ping", b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}", b"id: 3\nretry: 10"]), max_size=3),
       cuts=st.lists(st.integers(0, 10_000), max_size=8), recorded=st.integers(0, 2), mirrored=st.booleans(),
       is_error=st.booleans())  # fmt: skip
def test_sse_rewrite_is_exact_or_untouched(payload: dict[str, Any], crlf: bool, noise: list[bytes], cuts: list[int],
                                           recorded: int, mirrored: bool, is_error: bool) -> None:  # fmt: skip
    payload = {k: v for k, v in payload.items() if k not in ("errors", "adcp_error")}
    end = b"\r\n" if crlf else b"\n"
    answer = mcp_answer(7, payload, mirrored)
    answer["result"]["isError"] = is_error
    events = [n.replace(b"\n", end) + end + end for n in noise]
    events.append(b"event: message" + end + b"data: " + json.dumps(answer).encode() + end + end)
    body = b"".join(events)
    pieces = split(body, cuts)
    request = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_products"}}
    ).encode()
    sent = run(app_sending(pieces, b"text/event-stream", recorded), path="/mcp", request=request)
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"content-length" not in dict(sent[0]["headers"])
    if recorded == 0 or is_error:
        assert out == body
        return
    out_events = EventSplitter().feed(out)
    assert out_events[:-1] == events[:-1]  # other events: byte for byte
    result = json.loads(event_data(out_events[-1]) or b"")["result"]
    assert result["structuredContent"]["errors"] == advisories(recorded)
    assert result["isError"] is False
    if mirrored:
        assert json.loads(result["content"][0]["text"])["errors"] == advisories(recorded)
    else:
        assert result["content"][0]["text"] == "summary"


@settings(max_examples=2500, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_event_splitter_never_loses_or_invents_bytes(stream: bytes, cuts: list[int]) -> None:
    splitter = EventSplitter()
    out = (
        b"".join(b"".join(splitter.feed(piece)) for piece in split(stream, cuts)) + splitter.close()
    )
    assert out == stream


def _reference_data(event: bytes) -> bytes | None:
    """The SSE spec's data of an event, read the slow, obvious way."""
    values = []
    for line in event.splitlines():
        if line == b"data" or line.startswith(b"data:"):
            value = line[5:]
            values.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(values) if values else None


SSE_LINES = st.sampled_from(
    [b"data: {\"a\": 1}", b"data:{}", b"data", b"data:  two spaces", b"database: no",
     b"event: message", b": data: comment", b"id: 7", b"retry: 10", b"xdata: no"]
)  # fmt: skip


@given(
    lines=st.lists(SSE_LINES, min_size=1, max_size=5),
    ending=st.sampled_from([b"\r\n", b"\n", b"\r"]),
)
def test_sse_fast_path_reads_and_rewrites_like_the_spec(lines: list[bytes], ending: bytes) -> None:
    from adcp_stale_cache.codecs.sse import event_data, rewrite_data

    event = ending.join(lines) + ending + ending
    assert event_data(event) == _reference_data(event)
    rewritten = rewrite_data(event, lambda data: b"NEW")
    if _reference_data(event) is None:
        assert rewritten == event
    else:
        assert _reference_data(rewritten) == b"NEW"
        others = [
            line
            for line in event.splitlines()
            if not (line == b"data" or line.startswith(b"data:"))
        ]
        assert [line for line in rewritten.splitlines() if not line.startswith(b"data:")] == others
        assert rewritten.endswith(ending + ending)
