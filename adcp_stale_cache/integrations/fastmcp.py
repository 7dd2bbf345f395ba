"""fastmcp servers: advisories on every tool answer, however the server was started
(``fastmcp run``, ``server.run()``: no ASGI app of the seller's is in the path). Add
``server.add_middleware(AdvisoryMiddleware(cache=cache))``; needs the ``fastmcp`` extra.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastmcp.server.dependencies import get_http_request
from mcp.types import TextContent
from starlette.types import Scope

from ..asgi.middleware import surfaces_given
from ..asgi.peek import ToolCall
from ..asgi.tool_names import report_untooled, tool_names
from ..codecs import Untouched
from ..codecs.json import Delivery, context_of
from ..codecs.mcp import inject_tool_result
from ..core.keys import caller_partition
from ..core.policy import Surfaces
from ..pipeline.cache import UpstreamCache
from ..pipeline.collector import AdvisoryCollector, current_collector, use_collector
from ..pipeline.context import RequestContext

if TYPE_CHECKING:  # fastmcp ships no type information mypy could check a subclass against
    Middleware = object
else:
    from fastmcp.server.middleware import Middleware

logger = logging.getLogger("adcp_stale_cache.fastmcp")

# What partitions read for a call over no HTTP request (stdio, in memory): one caller.
_NO_REQUEST: Scope = {"type": "http", "headers": []}


@runtime_checkable
class _MayFail(Protocol):
    """A fastmcp 4 ``ToolResult``, which can say the tool failed (earlier ones raise)."""

    is_error: bool


class AdvisoryMiddleware(Middleware):
    """A fastmcp middleware: each tool answer carries the advisories of its stale data.

    ``cache`` (or its ``surfaces``) names the tools' surfaces; ``partition`` and
    ``partition_from_call`` are ``StaleAdvisoryMiddleware``'s.
    """

    def __init__(
        self,
        *,
        surfaces: Surfaces | None = None,
        cache: UpstreamCache | None = None,
        partition: Callable[[Scope], str | None] | None = caller_partition,
        partition_from_call: Callable[[ToolCall], str | None] | None = None,
    ) -> None:
        given = surfaces_given(cache, surfaces)
        if partition_from_call is not None and partition is not caller_partition:
            raise ValueError("pass partition= or partition_from_call=, not both")
        super().__init__()
        self.surfaces = given
        self.partition, self.partition_from_call = partition, partition_from_call
        #: Answers whose ``context`` was another request's (a cached value's), mended.
        self.contexts_replaced = 0
        self._checked = False

    async def on_message(self, context: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        """Check the server's tools at its first message (see :meth:`check_tools`)."""
        if not self._checked:
            self._checked = True
            # Under StaleAdvisoryMiddleware, that one checked the whole app at start-up.
            if current_collector() is None and context.fastmcp_context is not None:
                await self.check_tools(context.fastmcp_context.fastmcp)
        return await call_next(context)

    async def check_tools(self, server: object) -> None:
        """Log a WARNING for each surface without ``paths`` that no tool of ``server`` (a
        fastmcp server) is named after; await it in the server's lifespan to hear it at start."""
        names = await tool_names(server)
        if names is not None:
            untold = [policy for policy in self.surfaces.policies if not policy.paths]
            report_untooled(untold, names, complete=True)

    async def on_call_tool(self, context: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run the tool with a collector of its own, and add what it recorded to its result."""
        if current_collector() is not None:  # the outer layer delivers: one advisory, not two
            return await call_next(context)
        name, arguments = context.message.name, context.message.arguments or {}
        partition_of = self._partition_of(name, arguments)
        surface = self.surfaces.find(name)
        request = RequestContext(surface, None, partition_of, arguments.get)
        collector = AdvisoryCollector(counted_at_delivery=True, context=request)
        with use_collector(collector):
            try:
                result = await call_next(context)
            except BaseException:  # fastmcp answers it as an isError result
                collector.lost("is_error", "the tool raised: its answer is an error")
                collector.close()
                raise
        if collector or collector.trace.served_context:
            self._deliver(result, collector, context_of(arguments))
        collector.close()  # what a task outliving the call records is lost as it comes
        return result

    def _partition_of(
        self, tool: str, arguments: dict[str, Any]
    ) -> Callable[[], str | None] | None:
        if self.partition_from_call is None and self.partition is None:
            return None
        try:
            scope = get_http_request().scope
        except RuntimeError:  # no HTTP request (stdio, the in-memory client): one caller
            scope = _NO_REQUEST
        if self.partition_from_call is not None:
            return functools.partial(self.partition_from_call, ToolCall(scope, tool, arguments))
        assert self.partition is not None
        return functools.partial(self.partition, scope)

    def _deliver(self, result: Any, collector: AdvisoryCollector, request_context: Any) -> None:
        delivery = Delivery(collector.errors(), request_context)
        if isinstance(result, _MayFail) and result.is_error:
            collector.lost("is_error", "tool result has isError: true")
            return
        wire = {  # the result as the wire has it (its texts only), which the codec rewrites
            "structuredContent": copy.deepcopy(result.structured_content),
            "content": [
                {"type": "text", "text": block.text} if isinstance(block, TextContent) else {}
                for block in result.content
            ],
        }
        try:
            inject_tool_result(wire, delivery)
        except Untouched as exc:
            collector.lost(exc.reason, str(exc))
            return
        result.structured_content = wire["structuredContent"]
        result.content = [
            block.model_copy(update={"text": new["text"]})
            if isinstance(block, TextContent) and new["text"] != block.text
            else block
            for block, new in zip(result.content, wire["content"], strict=True)
        ]
        collector.delivered()
        if delivery.replaced:
            self._replaced()

    def _replaced(self) -> None:
        if not self.contexts_replaced:
            logger.warning(
                "answer_context_replaced: a tool answer carried a context that was not its "
                "own request's (a cached value's?): replaced by the request's (logged once; "
                "counted in contexts_replaced)"
            )
        self.contexts_replaced += 1
