"""Answer AdCP's wholesale conditional fetch from the cache: :func:`answer_wholesale` wraps
what composes a ``get_products`` answer and adds its feed token and ``cache_scope``, or
answers ``unchanged: true`` (see docs/adcp-caching.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.advisory import STALE_RESPONSE, AdcpError
from ..pipeline.cache import UpstreamCache
from ..pipeline.collector import AdvisoryCollector, Composition, current_collector
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
    """A conditional request the spec refuses (``if_pricing_version`` alone): answer with
    :attr:`error` (``INVALID_REQUEST``) as the transport fails a task."""

    def __init__(self, error: AdcpError) -> None:
        super().__init__(error.message)
        self.error = error


def invalid_request(message: str, field: str | None = None) -> AdcpError:
    """An ``INVALID_REQUEST`` error (the buyer can correct it)."""
    return AdcpError(code="INVALID_REQUEST", message=message, field=field, recovery="correctable")


class ScopeContradictsKeying(ValueError):
    """``strict``: ``cache_scope: public`` declared of an answer composed of per-caller entries."""


def keyed_scope(request: Mapping[str, Any], labels: set[str]) -> Scope:
    """The ``cache_scope`` the cache's keying gives an answer composed of entries with
    ``labels``: ``account`` when the request has an account and one was keyed per caller."""
    if not request.get("account"):
        return Scope.PUBLIC
    return Scope.ACCOUNT if per_caller(labels) else Scope.PUBLIC


def per_caller(labels: set[str]) -> bool:
    """Whether one of the entries with ``labels`` was keyed per caller (partition or
    credentials)."""
    return any(label.startswith(("partition=", "credentials=")) for label in labels)


async def answer_wholesale(
    request: Mapping[str, Any],
    compose: Callable[[], Awaitable[dict[str, Any]]],
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    strict: bool = False,
    cache: UpstreamCache | None = None,
    tool: str = GET_PRODUCTS,
) -> dict[str, Any]:
    """The wholesale answer to ``request``: ``compose()``'s with its
    ``wholesale_feed_version`` and ``cache_scope``, or ``unchanged: true`` when the tokens match.

    ``scope`` None: the one the cache's keying gives (declaring ``public`` of per-caller entries
    warns once, or raises :class:`ScopeContradictsKeying` when ``strict``). ``account`` keys an
    account-scoped token (default: the caller partition); ``agent`` names this seller in a
    shared keyspace; ``cache`` lets matching probes skip composing; ``tool`` names the request
    schema. Runs in a request's collector. Raises :class:`InvalidConditionalRequest`."""
    if evaluate(request, "") is Outcome.INVALID:
        raise InvalidConditionalRequest(
            invalid_request(
                "if_pricing_version needs if_wholesale_feed_version", "if_pricing_version"
            )
        )
    collector = current_collector()
    if collector is None:
        raise RuntimeError(
            "answer_wholesale runs in a request's collector: mount StaleAdvisoryMiddleware "
            "or wrap the call in collect_advisories()"
        )
    if scope is Scope.ACCOUNT and account is None:  # before the memo: a token is an account's
        account = _account_of(request, collector, tool)
    try:
        memo, key = (
            (memo_of(cache), ProbeMemo.key(request, tool, scope, account, agent))
            if (cache is not None)
            else (None, "")
        )
    except (TypeError, ValueError) as exc:  # what canonical refuses: nesting past its bound
        raise InvalidConditionalRequest(invalid_request(str(exc))) from exc
    known = (
        await _from_memory(memo, key, request, collector, cache)
        if memo and cache is not None
        else None
    )
    if known is not None:
        return unchanged_answer(known.token, known.scope, context=request.get("context"))
    trace = collector.traced()
    composition = Composition(trace)
    composing = trace.open(composition)
    try:
        answer = await compose()
    finally:
        trace.close(composition, composing)
    labels = composition.labels
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
    contents = [part.data for part in composition.parts]
    if not contents:  # composed of nothing cached: its own content is the version
        contents = [json.dumps(answer.get("products"), sort_keys=True, default=str).encode()]
    try:
        token = feed_version(feed_scope(request, scope, account, agent, tool), contents)
    except (TypeError, ValueError) as exc:
        raise InvalidConditionalRequest(invalid_request(str(exc))) from exc
    current = not _stale(collector)
    if memo is not None and current:  # a stale composition is never remembered
        partition = collector.context.partition if per_caller(labels) else None
        memo.remember(key, token, scope, partition, composition.parts)
    if evaluate(request, token, known=current) is Outcome.UNCHANGED:
        return unchanged_answer(token, scope, context=request.get("context"))
    return {**answer, "wholesale_feed_version": token, "cache_scope": scope.value}


async def _from_memory(
    memo: ProbeMemo,
    key: str,
    request: Mapping[str, Any],
    collector: AdvisoryCollector,
    cache: UpstreamCache,
) -> Known | None:
    """The last full answer, if the probe may be answered from what it read: never
    while an injected outage waits, after stale data, or for another caller's answer."""
    known = memo.get(key)
    outages = cache.outages
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
        logger.warning(
            "cache_scope_contradicts_keying declared=%s keyed=%s", declared.value, keyed.value
        )
