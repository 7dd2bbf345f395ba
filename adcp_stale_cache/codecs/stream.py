"""Tool answers streamed as server-sent events (MCP SSE replies, A2A ``message/stream``).

Events pass on one by one as they complete. The event answering the tool call gets the
advisories: for MCP the JSON-RPC response itself; for an A2A stream, the last artifact event
carrying a DataPart, held back until the final status says whether the task completed
(artifacts come before the final status event, and a failed task must stay untouched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import a2a
from .json import Untouched, dumps, has_long_integer, loads, parse
from .jsonrpc import RpcCall, inject_response
from .sse import EventSplitter, event_data, rewrite_data

Errors = Callable[[], list[dict[str, Any]]]


class RpcEventStream:
    """Rewrite one SSE response answering ``call``; ``errors()`` gives the advisories so far."""

    def __init__(self, call: RpcCall, errors: Errors, on_untouched: Callable[[str], None]) -> None:
        self.call = call
        self.errors = errors
        self.on_untouched = on_untouched
        self._splitter = EventSplitter()
        self._held: bytes | None = None  # an A2A artifact event waiting for the final status

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to send now for this body chunk."""
        return b"".join(self._event(event) for event in self._splitter.feed(chunk))

    def close(self) -> bytes:
        """Bytes left to send when the stream ends."""
        return self._release(inject=False) + self._splitter.close()

    def _event(self, event: bytes) -> bytes:
        answer = _answer(event, self.call)
        if answer is None:
            return event
        message, data = answer
        if self.call.protocol == "mcp" or "error" in message:
            return self._rewritten(event, message, data)
        found = a2a.kind_of(message.get("result"))
        kind, obj = found if found else ("", {})
        if kind == "artifact" and self.errors() and _has_data_part(obj):
            out = self._release(inject=False)
            self._held = event
            return out
        if kind == "status" and a2a.is_terminal(obj):
            return self._release(inject=a2a.is_completed(obj)) + event
        if kind in ("task", "message"):
            return self._release(inject=False) + self._rewritten(event, message, data)
        return event

    def _rewritten(self, event: bytes, message: dict[str, Any], data: bytes) -> bytes:
        errors = self.errors()
        if not errors:
            return event
        if has_long_integer(data):
            message = parse(data)
        try:
            inject_response(message, self.call, errors)
        except Untouched as exc:
            self.on_untouched(str(exc))
            return event
        return rewrite_data(event, lambda _: dumps(message))

    def _release(self, *, inject: bool) -> bytes:
        held, self._held = self._held, None
        if held is None or not inject:
            return held or b""

        def add(data: bytes) -> bytes | None:
            message = parse(data)
            found = a2a.kind_of(message.get("result"))
            try:
                assert found is not None
                a2a.inject_parts(found[1].get("artifact", {}).get("parts"), self.errors())
            except Untouched as exc:
                self.on_untouched(str(exc))
                return None
            return dumps(message)

        return rewrite_data(held, add)


def _answer(event: bytes, call: RpcCall) -> tuple[dict[str, Any], bytes] | None:
    """The JSON-RPC message of an event when it answers ``call``, and the event's data."""
    data = event_data(event)
    if not data:
        return None
    try:
        # Fast parse to find the answer; an answer that gets rewritten is parsed again,
        # exactly, when it holds integers too long for orjson.
        message = loads(data)
    except Untouched:
        return None
    if isinstance(message, dict) and message.get("id") == call.id:
        return message, data
    return None


def _has_data_part(artifact_event: dict[str, Any]) -> bool:
    parts = (artifact_event.get("artifact") or {}).get("parts")
    return any(isinstance(p, dict) and isinstance(p.get("data"), dict) for p in parts or [])
