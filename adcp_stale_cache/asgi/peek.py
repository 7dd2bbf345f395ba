"""Reading a request as the app receives it: its JSON-RPC calls, its ``context`` and fields.

Nothing is parsed until asked, except JSON-RPC calls: their tool name sets the surface.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import Message, Receive, Scope

from ..codecs import RpcCall, Untouched, parse_calls
from ..codecs.json import KEEP, context_of, loads
from ..core.policy import SurfacePolicy, Surfaces
from ..pipeline.collector import STATE_KEY, UNREAD, RequestContext

#: JSON-RPC requests are small; a larger body is not read.
MAX_PEEK_BYTES = 1024 * 1024


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A request as the ``partition_from_call`` hook sees it: its ASGI ``scope``, its ``tool``
    (MCP tool, A2A skill or plain route's surface; None: unknown) and its ``arguments`` (None
    when there are none; a call that cannot be read never reaches the hook)."""

    scope: Scope
    tool: str | None
    arguments: Mapping[str, Any] | None


class RequestPeek:
    """One request's calls, ``context`` and fields, read off its POST body up to ``limit``."""

    __slots__ = (
        "_ahead",
        "_body",
        "_chunks",
        "_context",
        "_parsed",
        "_receive",
        "_size",
        "_surface",
        "calls",
        "declared",
        "limit",
        "oversized",
        "peeking",
        "scope",
        "surfaces",
    )

    def __init__(
        self,
        surfaces: Surfaces,
        context: RequestContext,
        scope: Scope,
        receive: Receive,
        limit: int = MAX_PEEK_BYTES,
        declared: bool = False,
    ) -> None:
        self.surfaces = surfaces
        self._context: RequestContext | None = context  # names the surface a call reads
        self._surface: SurfacePolicy | None = None  # the surface named, once detached
        self.scope = scope
        self.declared = declared  # a declared plain-JSON route: the body is the request
        self._body: bytes | None = None
        self._parsed: Any = KEEP  # the declared route's request, once read
        self._receive = receive
        self.limit = limit
        self.oversized = False  # too large to read: its calls, if any, are unknown
        self.calls: list[RpcCall] = []
        # Every POST body: a JSON body may come labelled text/plain, or not at all.
        self.peeking = scope.get("method") == "POST"
        self._chunks: list[bytes] = []
        self._size = 0
        self._ahead: deque[Message] | None = None  # read before the app asked: replayed to it

    async def receive(self) -> Message:
        """The app's ``receive``: what was read ahead first, then the request as it comes."""
        if self._ahead:
            return self._ahead.popleft()
        message = await self._receive()
        if self.peeking and message["type"] == "http.request":
            self._peek(message)
        return message

    async def read_ahead(self) -> None:
        """Read the body (up to ``limit``) before the app runs, and replay it to the app."""
        ahead: deque[Message] = deque()
        self._ahead = ahead
        while self.peeking:
            message = await self._receive()
            ahead.append(message)
            if message["type"] != "http.request":
                return
            self._peek(message)

    def unreadable(self) -> bool:
        """Whether the body holds a call that cannot be read: too large, a batch, not an object."""
        if self.oversized or len(self.calls) > 1:
            return True
        if self.calls or not self._body or not self._body.strip():
            return False
        return not isinstance(self._request(), dict)

    def _peek(self, message: Message) -> None:
        body = message.get("body", b"")
        self._size += len(body)
        if self._size > self.limit:
            self.peeking, self._chunks, self.oversized = False, [], True
        elif message.get("more_body", False):
            self._chunks.append(body)
        else:
            self.peeking = False
            if self._chunks:  # most bodies come in one message: no copy then
                body, self._chunks = b"".join((*self._chunks, body)), []
            if not self.declared:  # (no byte test: "json\u0072pc" is "jsonrpc" too)
                self._read_calls(body)
            if not self.calls:  # a plain JSON request: read if a context is in doubt
                self._body = body

    async def read_rest(self) -> None:
        """Read what the app left of the body (it failed early), to answer with its ``context``."""
        while self.peeking:
            if (await self.receive())["type"] != "http.request":
                return

    def context(self) -> Any:
        """The request's ``context``: ``NO_CONTEXT`` (none, or null), ``UNKNOWN`` (unreadable)."""
        return context_of(self._request())

    def field(self, name: str) -> Any:
        """A field of the AdCP request: None when absent, ``UNREAD`` when unreadable."""
        request = self._request()
        return request.get(name) if isinstance(request, dict) else UNREAD

    def call(self) -> ToolCall:
        """The request as a :class:`ToolCall`, read as far as it has been received."""
        request = self._request()
        surface = self._context.surface if self._context is not None else self._surface
        tool = self.calls[0].surface if len(self.calls) == 1 else None
        if tool is None and not self.calls and surface is not None:
            tool = surface.name
        return ToolCall(self.scope, tool, request if isinstance(request, dict) else None)

    def detach(self) -> None:
        """The request is answered: keep what a later reader asks (its surface, its scope
        without the collector), nothing that leads back to the collector. The request's
        objects then form no cycle: they are freed as it ends, not by the garbage collector
        (which cost a pass-through request 3% of its time)."""
        if self._context is not None:
            self._surface, self._context = self._context.surface, None
        self._receive = _disconnected  # a server's receive holds its own copy of the scope
        state = self.scope.get("state")
        if isinstance(state, dict) and STATE_KEY in state:
            kept = {name: value for name, value in state.items() if name != STATE_KEY}
            self.scope = {**self.scope, "state": kept}

    def _request(self) -> Any:
        """The one call's arguments, or the declared route's body (parsed once); else ``KEEP``."""
        if self.calls:
            return self.calls[0].arguments if len(self.calls) == 1 else KEEP
        if self._parsed is KEEP and self._body is not None:
            try:
                self._parsed = loads(self._body)
            except Untouched:
                self._parsed = None
        return self._parsed

    def _read_calls(self, body: bytes) -> None:
        self.calls = parse_calls(body)
        names = {call.surface for call in self.calls}
        policy = self.surfaces.find(names.pop()) if len(names) == 1 else None
        if policy is not None and self._context is not None:
            self._context.surface = policy
