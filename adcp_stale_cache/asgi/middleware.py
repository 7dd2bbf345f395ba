"""Pure ASGI middleware: one collector per request, its advisories appended to the answer.

Mount it inside any compression middleware: it must see the JSON, not gzip. An answer with
nothing to add or check passes through byte for byte. Transports: docs/transports.md.
"""

from __future__ import annotations

import functools
import logging
import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..codecs import Untouched
from ..codecs.json import NO_CONTEXT, UNKNOWN, dumps
from ..core.advisory import failed_payload, service_unavailable
from ..core.failures import UpstreamUnavailable
from ..core.keys import CREDENTIAL_HEADERS, caller_partition
from ..core.policy import SurfacePolicy, Surfaces
from ..pipeline.collector import STATE_KEY, AdvisoryCollector, enter_request, leave_request
from .peek import MAX_PEEK_BYTES, RequestPeek, ToolCall
from .responders import Answer
from .routes import routes_of, unserved
from .tool_names import report_untooled, served_names, tool_space

if TYPE_CHECKING:
    from ..pipeline.cache import UpstreamCache
if sys.version_info < (3, 11):  # anyio raises the backport's groups there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

logger = logging.getLogger("adcp_stale_cache.middleware")


def surfaces_given(cache: UpstreamCache | None, surfaces: Surfaces | None) -> Surfaces:
    """The surfaces a middleware serves: the cache's, given once (or ``surfaces`` alone)."""
    if cache is not None and surfaces is not None and surfaces is not cache.surfaces:
        raise ValueError("surfaces= is not cache.surfaces: pass cache= alone, it gives them")
    return cache.surfaces if cache is not None else surfaces or Surfaces()


class StaleAdvisoryMiddleware:
    """Attach each request's ``STALE_RESPONSE`` advisories to its response payload.

    ``cache=`` takes the cache's surfaces; ``surfaces=`` gives them without a cache."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        cache: UpstreamCache | None = None,
        surfaces: Surfaces | None = None,
        partition: Callable[[Scope], str | None] | None = caller_partition,
        partition_from_call: Callable[[ToolCall], str | None] | None = None,
        stale_headers: bool = True,
        max_peek_bytes: int = MAX_PEEK_BYTES,
    ) -> None:
        given = surfaces_given(cache, surfaces)
        if partition_from_call is not None and partition is not caller_partition:
            raise ValueError("pass partition= or partition_from_call=, not both")
        self.app = app
        self.max_peek_bytes = max_peek_bytes
        self.surfaces = given
        self.partition = partition
        self.partition_from_call = partition_from_call
        partitioned = partition is not None or partition_from_call is not None
        # Bound once, not per request.
        self._partition_by = self._partition if partitioned else None
        self._count_replaced = self._replaced
        self.stale_headers = stale_headers
        #: Answers whose ``context`` was another request's, given their own request's.
        self.contexts_replaced = 0
        self._warned_unread_credential = False
        # Templated paths (``/api/{tenant}/get_products``) match as Starlette routes do.
        declared = [
            (path.rstrip("/") or "/", policy)
            for policy in self.surfaces.policies
            for path in policy.paths
        ]
        self._by_path = {path: policy for path, policy in declared if "{" not in path}
        self._templated = [
            (compile_path(path)[0], policy) for path, policy in declared if "{" in path
        ]

    def _partition(self, request: RequestPeek) -> str | None:
        """The caller's partition, asked on first use (``partition_from_call``: body read ahead)."""
        if self.partition_from_call is not None:
            if request.unreadable():  # no principal can be told: this request's alone
                logger.info(
                    "partition_private: the request's call could not be read (too large, "
                    "a batch, not a JSON object): its entries are its own"
                )
                return f"private:{uuid.uuid4().hex}"
            return self.partition_from_call(request.call())
        assert self.partition is not None
        if not self._warned_unread_credential and self.partition is caller_partition:
            # Arguments only as read already (a JSON-RPC call's): no body parsed for this.
            one_call = request.calls[0].arguments if len(request.calls) == 1 else None
            unread = _unread_credential(request.scope, one_call)
            if unread is not None:
                self._warned_unread_credential = True
                logger.warning(
                    "partition_ignores_credential: a surface keys its entries per caller, "
                    "but a request carried %s, which the default partition does not read "
                    "(it reads %s and the host): callers told apart by it alone would share "
                    "entries. Pass partition= or partition_from_call= to name the principal, "
                    "or mark public surfaces shared_across_callers=True",
                    unread,
                    ", ".join(CREDENTIAL_HEADERS),
                )
        return self.partition(request.scope)

    async def _started(self, scope: Scope, send: Send, message: Message) -> None:
        """On ``lifespan.startup.complete``, report unserved surfaces: no request came yet."""
        if message["type"] == "lifespan.startup.complete":
            await self.report_unserved(scope.get("app", self.app))
        await send(message)

    async def report_unserved(self, app: object) -> None:
        """Log a WARNING per surface no route or fastmcp tool serves, an INFO where the app's
        routes or tools cannot be read. Run at start-up."""
        routes = routes_of(self.app)  # the wrapped router, else the app that added us
        root = self.app if routes is not None else app
        routes = routes_of(app) if routes is None else routes
        missing, unknown = (
            unserved(routes, self.surfaces) if routes is not None else ([], self.surfaces.policies)
        )
        space = tool_space(root, self.surfaces)
        names = await served_names(space)
        tooled = names or frozenset()  # a surface named after a served tool is served
        for policy in missing:
            if policy.name not in tooled:
                logger.warning(
                    "surface_unserved surface=%s paths=%s: the app serves no route there "
                    "(paths are matched without the app's root_path): its requests would "
                    "fall to the default policy",
                    policy.name,
                    list(policy.paths),
                )
        for policy in unknown:
            if policy.paths and policy.name not in tooled:
                logger.info(
                    "surface_routes_unknown surface=%s paths=%s: the app's routes there "
                    "cannot be read (not a Starlette app or router)",
                    policy.name,
                    list(policy.paths),
                )
        if names is not None:
            untold = [policy for policy in self.surfaces.policies if not policy.paths]
            report_untooled(untold, names, complete=not space.opaque)

    def _replaced(self) -> None:
        if not self.contexts_replaced:
            logger.warning(
                "answer_context_replaced: an answer carried a context that was not its own "
                "request's (a cached value's?): replaced by the request's. Echo the request's "
                "context in your tool rather than a cached one (logged once; counted in "
                "contexts_replaced)"
            )
        self.contexts_replaced += 1

    def _surface_at(self, path: str) -> SurfacePolicy | None:
        surface = self._by_path.get(path)
        if surface is None and path.endswith("/"):
            surface = self._by_path.get(path.rstrip("/") or "/")
        for template, policy in self._templated if surface is None else ():
            if template.match(path.rstrip("/") or "/"):
                return policy
        return surface

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                send = functools.partial(self._started, scope, send)
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        root = scope.get("root_path")
        surface = None if root else self._by_path.get(path)  # the common case, in one look
        if surface is None:
            surface = self._surface_at(route_path(scope))
            if surface is None and root:  # paths declared with their prefix
                surface = self._surface_at(path)
        # A declared route is plain JSON: its body holds no JSON-RPC call to look for.
        request = RequestPeek(
            self.surfaces,
            surface,
            scope,
            receive,
            self._partition_by,
            self.max_peek_bytes,
            surface is not None,
        )
        collector = AdvisoryCollector(None, None, None, True, request)  # counted at delivery
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        state[STATE_KEY] = collector
        read_ahead = request.peeking and self.partition_from_call is not None
        if request.peeking:
            receive = request.receive
        answer = Answer(collector, request, send, self.stale_headers, self._count_replaced)
        token = enter_request(collector)
        try:
            if read_ahead:  # the hook sees the call, however early
                await request.read_ahead()
            await self.app(scope, receive, answer.send)
        except Exception as exc:
            unavailable = upstream_unavailable(exc)
            try:
                if unavailable is None or answer.forward is not None:  # (answered: too late)
                    raise
                await _unavailable(unavailable, collector, request, send)
            finally:
                unavailable = None  # it holds its traceback, which holds this frame
        finally:
            leave_request(token)
            answer.close()
            request.detach()
        if collector.trace.served_context:
            answer.check_late_context()


def upstream_unavailable(error: BaseException) -> UpstreamUnavailable | None:
    """``error`` if an :class:`UpstreamUnavailable`, or the first leaf of an exception group
    all of whose leaves are; else None."""
    if isinstance(error, UpstreamUnavailable):
        return error
    if isinstance(error, BaseExceptionGroup):
        leaves = [upstream_unavailable(leaf) for leaf in error.exceptions]
        return leaves[0] if all(leaves) else None
    return None


async def _unavailable(
    error: UpstreamUnavailable, collector: AdvisoryCollector, request: RequestPeek, send: Send
) -> None:
    """Answer the fatal ``SERVICE_UNAVAILABLE`` from the failure's sanitised message."""
    surface = collector.surface
    failure = service_unavailable(error, surface.field if surface is not None else None)
    await request.read_rest()
    context = request.context()
    own = None if context is NO_CONTEXT or context is UNKNOWN else context
    try:
        status, body = _failure_answer(request, failure.to_dict(), own)
    except Untouched:  # a context nested past what re-encodes: the answer goes without it
        status, body = _failure_answer(request, failure.to_dict(), None)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if failure.retry_after is not None:
        headers.append((b"retry-after", b"%d" % failure.retry_after))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    logger.info("upstream_unavailable_answered upstream=%s status=%d", error.upstream.name, status)


def _failure_answer(request: RequestPeek, error: dict[str, Any], context: Any) -> tuple[int, bytes]:
    """A 503 JSON body, or for one MCP call an ``isError`` tool result (as MCP servers do)."""
    payload = failed_payload([error], context)
    if len(request.calls) == 1 and request.calls[0].protocol == "mcp":
        text = dumps(payload).decode()
        content = [{"type": "text", "text": text}]
        result = {"content": content, "structuredContent": payload, "isError": True}
        return 200, dumps({"jsonrpc": "2.0", "id": request.calls[0].id, "result": result})
    return 503, dumps(payload)


def route_path(scope: Scope) -> str:
    """The path routes match: ``scope["path"]`` less ``root_path``, as Starlette reads it."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :] or "/"
    return path


# Credential-like names the default partition does not read may be what tells callers apart.
_CREDENTIAL_WORDS = ("auth", "token", "principal", "secret", "api-key", "api_key", "tenant")
_READ_HEADERS = frozenset(name.encode() for name in CREDENTIAL_HEADERS)


def _unread_credential(scope: Scope, arguments: Any) -> str | None:
    """A credential-like name the default partition does not read (``header x-auth-token``)."""
    for name, _ in scope.get("headers", ()):
        if name.lower() not in _READ_HEADERS and _credential_like(name.decode("latin-1")):
            return f"header {name.decode('latin-1').lower()}"
    for pair in scope.get("query_string", b"").decode("latin-1").split("&"):
        key = pair.split("=")[0]
        if key and _credential_like(key):
            return f"query parameter {key}"
    for key in arguments if isinstance(arguments, dict) else ():
        if isinstance(key, str) and _credential_like(key):
            return f"tool argument {key}"
    return None


def _credential_like(name: str) -> bool:
    name = name.lower().replace("apikey", "api-key")
    return any(word in name for word in _CREDENTIAL_WORDS)
