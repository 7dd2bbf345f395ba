"""JSON-RPC: the tool calls a request carries (MCP ``tools/call``, A2A ``message/send``) and
the advisories their answers get."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .json import (
    KEEP,
    UNKNOWN,
    Delivery,
    Unmendable,
    Untouched,
    compares,
    context_of,
    dumps,
    holds_foreign,
    loads,
    mends,
    parse,
    present,
    same_json,
    unwritten,
)

MCP_TOOL_CALL = "tools/call"
_BOM = b"\xef\xbb\xbf"
A2A_SEND = frozenset({"message/send", "SendMessage"})
A2A_STREAM = frozenset({"message/stream", "SendStreamingMessage"})


@dataclass(frozen=True, slots=True)
class RpcCall:
    """One JSON-RPC request whose answer carries an AdCP payload."""

    protocol: Literal["mcp", "a2a"]
    id: Any
    surface: str | None
    #: The AdCP request: the tool's arguments, the skill's parameters (None: not read).
    arguments: Any = field(default=None, compare=False)

    @property
    def context(self) -> Any:
        """The AdCP request's ``context`` (see :func:`~.json.context_of`)."""
        return context_of(self.arguments)


def parse_calls(body: bytes) -> list[RpcCall]:
    """The tool calls in a JSON-RPC request body (a batch may hold several), ids exact."""
    try:
        data = parse(body.removeprefix(_BOM))
    except Untouched:
        return []
    messages = data if isinstance(data, list) else [data]
    calls = []
    for message in messages:
        if not isinstance(message, dict) or "id" not in message:
            continue  # notifications and responses carry no payload to annotate
        method = message.get("method")
        params = message.get("params")
        if not isinstance(params, dict):
            params = {}
        if method == MCP_TOOL_CALL:
            name = params.get("name")
            arguments = params.get("arguments")
            calls.append(
                RpcCall("mcp", message["id"], name if isinstance(name, str) else None, arguments)
            )
        elif method in A2A_SEND or method in A2A_STREAM:
            skill, arguments = a2a_call(params.get("message"))
            calls.append(RpcCall("a2a", message["id"], skill, arguments))
    return calls


def a2a_call(message: Any) -> tuple[str | None, Any]:
    """The skill an A2A message invokes and its parameters, as the ``adcp`` SDK server reads
    them; (None, None) unless exactly one part invokes one."""
    parts = message.get("parts") if isinstance(message, dict) else None
    found: list[tuple[str, Any]] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        data = part.get("data")
        if data is None and isinstance(part.get("text"), str):
            try:
                data = loads(part["text"])
            except Untouched:
                continue
        if not isinstance(data, dict):
            continue
        skill = data.get("skill")
        if skill and not isinstance(skill, (list, dict)):  # (no skill is named by a list)
            parameters = data.get("parameters")
            found.append((str(skill), parameters if isinstance(parameters, dict) else {}))
    return found[0] if len(found) == 1 else (None, None)


def same_id(message: Any, call: RpcCall) -> bool:
    """Whether ``message`` carries ``call``'s id, compared as JSON: ``true`` is not ``1``, and
    ``1`` is ``1.0`` (a JavaScript server echoes ``1.0`` as ``1``)."""
    if not isinstance(message, dict) or "id" not in message:
        return False
    found = message["id"]
    if type(found) is type(call.id) and isinstance(found, (str, int, float)):
        same: bool = found == call.id  # (every SSE event is asked: the common case first)
        return same
    return same_json(found, call.id)


def inject_response(message: Any, call: RpcCall, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to the payload of the JSON-RPC response answering ``call``, in place."""
    from . import a2a, mcp

    if not same_id(message, call):
        raise Untouched("not the answer to the tool call", "unanswered")
    if present(message, "error"):
        raise Untouched("JSON-RPC error reply", "rpc_error")
    if call.protocol == "mcp":
        mcp.inject_tool_result(message.get("result"), errors)
    else:
        a2a.inject_result(message.get("result"), errors)


def inject_body(body: bytes, calls: Sequence[RpcCall], errors: list[dict[str, Any]]) -> bytes:
    """A JSON-RPC response body with ``errors`` injected; in a batch, which no advisory can
    be attributed to, only each answer's ``context`` is mended."""
    if len(calls) != 1 and (errors or not isinstance(errors, Delivery) or errors.context is KEEP):
        raise Untouched(
            f"{len(calls)} tool calls in one request: advisories cannot be attributed", "batch"
        )

    def deliver(data: Any, errors: list[dict[str, Any]]) -> None:
        if len(calls) == 1:
            _deliver(data, calls[0], errors)
        else:
            assert isinstance(errors, Delivery)  # (the only kind let through above)
            _own_contexts(data, calls, errors)

    mended = mends(errors)
    try:
        data = parse(body, shadows=compares(errors))
        deliver(data, errors)
        if not errors and mends(errors) == mended:
            return body  # nothing delivered: every byte as it came
        return dumps(data)
    except Untouched as exc:
        raise unwritten(exc, errors, mended, lambda: holds_foreign(body, errors, deliver)) from exc


def _deliver(data: Any, call: RpcCall, errors: list[dict[str, Any]]) -> None:
    """``errors`` into the first answer to ``call`` that takes them; every other answer under
    its id (a reused id hides none) gets the call's context."""
    answers = [m for m in (data if isinstance(data, list) else [data]) if same_id(m, call)]
    refused = Untouched("not the answer to the tool call", "unanswered")
    for taker in answers:
        try:
            inject_response(taker, call, errors)
            break
        except Untouched as exc:  # Unmendable too: its context may yet be mended below
            refused = exc
    else:
        raise refused
    if not isinstance(errors, Delivery) or errors.context is KEEP:
        return
    for answer in answers:
        if answer is not taker:
            errors.replaced += _own_context(answer, call, errors.context)


def _own_contexts(data: Any, calls: Sequence[RpcCall], delivery: Delivery) -> None:
    """A batch's answers, each with its own call's ``context`` (nothing else touched)."""
    for message in data if isinstance(data, list) else [data]:
        matching = [call for call in calls if same_id(message, call)]
        if len(matching) > 1:  # ids 1 and 1.0 are one number: the one typed alike is its
            alike = [call for call in matching if type(call.id) is type(message["id"])]
            matching = alike if len(alike) == 1 else matching
        if not matching:
            continue
        # Two calls under one id: whose answer it is cannot be told.
        call = matching[0]
        context = call.context if len(matching) == 1 else UNKNOWN
        delivery.replaced += _own_context(message, call, context)


def _own_context(message: Any, call: RpcCall, context: Any) -> int:
    """Give ``message``, an answer to ``call``, the ``context``; how many payloads it mended."""
    own = Delivery([], context)
    try:
        inject_response(message, call, own)
    except Unmendable:
        raise
    except Untouched:
        return 0  # an error reply, a task not completed: no payload of the kind to mend
    return own.replaced
