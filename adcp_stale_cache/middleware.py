"""Pure ASGI middleware: one collector per request, advisories appended to the payload.

Mount it inside any compression middleware (it must see the JSON, not gzip)::

    app.add_middleware(StaleAdvisoryMiddleware, surfaces=cache.surfaces)

When the request recorded no advisory, every response message passes straight through,
unbuffered and byte for byte. Otherwise a 2xx JSON object body is buffered, its ``errors[]``
extended (one ``STALE_RESPONSE`` per stale upstream), ``Content-Length`` recomputed, and the
status kept. Anything else goes out untouched, with a log line saying why.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .codecs import Untouched, inject_json
from .collector import AdvisoryCollector, _current
from .policy import Surfaces

logger = logging.getLogger("adcp_stale_cache.middleware")

#: Where the request's collector is kept in ``scope["state"]`` (``request.state``).
STATE_KEY = "adcp_stale_cache"


class StaleAdvisoryMiddleware:
    """Attach each request's ``STALE_RESPONSE`` advisories to its response payload."""

    def __init__(self, app: ASGIApp, *, surfaces: Surfaces | None = None) -> None:
        self.app = app
        self.surfaces = surfaces or Surfaces()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        collector = AdvisoryCollector(self.surfaces.for_path(scope.get("path", "")))
        scope.setdefault("state", {})[STATE_KEY] = collector
        token = _current.set(collector)
        try:
            await self.app(scope, receive, _Response(collector, scope, send).send)
        finally:
            _current.reset(token)


class _Response:
    """The state of one response: passing through, or buffering a body to rewrite."""

    __slots__ = ("_send", "buffering", "chunks", "collector", "passing", "scope", "start")

    def __init__(self, collector: AdvisoryCollector, scope: Scope, send: Send) -> None:
        self.collector = collector
        self.scope = scope
        self._send = send
        self.passing = False
        self.buffering = False
        self.start: Message = {}
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if self.passing:
            await self._send(message)
        elif message["type"] == "http.response.start":
            self._begin(message)
            if self.passing:
                await self._send(message)
        elif message["type"] == "http.response.body" and self.buffering:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._finish()
        else:
            await self._send(message)

    def _begin(self, start: Message) -> None:
        if not self.collector:
            self.passing = True
            return
        reason = _ineligible(self.scope, start)
        if reason is not None:
            _dropped(self.collector, reason, warn=reason.startswith("Content-Encoding"))
            self.passing = True
            return
        self.start = start
        self.buffering = True

    async def _finish(self) -> None:
        body = b"".join(self.chunks)
        self.chunks = []
        try:
            body = inject_json(body, self.collector.errors())
        except Untouched as exc:
            _dropped(self.collector, str(exc))
        headers = [
            (k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        await self._send({**self.start, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


def _ineligible(scope: Scope, start: Message) -> str | None:
    """Why a response cannot carry advisories, or None when it can."""
    status = int(start.get("status", 200))
    if not 200 <= status < 300 or status == 204:
        return f"status {status}"
    if scope.get("method") == "HEAD":
        return "HEAD request"
    headers = _headers(start)
    if headers.get(b"content-encoding", b"identity") != b"identity":
        return "Content-Encoding is set: mount this middleware inside compression middleware"
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if content_type != b"application/json" and not content_type.endswith(b"+json"):
        return f"content type {content_type.decode('latin-1') or 'missing'}"
    return None


def _headers(start: Message) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in start.get("headers", [])}


def _dropped(collector: AdvisoryCollector, reason: str, *, warn: bool = False) -> None:
    names: list[Any] = [
        (a.details or {}).get("upstream", {}).get("name") for a in collector.advisories()
    ]
    logger.log(
        logging.WARNING if warn else logging.INFO,
        "advisories_not_delivered count=%d upstreams=%s reason=%s",
        len(collector),
        names,
        reason,
    )
