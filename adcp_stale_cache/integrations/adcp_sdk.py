"""The ``adcp`` SDK server (``adcp.server.serve``): a skill middleware, a decorator for
idempotent tools and the test controller; the ASGI middleware works there too (docs:
Transports). Needs the ``adcp`` extra.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from ..codecs import Untouched, inject_payload
from ..codecs.json import KEEP, NO_CONTEXT, Delivery, context_of, delivery
from ..core.advisory import NO_ERRORS_MEMBER
from ..core.keys import digest
from ..core.policy import Surfaces
from ..pipeline.cache import UpstreamCache
from ..pipeline.collector import AdvisoryCollector, Collecting, current_collector
from ..pipeline.context import UNREAD, RequestContext

logger = logging.getLogger("adcp_stale_cache.adcp_sdk")

Handler = Callable[..., Awaitable[Any]]
SkillMiddleware = Callable[[str, dict[str, Any], Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]


def skill_middleware(surfaces: Surfaces) -> SkillMiddleware:
    """A ``serve(middleware=[...])`` entry adding this dispatch's advisories to its result."""

    async def stale_advisories(
        skill_name: str,
        params: dict[str, Any],
        context: Any,
        call_next: Callable[[], Awaitable[Any]],
    ) -> Any:
        # No ASGI request here: the ToolContext names the principal, the params the request.
        surface, partition = surfaces.find(skill_name), principal_partition(context)
        with Collecting(surface, partition, params, counted_at_delivery=True) as collector:
            result = await call_next()
        # The SDK echoes the request's context only into an answer that has none.
        found = delivery(
            collector.errors(), lambda: context_of(params), collector.trace.served_context
        )
        return _carrying(result, found, collector, skill_name)

    return stale_advisories


def principal_partition(context: Any) -> str | None:
    """The cache partition of the SDK's ``ToolContext``: a digest of its ``tenant_id`` and
    ``caller_identity``, or None (warned once) when it names neither."""
    tenant, caller = getattr(context, "tenant_id", None), getattr(context, "caller_identity", None)
    if tenant is None and caller is None:
        global _warned_anonymous
        if not _warned_anonymous:
            _warned_anonymous = True
            logger.warning(
                "skill_middleware_without_principal: a tool call's ToolContext names "
                "no caller_identity or tenant_id: per-caller surfaces cannot tell "
                "callers apart (configure the SDK's auth)"
            )
        return None
    return digest([b"adcp-sdk-principal", repr(tenant), repr(caller)])  # None != "None"


_warned_anonymous = False


def _carrying(result: Any, found: Delivery, collector: AdvisoryCollector, tool: str) -> Any:
    """``result`` with ``found`` delivered (a dict when it is a model), or itself; what it
    cannot carry, and what a task outliving the call records later, counts as lost."""
    try:
        return _delivered(result, found, collector, tool)
    finally:
        collector.close()


def _delivered(result: Any, found: Delivery, collector: AdvisoryCollector, tool: str) -> Any:
    if found and tool in NO_ERRORS_MEMBER:
        collector.lost("no_errors_member", f"{tool}'s answers have no errors[]")
        found = Delivery([], found.context)
    if not found and found.context is KEEP:
        return result
    payload = (
        result.model_dump(mode="json", exclude_none=True)
        if isinstance(result, BaseModel)
        else result
    )
    try:
        inject_payload(payload, found)
    except Untouched as exc:
        collector.lost(exc.reason, str(exc))
        return result
    collector.delivered()
    return payload


def with_advisories(surfaces: Surfaces, tool: str | None = None) -> Callable[[Handler], Handler]:
    """Decorate an ``ADCPHandler`` tool method (inside ``@idempotency.wrap``, so replays keep
    them): its answer carries its fetches' advisories. ``tool`` names its surface (default:
    the method's name)."""

    def decorate(method: Handler) -> Handler:
        surface = surfaces.find(tool or method.__name__)

        @functools.wraps(method)
        async def answer(*args: Any, **kwargs: Any) -> Any:
            outer = current_collector()  # the request's (ASGI middleware), or the skill's
            if outer is None:
                partition = principal_partition(_argument(args, kwargs, "context", 2))
                params = _argument(args, kwargs, "params", 1)
                opened = Collecting(surface, partition, params, counted_at_delivery=True)
            else:
                known = outer.context  # one request: one budget, one pinned release
                named = surface or known.surface
                request = RequestContext(
                    named, known.partition, None, known.request_field, known.budget
                )
                opened = Collecting(named, None, counted_at_delivery=True, context=request)
            with opened as collector:
                result = await method(*args, **kwargs)
            if outer is not None and collector.trace.served_context:
                outer.traced().served_context = True  # the way out checks the answer's context
            # A context in doubt goes: the SDK echoes the request's own into an answer without.
            context = NO_CONTEXT if collector.trace.served_context else KEEP
            found = Delivery(collector.errors(), context)
            return _carrying(result, found, collector, tool or method.__name__)

        return answer

    return decorate


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], name: str, at: int) -> Any:
    """An ``ADCPHandler`` method's ``(self, params, context)`` argument, else :data:`UNREAD`."""
    if name in kwargs:
        return kwargs[name]
    return args[at] if len(args) > at else UNREAD


def stale_cache_test_controller(cache: UpstreamCache) -> Any:
    """A ``TestControllerStore`` whose ``force_upstream_unavailable`` drives ``cache`` (built
    with ``test_mode=True``), for ``serve(test_controller=...)`` in sandboxes only."""
    from adcp.server import TestControllerStore
    from adcp.server.test_controller import TestControllerError

    class StaleCacheTestController(TestControllerStore):
        async def force_upstream_unavailable(
            self,
            tool: str,
            upstream_name: str | None = None,
            cache_age_seconds: int | None = None,
            *,
            context: Any = None,
        ) -> dict[str, Any]:
            try:
                outage = cache.force_upstream_unavailable(tool, upstream_name, cache_age_seconds)
            except (KeyError, ValueError) as exc:
                raise TestControllerError("INVALID_PARAMS", str(exc).strip("'\"")) from exc
            return {
                "previous_state": "available",
                "current_state": "unavailable",
                "message": f"{outage.upstream_name or 'default upstream'} of {outage.tool} "
                "is down for the next affected response",
            }

    return StaleCacheTestController()
