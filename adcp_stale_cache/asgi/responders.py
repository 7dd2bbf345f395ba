"""How the middleware writes one answer: untouched, or through a small responder picked at
the response's start (Starlette's ``GZipResponder`` is the model).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Message, Scope, Send

from ..codecs import RpcEventStream, Untouched, inject_body, inject_json
from ..codecs.json import KEEP, Delivery, Unmendable, delivery
from ..core.advisory import NO_ERRORS_MEMBER
from ..pipeline.collector import AdvisoryCollector
from .peek import RequestPeek

logger = logging.getLogger("adcp_stale_cache.middleware")  # the middleware's lines, as before

_JSON = frozenset({b"application/json", b"application/json-rpc"})
_EVENTS = b"text/event-stream"


class Answer:
    """One request's answer: through the responder picked at its start, or straight on."""

    __slots__ = (
        "collector",
        "downstream",
        "forward",
        "in_doubt",
        "replaced",
        "request",
        "stale_headers",
    )

    def __init__(
        self,
        collector: AdvisoryCollector,
        request: RequestPeek,
        send: Send,
        stale_headers: bool,
        replaced: Callable[[], None],
    ) -> None:
        self.collector = collector
        self.request = request
        self.downstream = send
        self.stale_headers = stale_headers
        self.replaced = replaced  # the middleware's count of answers given their own context
        self.forward: Send | None = None  # who writes the answer, once it has started
        self.in_doubt = False  # the cache had served a value holding a context at the start

    def send(self, message: Message) -> Awaitable[None]:
        """The app's ``send``: the writer's own awaitable, handed back (no frame of ours)."""
        forward = self.forward if self.forward is not None else self._begin(message)
        return forward(message)

    def _begin(self, start: Message) -> Send:
        """Who writes the answer ``start`` starts (or where a message before it goes)."""
        if start["type"] != "http.response.start":  # an early hint, say
            return self.downstream
        self.forward = self.downstream
        collector, calls = self.collector, len(self.request.calls)
        self.in_doubt = collector.trace.served_context
        # Unsettled: recorded, not yet written. Read directly, the common case pays no call.
        advisories = bool(collector.unsettled)
        if advisories or calls or self.in_doubt:  # else the common case: nothing to do
            chosen = responder_for(start, self.request.scope, calls, advisories, self.in_doubt)
            if isinstance(chosen, Untouched):
                if advisories:
                    self.dropped(chosen)
                if self.in_doubt and chosen.reason != "no_body":
                    _unchecked(str(chosen))
            elif chosen is not None:
                self.forward = chosen(self).send
        return self.forward

    def pass_rest(self) -> None:
        """Send the rest of the answer on as it comes."""
        self.forward = self.downstream

    def delivery(self) -> Delivery:
        """The advisories to deliver now, and the request's context if the answer's may not be."""
        errors = self.collector.errors()
        if errors and self.request.call().tool in NO_ERRORS_MEMBER:
            why = "the tool's answers have no errors[] (tell it in incomplete[])"
            self.dropped(Untouched(why, "no_errors_member"))
            errors = []
        return delivery(errors, self.request.context, self.collector.trace.served_context)

    def dropped(self, why: Untouched) -> None:
        """The answer goes without the advisories not yet delivered: counted lost."""
        if self.request.oversized:  # its call unread, so its answer could not be found
            unread = "the request body was too large to read its call: max_peek_bytes"
            self.collector.lost("too_large", f"{why} ({unread})")
        else:
            self.collector.lost(why.reason, str(why))

    def close(self) -> None:
        """The app is done: advisories no answer carried are lost, and why."""
        if self.collector.unsettled:
            self.dropped(_NO_ANSWER if self.forward is None else _AFTER_START)
        self.collector.close()
        if self.forward is not self.downstream:  # a responder's, which holds this answer:
            self.forward = None  # let go, so the two form no cycle

    def check_late_context(self) -> None:
        """Warn when a value holding a context was served after this answer had started."""
        if (
            self.collector.trace.served_context
            and self.forward is self.downstream
            and not self.in_doubt
        ):
            _unchecked("only once the answer had started")


def responder_for(
    start: Message, scope: Scope, calls: int, advisories: bool, in_doubt: bool
) -> type[JsonResponder | EventStreamResponder] | Untouched | None:
    """Who writes an answer starting with ``start``: a responder, None (it passes as it came),
    or why it cannot be touched (it passes too: advisories lost, or context unchecked)."""
    why = _ineligible(scope, start)
    media = _content_type(start.get("headers", []))
    if why is None and media == _EVENTS and calls == 1:
        return EventStreamResponder  # its one call's answer, found event by event
    if not advisories and not in_doubt:
        return None  # nothing to add, nothing to check
    if why is not None:  # an error status, no body, a compressed one
        return why
    if media in _JSON or (not advisories and media != _EVENTS):
        return JsonResponder  # a context in doubt is read as JSON whatever the label
    if advisories:
        return Untouched(f"content type {media.decode('latin-1') or 'missing'}", "not_json")
    return Untouched("the answer is an event stream of no single readable call")


class JsonResponder:
    """Buffer a JSON body, then append the advisories to its payload (every call's answer in
    a JSON-RPC body) and mend its context; an answer left unchanged goes as it came."""

    __slots__ = ("answer", "chunks", "start")

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.start: Message = {}
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
        elif message["type"] != "http.response.body":  # http.response.pathsend, say
            self.answer.dropped(Untouched(f"{message['type']} body", "file_body"))
            self.answer.pass_rest()
            await self.answer.downstream(self.start)
            await self.answer.downstream(message)
        else:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._finish(b"".join(self.chunks))

    async def _finish(self, body: bytes) -> None:
        self.chunks = []
        answer, calls = self.answer, self.answer.request.calls
        errors = answer.delivery()
        injected = False
        try:
            body = self._written(body, errors)
            injected = bool(errors)
        except Untouched as exc:
            why: Untouched | None = exc
            if errors:  # lost (a failed task, a batch...): the context may yet be mended alone
                refusal = exc.__cause__ if isinstance(exc.__cause__, Untouched) else exc
                answer.dropped(refusal)
                errors = Delivery([], errors.context)
                if errors.context is not KEEP:
                    try:
                        body, why = self._written(body, errors), None
                    except Untouched as again:
                        why = again
            if isinstance(why, Unmendable):
                _unmended(why)
            elif errors.context is not KEEP and why is not None and why.reason in _UNREAD:
                _unchecked(str(why))
        if errors.replaced:
            answer.replaced()  # one answer (its payload and any mirror of it)
        if injected:
            answer.collector.delivered()
        start = self.start
        if injected or errors.replaced:
            replaced = (b"content-length", b"age", b"cache-status")
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in replaced]
            headers.append((b"content-length", str(len(body)).encode()))
            if injected and answer.stale_headers and not calls:
                headers.extend(_http_cache_headers(errors))
            start = {**start, "headers": headers}
        await answer.downstream(start)  # else as it came, headers too
        await answer.downstream({"type": "http.response.body", "body": body, "more_body": False})

    def _written(self, body: bytes, errors: Delivery) -> bytes:
        request = self.answer.request
        if request.calls:
            return inject_body(body, request.calls, errors)
        # On a route not declared plain, JSON-RPC answers belong to calls, never here.
        return inject_json(body, errors, rpc_is_envelope=not request.declared)


class EventStreamResponder:
    """Rewrite an event stream answering one call, event by event: the advisories go into
    the event that answers the call (see :class:`~.codecs.RpcEventStream`)."""

    __slots__ = ("answer", "deliveries", "stream")

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.deliveries: list[Delivery] = []  # what was handed over, context mends counted
        # Callbacks over the answer, not this responder: the stream it holds holds them.
        self.stream = RpcEventStream(
            answer.request.calls[0],
            functools.partial(_delivery, answer, self.deliveries),
            functools.partial(_untouched, answer),
            answer.collector.delivered,
            _unmended,
        )

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":  # its length changes as it is rewritten
            headers = message.get("headers", [])
            message["headers"] = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            await self.answer.downstream(message)
        elif message["type"] != "http.response.body":
            await self.answer.downstream(message)
        else:
            more = message.get("more_body", False)
            body = self.stream.feed(message.get("body", b""))
            if not more:
                body += self.stream.close()
            if not more and any(found.replaced for found in self.deliveries):
                self.answer.replaced()
            unsaid = not self.stream.answered and self.stream.unread is None  # (else said)
            if not more and unsaid and self.answer.in_doubt:
                _unchecked("no event of the stream answered the call")
            if body or not more:
                await self.answer.downstream(
                    {"type": "http.response.body", "body": body, "more_body": more}
                )


def _delivery(answer: Answer, deliveries: list[Delivery]) -> Delivery:
    found = answer.delivery()
    deliveries.append(found)
    return found


def _untouched(answer: Answer, why: Untouched) -> None:
    answer.dropped(why)  # advisories pending counted lost (none: nothing to count)
    if isinstance(why, Unmendable):
        _unmended(why)


def _unmended(why: Unmendable) -> None:
    logger.warning("answer_context_not_mended reason=%s", why)


#: Why an answer in doubt was never compared: said as unchecked.
_UNREAD = ("unanswered", "call_unread")
_NO_ANSWER = Untouched("the app sent no answer to write them into", "no_answer")
_AFTER_START = Untouched(
    "recorded after the response started, or no event of the stream answered the call",
    "after_start",
)


def _unchecked(why: str) -> None:
    """A value holding a context was served to a request whose answer cannot be checked."""
    logger.warning(
        "answer_context_unchecked: the cache served a value holding a context, but %s: "
        "it went out as the app wrote it",
        why,
    )


def _http_cache_headers(errors: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    """``Age`` and RFC 9211 ``Cache-Status`` of a stale plain-HTTP answer (its oldest part)."""
    details = [e.get("details") or {} for e in errors]
    oldest = max(details, key=lambda d: int(d.get("cache_age_seconds", 0)))
    age = int(oldest.get("cache_age_seconds", 0))
    ttl = int(oldest.get("freshness_target_seconds", 0)) - age
    status = f"adcp-stale-cache; fwd=stale; ttl={ttl}".encode()
    return [(b"age", str(age).encode()), (b"cache-status", status)]


def _ineligible(scope: Scope, start: Message) -> Untouched | None:
    """Why a response cannot carry advisories, or None when it may."""
    status = int(start.get("status", 200))
    if not 200 <= status < 300 or status == 204:
        return Untouched(f"status {status}", "error_status" if status >= 400 else "no_body")
    if scope.get("method") == "HEAD":
        return Untouched("HEAD request", "no_body")
    for key, value in start.get("headers", []):
        if key.lower() == b"content-encoding" and value.lower() != b"identity":
            why = "Content-Encoding is set: mount this middleware inside compression middleware"
            return Untouched(why, "compressed")
    return None


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes:
    for key, value in headers:
        if key.lower() == b"content-type":
            media = value.split(b";")[0].strip().lower()
            return b"application/json" if media.endswith(b"+json") else media
    return b""
