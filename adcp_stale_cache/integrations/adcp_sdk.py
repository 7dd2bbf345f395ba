"""The ``adcp`` Python SDK server (``adcp.server.serve``): two ways in, and the test controller.

**ASGI middleware** (the default choice): the SDK takes it as it is and it covers MCP and A2A
(JSON and SSE) and any extra route::

    serve(handler, transport="both",
          asgi_middleware=[(StaleAdvisoryMiddleware, {"surfaces": cache.surfaces})])

**Skill middleware** (dict level): wraps each skill dispatch in the handler's own task on
both transports, opens the collector there and appends the advisories to the returned dict
before the SDK serialises it. Pick it when the body cannot be rewritten on the way out (the
SDK's SSE reply mode, a compression layer you do not control), or to keep advisories out of
the HTTP layer altogether::

    serve(handler, middleware=[skill_middleware(cache.surfaces)])

Use one of the two for a given app, not both. (The SDK's ``response_enhancer`` runs
synchronously after the handler and cannot open a collector around it, so it is not offered.)

:func:`stale_cache_test_controller` is a ready ``TestControllerStore`` implementing the spec's
``force_upstream_unavailable`` scenario, for sandbox/test deployments only.

Needs the ``adcp`` extra.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..cache import UpstreamCache
from ..codecs import Untouched, inject_payload
from ..collector import collect_advisories
from ..policy import Surfaces

logger = logging.getLogger("adcp_stale_cache.adcp_sdk")

SkillMiddleware = Callable[[str, dict[str, Any], Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]


def skill_middleware(surfaces: Surfaces) -> SkillMiddleware:
    """A ``serve(middleware=[...])`` entry adding this dispatch's advisories to its result."""

    async def stale_advisories(
        skill_name: str,
        params: dict[str, Any],
        context: Any,
        call_next: Callable[[], Awaitable[Any]],
    ) -> Any:
        with collect_advisories(surfaces.find(skill_name)) as collector:
            result = await call_next()
        if not collector:
            return result
        payload = (
            result.model_dump(mode="json", exclude_none=True)
            if hasattr(result, "model_dump")
            else result
        )
        try:
            inject_payload(payload, collector.errors())
        except Untouched as exc:
            # Stale data was served to this skill: its buyer is not told, which is never routine.
            logger.warning("advisories_not_delivered skill=%s reason=%s", skill_name, exc)
            return result
        return payload

    return stale_advisories


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
