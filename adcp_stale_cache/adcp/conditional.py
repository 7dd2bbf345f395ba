"""Answer AdCP's wholesale conditional fetch from the cache: a seller's ``get_products`` in
``buying_mode: "wholesale"`` gets its feed token, its ``cache_scope`` and ``unchanged: true``
by wrapping what composes its answer::

    async def get_products(request: dict) -> dict:
        async def compose() -> dict:
            return {"products": await inventory.products(request.get("filters"))}

        return await answer_wholesale(request, compose, scope=scope_of(request))

The token is derived from what the answer was composed of: the stored content of every
cached entry the request's fetches answered with (see
:attr:`~adcp_stale_cache.pipeline.collector.Trace.composition`), and the request's
canonical scope (:func:`~adcp_stale_cache.adcp.wholesale.feed_scope`). It changes exactly when
that content changes, agrees across processes sharing the store and survives restarts. The
evaluation is the spec's (:func:`~adcp_stale_cache.adcp.wholesale.evaluate`). A request whose
answer drew on stale data (a ``STALE_RESPONSE`` recorded while composing) gets the full
answer with its advisory and the cached feed's token, never ``unchanged: true``: the seller
cannot know the current version then, and an advisory rides only on a non-empty payload.

Pass ``cache=`` (the cache the answer is composed from) and a matching probe is answered
without composing at all, while every entry the last full answer read is still in the store
as it was and fresh (see :mod:`~adcp_stale_cache.adcp.probes`).

What is not a products answer (the 3.2 rejected arm ``status: "rejected"``, a failure with
``adcp_error``, an answer without a ``products`` list) passes as composed: no token, never
``unchanged``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.advisory import STALE_RESPONSE, AdcpError
from ..pipeline.collector import AdvisoryCollector, current_collector
from .probes import Known, ProbeMemo, memo_of
from .wholesale import (
    GET_PRODUCTS,
    Outcome,
    Scope,
    canonical,
    evaluate,
    feed_scope,
    feed_version,
    unchanged_answer,
)

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
    return Scope.ACCOUNT if per_caller(labels) else Scope.PUBLIC


def per_caller(labels: set[str]) -> bool:
    """Whether one of the entries with ``labels`` was keyed per caller (by the caller's
    partition, or by the credentials the seller called its upstream with)."""
    return any(label.startswith(("partition=", "credentials=")) for label in labels)


async def answer_wholesale(
    request: Mapping[str, Any],
    compose: Callable[[], Awaitable[dict[str, Any]]],
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    strict: bool = False,
    cache: Any = None,
    tool: str = GET_PRODUCTS,
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
    keyspace serves several. ``cache``: the :class:`~adcp_stale_cache.UpstreamCache` the
    answer is composed from, for answering matching probes without composing (see the
    module). ``tool`` names the request's schema (its sets and defaults, see
    :mod:`~adcp_stale_cache.adcp.request_shapes`). Runs inside the request's collector (the
    middleware's, or
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
    if scope is Scope.ACCOUNT and account is None:  # before the memo: a token is an account's
        account = _account_of(request, collector, tool)
    try:
        memo, key = (memo_of(cache), ProbeMemo.key(request, tool, scope, account, agent)) if (
            cache is not None) else (None, "")  # fmt: skip
    except (TypeError, ValueError) as exc:  # what canonical refuses: nesting past its bound
        raise InvalidConditionalRequest(invalid_request(str(exc))) from exc
    known = await _from_memory(memo, key, request, collector, cache) if memo else None
    if known is not None:
        return unchanged_answer(known.token, known.scope, context=request.get("context"))
    trace = collector.trace  # the answer's parts, and what they were built from
    outer = trace.composition, trace.labels
    trace.composition, trace.labels = [], set()
    try:
        answer = await compose()
        composition, labels = trace.composition, trace.labels
    finally:
        trace.composition, trace.labels = outer
    if not _products_answer(answer):  # the rejected arm, a failure: no token, as composed
        if memo is not None:
            memo.forget(key)  # what was remembered is not the answer any more
        return answer
    keyed = keyed_scope(request, labels)
    if scope is None:
        scope = keyed
    elif scope is Scope.PUBLIC and keyed is Scope.ACCOUNT:  # the other way round is safe
        _contradiction(scope, keyed, strict)
    if scope is Scope.ACCOUNT and account is None:
        account = _account_of(request, collector, tool)
    contents = [part.data for part in composition]
    if not contents:  # composed of nothing cached: its own content is the version
        contents = [json.dumps(answer.get("products"), sort_keys=True, default=str).encode()]
    try:
        token = feed_version(feed_scope(request, scope, account, agent, tool), contents)
    except (TypeError, ValueError) as exc:
        raise InvalidConditionalRequest(invalid_request(str(exc))) from exc
    current = not _stale(collector)
    if memo is not None and current:  # a stale composition is never remembered
        partition = collector.context.partition if per_caller(labels) else None
        memo.remember(key, token, scope, partition, composition)
    if evaluate(request, token, known=current) is Outcome.UNCHANGED:
        return unchanged_answer(token, scope, context=request.get("context"))
    return {**answer, "wholesale_feed_version": token, "cache_scope": scope.value}


async def _from_memory(
    memo: ProbeMemo, key: str, request: Mapping[str, Any], collector: AdvisoryCollector,
    cache: Any,
) -> Known | None:  # fmt: skip
    """The last full answer, when the probe can be answered from what it read (see
    probes): never while an injected outage waits for its call, nor for a request that
    already drew on stale data, nor for another caller's per-caller answer."""
    known = memo.get(key)
    outages = getattr(cache, "outages", None)
    if (
        known is None
        or (outages is not None and len(outages) > 0)
        or evaluate(request, known.token) is not Outcome.UNCHANGED
        or _stale(collector)
        or (known.partition is not None and known.partition != collector.context.partition)
    ):
        return None
    return known if await ProbeMemo.still_current(known, cache.store, cache.clock()) else None


def _account_of(request: Mapping[str, Any], collector: AdvisoryCollector, tool: str) -> str:
    """The identity an account-scoped token is keyed by: the caller partition the cache
    keys by, else the request's account."""
    return collector.context.partition or json.dumps(
        canonical(request.get("account"), tool, at=("account",))
    )


def _stale(collector: AdvisoryCollector) -> bool:
    return any(a.code == STALE_RESPONSE for a in collector.advisories())


def _products_answer(answer: Any) -> bool:
    return (
        isinstance(answer, dict)
        and isinstance(answer.get("products"), list)
        and answer.get("status") not in ("rejected", "failed")
        and answer.get("adcp_error") is None
    )


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
