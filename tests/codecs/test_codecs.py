"""Wire codecs on recorded shapes: SSE splitting, MCP tool results, A2A tasks and streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adcp_stale_cache.codecs import RpcCall, RpcEventStream, Untouched, inject_body, parse_calls
from adcp_stale_cache.codecs.json import Delivery, Unmendable, inject_json
from adcp_stale_cache.codecs.mcp import inject_tool_result
from adcp_stale_cache.codecs.sse import EventSplitter, event_data, rewrite_data

ADVISORY = {
    "code": "STALE_RESPONSE",
    "message": "m",
    "details": {"served_from_cache": True, "cache_age_seconds": 3},
}
PAYLOAD = {"products": [{"product_id": "p1"}], "context": {"correlation_id": "c"}}


def test_event_splitter_handles_every_line_ending_and_split_points() -> None:
    stream = (
        b'event: message\r\ndata: {"a":1}\r\n\r\n: comment\n\ndata: x\rdata: y\r\r'
        + b"id: 7\ndata: z\n\n"
    )
    expected = [
        b'event: message\r\ndata: {"a":1}\r\n\r\n',
        b": comment\n\n",
        b"data: x\rdata: y\r\r",
        b"id: 7\ndata: z\n\n",
    ]
    for size in range(1, len(stream) + 1):
        splitter, events = EventSplitter(), []
        for i in range(0, len(stream), size):
            events += splitter.feed(stream[i : i + size])
        assert events == expected, size
        assert splitter.close() == b""


def test_event_data_and_rewrite_keep_other_lines() -> None:
    event = b'event: message\r\nid: 4\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
    assert event_data(event) == b'{"a":\n1}'
    rewritten = rewrite_data(event, lambda data: b'{"a":2}')
    assert rewritten == b'event: message\r\nid: 4\r\ndata: {"a":2}\r\n\r\n'
    assert rewrite_data(event, lambda data: None) == event


def test_parse_calls() -> None:
    mcp = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_products","arguments":{}}}'
    a2a_v1 = b'{"jsonrpc":"2.0","id":"x","method":"SendMessage","params":{"message":{"parts":[{"data":{"skill":"get_products"}}]}}}'
    a2a_v03 = b'{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"parts":[{"kind":"text","text":"hi"},{"kind":"data","data":{"skill":"list_creative_formats"}}]}}}'
    assert parse_calls(mcp) == [RpcCall("mcp", 7, "get_products")]
    assert parse_calls(a2a_v1) == [RpcCall("a2a", "x", "get_products")]
    assert parse_calls(a2a_v03) == [RpcCall("a2a", 1, "list_creative_formats")]
    assert parse_calls(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == []
    assert parse_calls(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}') == []
    assert parse_calls(b"not json") == []


def mcp_result(**result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "result": result}


def test_mcp_structured_and_mirrored_text_both_get_the_advisory() -> None:
    message = mcp_result(
        content=[{"type": "text", "text": json.dumps(PAYLOAD, indent=2)}],
        structuredContent=json.loads(json.dumps(PAYLOAD)),
        isError=False,
        resultType="complete",
    )
    out = json.loads(
        inject_body(json.dumps(message).encode(), [RpcCall("mcp", 7, "get_products")], [ADVISORY])
    )
    result = out["result"]
    assert result["structuredContent"]["errors"] == [ADVISORY]
    assert json.loads(result["content"][0]["text"])["errors"] == [ADVISORY]
    assert result["isError"] is False and result["resultType"] == "complete"


def test_mcp_human_summary_text_is_left_alone() -> None:
    result = {
        "content": [{"type": "text", "text": "Found 1 product"}],
        "structuredContent": dict(PAYLOAD),
    }
    inject_tool_result(result, [ADVISORY])
    assert result["content"][0]["text"] == "Found 1 product"
    assert result["structuredContent"]["errors"] == [ADVISORY]


def test_mcp_text_only_payload() -> None:
    result = {"content": [{"type": "text", "text": json.dumps(PAYLOAD)}]}
    inject_tool_result(result, [ADVISORY])
    assert json.loads(result["content"][0]["text"])["errors"] == [ADVISORY]


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "bad"}},
        mcp_result(content=[{"type": "text", "text": json.dumps(PAYLOAD)}], isError=True),
        mcp_result(content=[{"type": "text", "text": "no json here"}]),
        mcp_result(structuredContent={"adcp_error": {"code": "X", "message": "m"}}),
        {"jsonrpc": "2.0", "id": 8, "result": {"structuredContent": {}}},
    ],
)
def test_mcp_untouched(message: dict[str, Any]) -> None:
    with pytest.raises(Untouched):
        inject_body(json.dumps(message).encode(), [RpcCall("mcp", 7, "get_products")], [ADVISORY])


def a2a_task(state: str, *, v1: bool = True) -> dict[str, Any]:
    part = {"data": dict(PAYLOAD)} if v1 else {"kind": "data", "data": dict(PAYLOAD)}
    task = {
        "id": "t", "contextId": "c",
        "status": {"state": state},
        "artifacts": [{"artifactId": "a0", "parts": [{"text": "old"}]},
                      {"artifactId": "a1", "parts": [{"text": "summary"}, part]}],
    }  # fmt: skip
    if v1:
        return {"jsonrpc": "2.0", "id": 1, "result": {"task": task}}
    return {"jsonrpc": "2.0", "id": 1, "result": {**task, "kind": "task"}}


@pytest.mark.parametrize(("v1", "state"), [(True, "TASK_STATE_COMPLETED"), (False, "completed")])
def test_a2a_completed_task(v1: bool, state: str) -> None:
    body = json.dumps(a2a_task(state, v1=v1)).encode()
    out = json.loads(inject_body(body, [RpcCall("a2a", 1, "get_products")], [ADVISORY]))
    task = out["result"]["task"] if v1 else out["result"]
    assert task["status"]["state"] == state
    assert task["artifacts"][-1]["parts"][-1]["data"]["errors"] == [ADVISORY]
    assert task["artifacts"][0]["parts"] == [{"text": "old"}]


@pytest.mark.parametrize(
    "state", ["TASK_STATE_FAILED", "TASK_STATE_WORKING", "failed", "input-required"]
)
def test_a2a_unfinished_or_failed_task_untouched(state: str) -> None:
    with pytest.raises(Untouched):
        inject_body(json.dumps(a2a_task(state)).encode(), [RpcCall("a2a", 1, "x")], [ADVISORY])


def sse(message: dict[str, Any], crlf: bool = False) -> bytes:
    end = b"\r\n" if crlf else b"\n"
    return b"event: message" + end + b"data: " + json.dumps(message).encode() + end + end


def run_stream(
    call: RpcCall, events: list[bytes], errors: list[dict[str, Any]], chunk: int = 7
) -> list[Any]:
    stream = RpcEventStream(call, lambda: list(errors), lambda reason: None)
    raw = b"".join(events)
    out = b""
    for i in range(0, len(raw), chunk):
        out += stream.feed(raw[i : i + chunk])
    out += stream.close()
    splitter = EventSplitter()
    return [json.loads(event_data(e) or b"null") for e in splitter.feed(out)]


def test_mcp_sse_injects_only_into_the_answer() -> None:
    call = RpcCall("mcp", 7, "get_products")
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    answer = mcp_result(structuredContent=dict(PAYLOAD), content=[])
    out = run_stream(call, [sse(progress, crlf=True), sse(answer, crlf=True)], [ADVISORY])
    assert out[0] == progress
    assert out[1]["result"]["structuredContent"]["errors"] == [ADVISORY]


def test_mcp_sse_keeps_integers_too_long_for_orjson() -> None:
    call = RpcCall("mcp", 7, "get_products")
    answer = mcp_result(structuredContent={**PAYLOAD, "n": 123456789012345678901234567890})
    out = run_stream(call, [sse(answer, crlf=False)], [ADVISORY])
    content = out[0]["result"]["structuredContent"]
    assert content["n"] == 123456789012345678901234567890  # exact, not a float
    assert content["errors"] == [ADVISORY]


@pytest.mark.parametrize("answered", [2**70, 2**70 + 1])
def test_a_json_answer_compares_its_context_with_long_integers_exact(answered: int) -> None:
    """The splice reads the body with orjson, which makes 2**70 + 1 the float 2**70: the
    context it compares is read again exactly, or another buyer's context would stay."""
    body = b'{"products": [], "context": {"n": %d}}' % answered
    out = json.loads(inject_json(body, Delivery([ADVISORY], {"n": 2**70})))
    assert out["context"] == {"n": 2**70} and out["errors"] == [ADVISORY]
    assert type(out["context"]["n"]) is int
    if answered == 2**70:  # its own context: spliced, every byte kept
        assert inject_json(body, Delivery([ADVISORY], {"n": 2**70})).startswith(body[:-1])


@pytest.mark.parametrize(
    ("answered", "asked", "foreign"),
    [
        (b'{"x": 1}', {"x": True}, True),  # found by a review (session 44): Python's == said
        (b'{"x": [1, 0]}', {"x": [True, False]}, True),  # true is 1, so these stayed
        (b'{"x": "true"}', {"x": True}, True),
        (b'{"y": true}', {"x": True}, True),
        (b'{"x": true}', {"x": True}, False),
        (b'{"x": 1.0}', {"x": 1}, False),  # one number type in JSON: 1 and 1.0 are the same
        (b'{"x": -0.0}', {"x": 0}, False),  # as a JavaScript buyer compares them (-0 === 0)
    ],
)
def test_a_context_is_compared_as_json_types_and_all(
    answered: bytes, asked: Any, foreign: bool
) -> None:
    body = b'{"products": [], "context": ' + answered + b"}"
    errors = Delivery([], asked)
    out = inject_json(body, errors)
    if foreign:  # another request's context: it is mended
        assert json.loads(out)["context"] == asked and errors.replaced == 1
    else:
        assert out == body and errors.replaced == 0


def test_a_spliced_advisory_holding_a_long_integer_is_written_exactly() -> None:
    out = inject_json(b'{"products": []}', [{"code": "X", "details": {"n": 2**70}}])
    assert json.loads(out)["errors"][0]["details"]["n"] == 2**70  # orjson alone raised


def test_sse_without_advisories_is_byte_identical() -> None:
    call = RpcCall("mcp", 7, "get_products")
    events = [b": ping\r\n\r\n", sse(mcp_result(structuredContent=dict(PAYLOAD)), crlf=True)]
    stream = RpcEventStream(call, lambda: [], lambda reason: None)
    raw = b"".join(events)
    assert (
        b"".join(stream.feed(raw[i : i + 5]) for i in range(0, len(raw), 5)) + stream.close() == raw
    )


def a2a_events(final_state: str, v1: bool) -> list[bytes]:
    if v1:
        artifact = {
            "artifactUpdate": {
                "taskId": "t",
                "artifact": {"artifactId": "a", "parts": [{"data": dict(PAYLOAD)}]},
            }
        }
        status = {"statusUpdate": {"taskId": "t", "status": {"state": final_state}}}
        working = {"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}}}
    else:
        artifact = {
            "kind": "artifact-update",
            "taskId": "t",
            "artifact": {"artifactId": "a", "parts": [{"kind": "data", "data": dict(PAYLOAD)}]},
        }
        status = {
            "kind": "status-update",
            "taskId": "t",
            "status": {"state": final_state},
            "final": True,
        }
        working = {
            "kind": "status-update",
            "taskId": "t",
            "status": {"state": "working"},
            "final": False,
        }
    return [sse({"jsonrpc": "2.0", "id": 1, "result": r}) for r in (working, artifact, status)]


@pytest.mark.parametrize(("v1", "state"), [(True, "TASK_STATE_COMPLETED"), (False, "completed")])
def test_a2a_stream_completed_gets_advisory_in_order(v1: bool, state: str) -> None:
    out = run_stream(RpcCall("a2a", 1, "get_products"), a2a_events(state, v1), [ADVISORY])
    kinds = [next(iter(m["result"])) if v1 else m["result"]["kind"] for m in out]
    assert kinds == (
        ["statusUpdate", "artifactUpdate", "statusUpdate"]
        if v1
        else ["status-update", "artifact-update", "status-update"]
    )
    artifact = out[1]["result"]["artifactUpdate"] if v1 else out[1]["result"]
    assert artifact["artifact"]["parts"][0]["data"]["errors"] == [ADVISORY]


@pytest.mark.parametrize(("v1", "state"), [(True, "TASK_STATE_FAILED"), (False, "failed")])
def test_a2a_stream_failed_task_untouched(v1: bool, state: str) -> None:
    events = a2a_events(state, v1)
    out = run_stream(RpcCall("a2a", 1, "get_products"), events, [ADVISORY])
    assert "errors" not in json.dumps(out)


DEEP = b"[" * 600 + b"]" * 600  # orjson reads it; no re-encoding writes it


@pytest.mark.parametrize("protocol", ["mcp", "a2a"])
@pytest.mark.parametrize("in_doubt", [False, True], ids=["advisory", "advisory-and-context"])
def test_a_streamed_answer_too_deep_to_rewrite_passes_as_it_came(
    protocol: str, in_doubt: bool
) -> None:
    """Found looking for the pattern of session 44's review: re-encoding such an answer
    raised out of the stream, which cut it mid-answer."""
    if protocol == "mcp":
        call = RpcCall("mcp", 7, "get_products")
        events = [sse(mcp_result(content=[], structuredContent=PAYLOAD, isError=False))]
    else:
        call, events = RpcCall("a2a", 1, "get_products"), a2a_events("completed", False)
    events = [e.replace(b'"products": [', b'"x": ' + DEEP + b', "products": [') for e in events]
    errors = Delivery([ADVISORY], {"correlation_id": "another"}) if in_doubt else [ADVISORY]
    heard: list[Untouched] = []
    unmended: list[Unmendable] = []
    stream = RpcEventStream(call, lambda: errors, heard.append, on_unmended=unmended.append)
    raw = b"".join(events)
    assert stream.feed(raw) + stream.close() == raw
    assert len(heard) == 1 and not isinstance(heard[0], Unmendable)  # the advisory, lost
    assert len(unmended) == in_doubt  # then the context alone, which cannot be written either
    if isinstance(errors, Delivery):
        assert errors.replaced == 0  # none was written


@pytest.mark.parametrize("state", [[], {}, 5])
def test_an_a2a_status_that_is_not_a_word_passes(state: Any) -> None:
    """Found by a review (session 44): a list or object as a task's state raised TypeError
    out of the stream (every A2A stream, advisory or not)."""
    call = RpcCall("a2a", 1, "get_products")
    status = {"statusUpdate": {"taskId": "t", "status": {"state": state}}}
    artifact = {"artifactUpdate": {"taskId": "t", "artifact": "x"}}
    events = [sse({"jsonrpc": "2.0", "id": 1, "result": r}) for r in (artifact, status)]
    stream = RpcEventStream(call, lambda: [ADVISORY], lambda why: None)
    assert stream.feed(b"".join(events)) + stream.close() == b"".join(events)


# Found by a hostile review of the mend's failures (session 45).
OWN, FOREIGN = {"buyer": "b"}, {"buyer": "a"}


def completed_task(data: dict[str, Any]) -> dict[str, Any]:
    return {"task": {"id": "t", "status": {"state": "completed"},
                     "artifacts": [{"parts": [{"data": data}]}]}}  # fmt: skip


def test_an_answer_refusing_the_advisory_under_a_reused_id_still_gets_its_context() -> None:
    first = completed_task({"adcp_error": {"code": "X"}, "context": FOREIGN})  # a failed task
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "result": first},
                       {"jsonrpc": "2.0", "id": 1, "result": completed_task({"products": [],
                                                                       "context": OWN})}])  # fmt: skip
    errors = Delivery([ADVISORY], OWN)
    out = json.loads(inject_body(body.encode(), [RpcCall("a2a", 1, "s", {"context": OWN})], errors))
    datas = [a["result"]["task"]["artifacts"][0]["parts"][0]["data"] for a in out]
    assert [d["context"] for d in datas] == [OWN, OWN] and errors.replaced == 1
    assert [d.get("errors") for d in datas] == [None, [ADVISORY]]


def test_a_mirror_that_cannot_be_written_leaves_its_result_untouched() -> None:
    """4bf878d changed structuredContent before finding its mirror could not be re-encoded:
    the advisory then went into the next answer under the id too."""
    mirror = '{"products": [], "context": {"buyer": "b"}, "x": 1.00000000000000000001}'
    first = {"content": [{"type": "text", "text": mirror}],
             "structuredContent": {"products": [], "context": OWN, "x": 1.0}}  # fmt: skip
    second = {"content": [], "structuredContent": {"products": [], "context": OWN}}
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "result": first},
                       {"jsonrpc": "2.0", "id": 1, "result": second}]).encode()  # fmt: skip
    out = json.loads(inject_body(body, [RpcCall("mcp", 1, "s", {"context": OWN})],
                                 Delivery([ADVISORY], OWN)))  # fmt: skip
    results = [a["result"] for a in out]
    assert "errors" not in results[0]["structuredContent"]
    assert results[0]["content"][0]["text"] == mirror
    assert results[1]["structuredContent"]["errors"] == [ADVISORY]


@pytest.mark.parametrize("body", [
    b'{"context": {"buyer": "a"}, "context": null}',
    b'{"con\\u0074ext": {"buyer": "a"}, "context": null}',
])  # fmt: skip
def test_a_context_named_twice_the_last_null_goes_out_once(body: bytes) -> None:
    errors = Delivery([], OWN)
    out = inject_json(body, errors)
    assert json.loads(out, object_pairs_hook=list) == [("context", None)]
    assert errors.replaced == 1


@pytest.mark.parametrize("body", [
    b'{"products": [], "context": null, "context": null}',  # (a second review: these were
    b'{"products": [], "context": {"buyer": "b"}, "context": null}',  # counted as mends)
    b'{"products": [], "context": {"buyer": "b"}, "context": {"buyer": "b"}}',
    b'{"context": {"buyer": "b"}, "note": "context", "x": ' + b"[" * 1010 + b"]" * 1010 + b"}",
])  # fmt: skip
def test_a_context_named_twice_with_none_of_anothers_passes_byte_for_byte(body: bytes) -> None:
    errors = Delivery([], OWN)
    assert inject_json(body, errors) == body and errors.replaced == 0


def test_an_mcp_answer_refusing_the_advisory_under_a_reused_id_still_gets_its_context() -> None:
    """A second review: the same as A2A's, but MCP's refusal was Unmendable, which stopped
    the delivery: the advisory was lost and no context mended."""
    failed = {"adcp_error": {"code": "X"}, "context": FOREIGN}
    first = {"content": [{"type": "text", "text": json.dumps(failed)}],
             "structuredContent": failed}  # fmt: skip
    second = {"content": [], "structuredContent": {"products": [], "context": OWN}}
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "result": first},
                       {"jsonrpc": "2.0", "id": 1, "result": second}]).encode()  # fmt: skip
    errors = Delivery([ADVISORY], OWN)
    out = json.loads(inject_body(body, [RpcCall("mcp", 1, "s", {"context": OWN})], errors))
    results = [a["result"] for a in out]
    assert [r["structuredContent"]["context"] for r in results] == [OWN, OWN]
    assert json.loads(results[0]["content"][0]["text"])["context"] == OWN
    assert [r["structuredContent"].get("errors") for r in results] == [None, [ADVISORY]]
    assert errors.replaced == 2  # the payload and its mirror


@pytest.mark.parametrize("where", ["request", "answer"])
def test_a_lone_surrogate_in_a_json_text_is_read_not_raised(where: str) -> None:
    """Older than the review: ``loads`` encoded a JSON text holding a lone surrogate (from
    a ``\\ud800`` escape) to UTF-8 and raised ``UnicodeEncodeError``: a 500."""
    text = json.dumps({"skill": "get_products", "context": FOREIGN})[:-1] + ', "x": "\ud800"}'
    assert "\ud800" in text  # the character itself, not its escape
    if where == "request":
        message = {"parts": [{"text": text}]}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                           "params": {"message": message}}).encode()  # fmt: skip
        [call] = parse_calls(body)
        assert call.surface == "get_products"
        return
    result = {"content": [{"type": "text", "text": text}]}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode()
    errors = Delivery([], OWN)
    out = json.loads(inject_body(body, [RpcCall("mcp", 1, "s", {"context": OWN})], errors))
    assert json.loads(out["result"]["content"][0]["text"])["context"] == OWN
