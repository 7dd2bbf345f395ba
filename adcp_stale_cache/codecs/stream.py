"""Tool answers streamed as server-sent events (MCP SSE replies, A2A ``message/stream``).

An A2A artifact event is held until the final status says the task completed (a failed
task stays untouched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import a2a
from .json import (
    KEEP,
    Delivery,
    TooDeep,
    Unmendable,
    Untouched,
    compares,
    dumps,
    holds_foreign,
    may_name_twice,
    mends,
    parse,
    present,
    read,
    unwritten,
)
from .jsonrpc import RpcCall, inject_response, same_id
from .sse import EventSplitter, event_data, rewrite_data

Errors = Callable[[], list[dict[str, Any]]]
Written = Callable[[], None]


class RpcEventStream:
    """Rewrite one SSE response answering ``call`` with the advisories ``errors()`` gives;
    ``on_written`` and ``on_untouched`` hear whether they went in, ``on_unmended`` of an
    answer in doubt that could not be mended when no advisory was to go with it."""

    def __init__(
        self,
        call: RpcCall,
        errors: Errors,
        on_untouched: Callable[[Untouched], None],
        on_written: Written = lambda: None,
        on_unmended: Callable[[Unmendable], None] = lambda why: None,
    ) -> None:
        self.call = call
        self.errors = errors
        self.on_untouched, self.on_written = on_untouched, on_written
        self.on_unmended = on_unmended
        self._splitter = EventSplitter()
        # A held artifact event, then the events after it: none may overtake it.
        self._held: list[bytes] = []
        self._held_size = 0
        self.answered = False  # an event answered the call
        self.unread: TooDeep | None = None  # an event too deep to tell whether it answered

    def feed(self, chunk: bytes) -> bytes:
        """Bytes to send now for this body chunk."""
        return b"".join(self._event(event) for event in self._splitter.feed(chunk))

    def close(self) -> bytes:
        """Bytes left to send when the stream ends."""
        rest = self._splitter.close()
        out = (self._event(rest) if rest else b"") + self._release(inject=False)
        if self.unread is not None and not self.answered:
            errors = self.errors()  # the answer may have been the unread event: in doubt, said
            if _delivers(errors):
                doubt = compares(errors)
                self._said(unwritten(self.unread, errors, mends(errors), lambda: doubt), errors)
        return out

    def _event(self, event: bytes) -> bytes:
        try:
            answer = _answer(event, self.call)
        except TooDeep as exc:
            self.unread = exc
            return self._after_held(event)
        if answer is None:
            return self._after_held(event)
        self.answered = True
        message, data, exact = answer
        if self.call.protocol == "mcp" or present(message, "error"):
            return self._release(inject=False) + self._rewritten(event, message, data, exact)
        found = a2a.kind_of(message.get("result"))
        kind, obj = found if found else ("", {})
        if kind == "artifact" and _delivers(self.errors()) and _has_data_part(obj):
            out = self._release(inject=False)
            self._held, self._held_size = [event], len(event)
            return out
        if kind == "status" and a2a.is_terminal(obj):
            return self._release(inject=a2a.is_completed(obj)) + event
        if kind in ("task", "message"):  # a task still working: the advisories wait for its end
            alone = kind == "task" and not a2a.is_terminal(obj)
            return self._release(inject=False) + self._rewritten(event, message, data, exact, alone)
        return self._after_held(event)

    def _after_held(self, event: bytes) -> bytes:
        """Pass ``event`` on, or hold it behind a held artifact (bounded)."""
        if not self._held:
            return event
        self._held.append(event)
        self._held_size += len(event)
        if self._held_size <= _MAX_HELD_BYTES:
            return b""
        why = "A2A stream: no final status within 1 MiB of events after the artifact"
        self.on_untouched(Untouched(why, "too_large"))
        return self._release(inject=False)

    def _rewritten(
        self, event: bytes, message: dict[str, Any], data: bytes, exact: bool, alone: bool = False
    ) -> bytes:
        """``event`` with the advisories written in (its context ``alone``), or as it came."""
        errors = self.errors()
        if alone:
            del errors[:]
        if not _delivers(errors):
            return event

        def inject(message: Any, errors: list[dict[str, Any]]) -> None:
            inject_response(message, self.call, errors)

        written = self._written(errors, data, message if exact else None, inject)
        return event if written is None else rewrite_data(event, lambda _: written)

    def _release(self, *, inject: bool) -> bytes:
        """The held artifact and the events behind it; the advisories go in if ``inject``
        (the task completed), its own context in any case."""
        held, self._held, self._held_size = self._held, [], 0
        if not held:
            return b""
        errors = self.errors()
        if not inject:
            del errors[:]  # they wait for an answer that takes them, or are lost at the end
        if _delivers(errors):
            held[0] = rewrite_data(
                held[0], lambda data: self._written(errors, data, None, _inject_artifact)
            )
        return b"".join(held)

    def _written(
        self,
        errors: list[dict[str, Any]],
        data: bytes,
        message: Any,
        inject: Callable[[Any, list[dict[str, Any]]], None],
    ) -> bytes | None:
        """``data``'s message (``message``: read exactly already) with ``errors`` and its own
        context written in; None to send it as it came, and ``on_untouched`` hears why when
        advisories, or a context in doubt, could not be written."""
        mended = mends(errors)
        try:
            if message is None or (compares(errors) and may_name_twice(data)):
                message = parse(data, shadows=compares(errors))  # read exactly
            inject(message, errors)
            if not errors and mends(errors) == mended:
                return None  # its context was its own: every byte as it came
            written = dumps(message)
        except Untouched as exc:
            if errors and compares(errors):
                errors.replaced = mended  # (nothing was written)
                self.on_untouched(Untouched(str(exc), exc.reason))  # lost; the context alone:
                del errors[:]
                return self._written(errors, data, None, inject)
            why = unwritten(exc, errors, mended, lambda: holds_foreign(data, errors, inject))
            self._said(why, errors)
            return None
        if errors:
            self.on_written()
        return written

    def _said(self, why: Untouched, errors: list[dict[str, Any]]) -> None:
        """Advisories that could not go in are lost; a context alone is said."""
        if errors:
            self.on_untouched(why)
        elif isinstance(why, Unmendable):
            self.on_unmended(why)


def _inject_artifact(message: Any, errors: list[dict[str, Any]]) -> None:
    found = a2a.kind_of(message.get("result") if isinstance(message, dict) else None)
    if found is None or found[0] != "artifact":
        raise Untouched("not an A2A artifact event")
    artifact = found[1].get("artifact")
    a2a.inject_parts(artifact.get("parts") if isinstance(artifact, dict) else None, errors)


_MAX_HELD_BYTES = 1024 * 1024


def _answer(event: bytes, call: RpcCall) -> tuple[dict[str, Any], bytes, bool] | None:
    """The JSON-RPC message of an event answering ``call``, its data, and whether it
    re-encodes exactly; :class:`TooDeep` when the event cannot be read at all."""
    data = event_data(event)
    if not data:
        return None
    try:
        message, exact = read(data)
    except TooDeep:
        raise  # whose answer it is cannot be told
    except Untouched:
        return None
    if same_id(message, call):
        return message, data, exact
    return None


def _delivers(errors: list[dict[str, Any]]) -> bool:
    """Whether an answer may be rewritten: advisories to add, or a context in doubt."""
    return bool(errors) or (isinstance(errors, Delivery) and errors.context is not KEEP)


def _has_data_part(artifact_event: dict[str, Any]) -> bool:
    artifact = artifact_event.get("artifact")
    parts = artifact.get("parts") if isinstance(artifact, dict) else None
    return isinstance(parts, list) and any(
        isinstance(p, dict) and isinstance(p.get("data"), dict) for p in parts
    )
