"""Answer AdCP's wholesale conditional fetch from the cache: a seller's ``get_products`` in
``buying_mode: "wholesale"`` gets its feed token, its ``cache_scope`` and ``unchanged: true``
by wrapping what composes its answer::

    async def get_products(request: dict) -> dict:
        async def compose() -> dict:
            return {"products": await inventory.products(request.get("filters"))}

        return await answer_wholesale(request, compose, scope=scope_of(request))

The token is derived from what the answer was composed of: the stored content of every
cached entry the request's fetches answered with (see
:attr:`~adcp_stale_cache.collector.AdvisoryCollector.composition`), and the request's
canonical scope (:func:`~adcp_stale_cache.wholesale.feed_scope`). It changes exactly when
that content changes, agrees across processes sharing the store and survives restarts. The
evaluation is the spec's (:func:`~adcp_stale_cache.wholesale.evaluate`). A request whose
answer drew on stale data (a ``STALE_RESPONSE`` recorded while composing) gets the full
answer with its advisory and the cached feed's token, never ``unchanged: true``: the seller
cannot know the current version then, and an advisory rides only on a non-empty payload.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .advisory import STALE_RESPONSE, AdcpError
from .collector import current_collector
from .wholesale import Outcome, Scope, evaluate, feed_scope, feed_version, unchanged_answer


class InvalidConditionalRequest(ValueError):
    """A conditional request the spec refuses (``if_pricing_version`` without
    ``if_wholesale_feed_version``): answer it with :attr:`error` (``INVALID_REQUEST``) as
    the transport fails a task (an ``adcp_error``, MCP ``isError``, A2A ``failed``)."""

    def __init__(self, error: AdcpError) -> None:
        super().__init__(error.message)
        self.error = error


def invalid_request(message: str, field: str | None = None) -> AdcpError:
    """An ``INVALID_REQUEST`` error (the buyer can correct it)."""
    return AdcpError(code="INVALID_REQUEST", message=message, field=field, recovery="correctable")


async def answer_wholesale(
    request: Mapping[str, Any],
    compose: Callable[[], Awaitable[dict[str, Any]]],
    *,
    scope: Scope = Scope.PUBLIC,
    account: str | None = None,
    agent: str = "",
) -> dict[str, Any]:
    """The wholesale answer to ``request``: ``compose()``'s answer with its
    ``wholesale_feed_version`` and ``cache_scope``, or the ``unchanged: true`` answer when
    the buyer's tokens match. ``scope`` is the answer's ``cache_scope`` (``account``: the
    identity the seller keys that account by); ``agent`` names this seller, when one token
    keyspace serves several. Runs inside the request's collector (the middleware's, or
    :func:`~adcp_stale_cache.collect_advisories`). Raises
    :class:`InvalidConditionalRequest` for a lone pricing token."""
    if evaluate(request, "") is Outcome.INVALID:
        raise InvalidConditionalRequest(invalid_request(
            "if_pricing_version needs if_wholesale_feed_version", "if_pricing_version"
        ))  # fmt: skip
    collector = current_collector()
    if collector is None:
        raise RuntimeError(
            "answer_wholesale runs in a request's collector: mount StaleAdvisoryMiddleware "
            "or wrap the call in collect_advisories()"
        )
    outer, collector.composition = collector.composition, []
    try:
        answer = await compose()
        composition = collector.composition
    finally:
        collector.composition = outer
    if not composition:  # composed of nothing cached: its own content is the version
        composition = [json.dumps(answer.get("products"), sort_keys=True, default=str).encode()]
    token = feed_version(feed_scope(request, scope, account, agent), composition)
    known = not any(a.code == STALE_RESPONSE for a in collector.advisories())
    if evaluate(request, token, known=known) is Outcome.UNCHANGED:
        return unchanged_answer(token, scope, context=request.get("context"))
    return {**answer, "wholesale_feed_version": token, "cache_scope": scope.value}
