"""The ``adcp`` Python SDK server (``adcp.server.serve``): two ways in, and the test controller.

**ASGI middleware** (the default choice): the SDK takes it as it is and it covers MCP and A2A
(JSON and SSE) and any extra route::

    serve(handler, transport="both",
          asgi_middleware=[(StaleAdvisoryMiddleware, {"cache": cache})])

**Skill middleware** (dict level): wraps each skill dispatch in the handler's own task on
both transports, opens the collector there and appends the advisories to the returned dict
before the SDK serialises it. Pick it when the body cannot be rewritten on the way out (the
SDK's SSE reply mode, a compression layer you do not control), or to keep advisories out of
the HTTP layer altogether::

    serve(handler, middleware=[skill_middleware(cache.surfaces)])

Use one of the two for a given app, not both. (The SDK's ``response_enhancer`` runs
synchronously after the handler and cannot open a collector around it, so it is not offered.)

**Idempotent tools**: the SDK's ``IdempotencyStore`` keeps what the handler returned and
replays it for the same ``idempotency_key``, without calling the handler, so advisories added
outside it (by either way in) would be missing from every replay. Put :func:`with_advisories`
inside ``@idempotency.wrap``: the advisories are then part of what the store keeps, and a
replay returns the original ones (``replayed: true``; the SDK echoes the current request's
``context``, as it leaves a kept answer without one)::

    @idempotency.wrap
    @with_advisories(cache.surfaces)
    async def create_media_buy(self, params, context=None): ...

:func:`stale_cache_test_controller` is a ready ``TestControllerStore`` implementing the spec's
``force_upstream_unavailable`` scenario, for sandbox/test deployments only.

Needs the ``adcp`` extra.
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
from ..pipeline.collector import (
    UNREAD,
    AdvisoryCollector,
    Collecting,
    RequestContext,
    current_collector,
)

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
        # No ASGI request here: the SDK's ToolContext names the principal per-caller keys
        # use, and the skill's parameters are the request (its pin keys by release).
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
    ``caller_identity`` (None when it names neither: callers are then not told apart, and a
    surface keyed per caller says so once)."""
    tenant, caller = getattr(context, "tenant_id", None), getattr(context, "caller_identity", None)
    if tenant is None and caller is None:
        global _warned_anonymous
        if not _warned_anonymous:
            _warned_anonymous = True
            logger.warning("skill_middleware_without_principal: a tool call's ToolContext names "
                           "no caller_identity or tenant_id: per-caller surfaces cannot tell "
                           "callers apart (configure the SDK's auth)")  # fmt: skip
        return None
    return digest([b"adcp-sdk-principal", repr(tenant), repr(caller)])  # None != "None"


_warned_anonymous = False


def _carrying(result: Any, found: Delivery, collector: AdvisoryCollector, tool: str) -> Any:
    """``result`` with ``found`` delivered (its advisories, its context mended), as a dict
    when it is a model; ``result`` itself when there is nothing to deliver. A tool whose
    answers have no ``errors[]`` gets no advisories (:data:`NO_ERRORS_MEMBER`): those of
    ``collector`` then count as lost, as do any the answer cannot carry, and any a task
    outliving the call records later."""
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
    """Decorate an ``ADCPHandler`` tool method: its answer carries the advisories its own
    fetches recorded (see the module's note on idempotent tools). ``tool`` names its surface
    (default: the method's name). Works under either way in: the advisories go in once,
    here, never again on the way out."""

    def decorate(method: Handler) -> Handler:
        surface = surfaces.find(tool or method.__name__)

        @functools.wraps(method)
        async def answer(*args: Any, **kwargs: Any) -> Any:
            outer = current_collector()  # the request's (ASGI middleware), or the skill's
            if outer is None:  # the method's params are the request, its context the caller
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
                outer.trace.served_context = True  # the way out still checks the answer's context
            # A context in doubt goes: the SDK echoes the request's own into an answer that
            # has none (and a kept idempotent answer then holds none to replay).
            context = NO_CONTEXT if collector.trace.served_context else KEEP
            found = Delivery(collector.errors(), context)
            return _carrying(result, found, collector, tool or method.__name__)

        return answer

    return decorate


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], name: str, at: int) -> Any:
    """An ``ADCPHandler`` method's ``(self, params, context)`` argument ``name``, at ``at``
    (:data:`UNREAD` when it takes none)."""
    if name in kwargs:
        return kwargs[name]
    return args[at] if len(args) > at else UNREAD


def stale_cache_test_controller(cache: UpstreamCache) -> Any:
    """A ``TestControllerStore`` whose ``force_upstream_unavailable`` drives ``cache``.

    ``cache`` must be built with ``test_mode=True``. Pass the store to
    ``serve(test_controller=...)`` in sandbox deployments only.
    """
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
