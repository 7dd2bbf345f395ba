"""Reading a request as the app receives it: its JSON-RPC calls, its ``context`` and fields.

Nothing is parsed until asked, except JSON-RPC calls: their tool name sets the surface.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import Message, Receive, Scope

from ..codecs import RpcCall, Untouched, parse_calls
from ..codecs.json import KEEP, context_of, loads
from ..core.policy import SurfacePolicy, Surfaces
from ..pipeline.collector import STATE_KEY
from ..pipeline.context import UNREAD, RequestContext, no_field

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


class RequestPeek(RequestContext):
    """One request's context, read off the request itself: its surface (named by its
    JSON-RPC call, if any), its caller's partition (asked of ``partition_by`` on first use),
    and its calls, ``context`` and fields, read off its POST body up to ``limit``."""

    __slots__ = (
        "_ahead",
        "_body",
        "_chunks",
        "_parsed",
        "_partition_by",
        "_receive",
        "_size",
        "_unread",
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
        surface: SurfacePolicy | None,
        scope: Scope,
        receive: Receive,
        partition_by: Callable[[RequestPeek], str | None] | None = None,
        limit: int = MAX_PEEK_BYTES,
        declared: bool = False,
    ) -> None:
        # The context's own fields, set here: its __init__ would cost every request a call.
        self.surface = surface
        self._partition = self._partition_of = self._budget = None
        self._fields = no_field  # (unused: fields are read off the body)
        self.in_flight = False
        self._partition_by = partition_by  # of this request: asked with it, not a closure
        self.surfaces = surfaces
        self.scope = scope
        self.declared = declared  # a declared plain-JSON route: the body is the request
        self._body: bytes | None = None
        self._parsed: Any = KEEP  # the declared route's request, once read
        self._receive = receive
        self.limit = limit
        self.oversized = False  # too large to read: its calls, if any, are unknown
        self.calls: Sequence[RpcCall] = ()
        # Every POST body: a JSON body may come labelled text/plain, or not at all.
        self.peeking = scope.get("method") == "POST"
        self._unread = UNREAD if self.peeking else None  # a field of a bodiless request: none
        self._chunks: list[bytes] | None = None
        self._size = 0
        self._ahead: deque[Message] | None = None  # read before the app asked: replayed to it

    @property
    def partition(self) -> str | None:
        """The cache partition of the request's caller, asked on first use: of the request,
        or of what :meth:`partition_from` named since."""
        if self._partition_by is not None:
            self._partition, self._partition_by = self._partition_by(self), None
        elif self._partition_of is not None:
            self._partition, self._partition_of = self._partition_of(), None
        return self._partition

    def partition_from(self, partition_of: Callable[[], str | None]) -> None:
        """Compute the partition with ``partition_of`` on first use, not from the request."""
        self._partition_by = None
        super().partition_from(partition_of)

    def _partition_unasked(self) -> tuple[str | None, Callable[[], str | None] | None]:
        """The partition if asked already, else how to ask it (of this request, or as named)."""
        if self._partition_by is not None:
            return None, functools.partial(self._partition_by, self)
        return super()._partition_unasked()

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
            self.peeking, self._chunks, self.oversized = False, None, True
        elif message.get("more_body", False):
            if self._chunks is None:
                self._chunks = []
            self._chunks.append(body)
        else:
            self.peeking = False
            if self._chunks:  # most bodies come in one message: no copy then
                body, self._chunks = b"".join((*self._chunks, body)), None
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

    def request_field(self, name: str) -> Any:
        """A field of the AdCP request: None when absent (or no body), ``UNREAD`` when
        unreadable."""
        request = self._request()
        return request.get(name) if isinstance(request, dict) else self._unread

    def call(self) -> ToolCall:
        """The request as a :class:`ToolCall`, read as far as it has been received."""
        request = self._request()
        tool = self.calls[0].surface if len(self.calls) == 1 else None
        if tool is None and not self.calls and self.surface is not None:
            tool = self.surface.name
        return ToolCall(self.scope, tool, request if isinstance(request, dict) else None)

    def detach(self) -> None:
        """The request is answered: keep what a later reader asks (its scope without the
        collector), nothing that leads back to the collector. The request's objects then
        form no cycle: they are freed as it ends, not by the garbage collector (which cost a
        pass-through request 3% of its time)."""
        self._receive = _disconnected  # a server's receive holds its own copy of the scope
        state = self.scope.get("state")
        if isinstance(state, dict) and STATE_KEY in state:
            if len(state) == 1:  # ours alone: its copy would be empty
                kept = {}
            else:
                kept = state.copy()
                del kept[STATE_KEY]
            scope = dict(self.scope)  # (a dict's own copy: quicker than {**scope, ...})
            scope["state"] = kept
            self.scope = scope

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
        if policy is not None:
            self.surface = policy
