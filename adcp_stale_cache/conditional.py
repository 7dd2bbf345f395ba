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
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .advisory import STALE_RESPONSE, AdcpError
from .collector import current_collector
from .wholesale import Outcome, Scope, evaluate, feed_scope, feed_version, unchanged_answer

logger = logging.getLogger("adcp_stale_cache")


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


class ScopeContradictsKeying(ValueError):
    """``strict``: the declared ``cache_scope`` says ``public`` of an answer composed of
    entries the cache keyed per caller (buyers would share one account's rows with others)."""


def keyed_scope(request: Mapping[str, Any], labels: set[str]) -> Scope:
    """The ``cache_scope`` the cache's keying gives an answer composed of entries with
    ``labels``: ``public`` when the request has no account or every entry is shared across
    callers, ``account`` when one was keyed per caller."""
    if not request.get("account"):
        return Scope.PUBLIC
    keyed = any(label.startswith("partition=") for label in labels)
    return Scope.ACCOUNT if keyed else Scope.PUBLIC


async def answer_wholesale(
    request: Mapping[str, Any],
    compose: Callable[[], Awaitable[dict[str, Any]]],
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    strict: bool = False,
) -> dict[str, Any]:
    """The wholesale answer to ``request``: ``compose()``'s answer with its
    ``wholesale_feed_version`` and ``cache_scope``, or the ``unchanged: true`` answer when
    the buyer's tokens match.

    ``scope`` is the answer's ``cache_scope``; None: the one the cache's keying gives it
    (:func:`keyed_scope`). Declaring ``public`` of an answer composed of per-caller entries
    logs one WARNING (``strict``: raises :class:`ScopeContradictsKeying`); declaring
    ``account`` of shared entries is safe (a seller may key accounts in its own keys).
    ``account`` is the identity an account-scoped token is keyed by (default: the caller
    partition the cache keyed the entries by). ``agent`` names this seller, when one token
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
    outer = collector.composition, collector.read_labels
    collector.composition, collector.read_labels = [], set()
    try:
        answer = await compose()
        composition, labels = collector.composition, collector.read_labels
    finally:
        collector.composition, collector.read_labels = outer
    keyed = keyed_scope(request, labels)
    if scope is None:
        scope = keyed
    elif scope is Scope.PUBLIC and keyed is Scope.ACCOUNT:  # the other way round is safe
        _contradiction(scope, keyed, strict)
    if scope is Scope.ACCOUNT and account is None:
        account = collector.partition or str(request.get("account"))
    if not composition:  # composed of nothing cached: its own content is the version
        composition = [json.dumps(answer.get("products"), sort_keys=True, default=str).encode()]
    token = feed_version(feed_scope(request, scope, account, agent), composition)
    known = not any(a.code == STALE_RESPONSE for a in collector.advisories())
    if evaluate(request, token, known=known) is Outcome.UNCHANGED:
        return unchanged_answer(token, scope, context=request.get("context"))
    return {**answer, "wholesale_feed_version": token, "cache_scope": scope.value}


_warned: set[tuple[Scope, Scope]] = set()


def _contradiction(declared: Scope, keyed: Scope, strict: bool) -> None:
    message = (
        f"cache_scope {declared.value!r} declared for an answer the cache keyed as "
        f"{keyed.value!r}: buyers dedupe public answers across accounts"
    )
    if strict:
        raise ScopeContradictsKeying(message)
    if (declared, keyed) not in _warned:  # once per kind: every request would say it
        _warned.add((declared, keyed))
        logger.warning("cache_scope_contradicts_keying declared=%s keyed=%s", declared.value,
                       keyed.value)  # fmt: skip
