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

Pass ``cache=`` (the cache the answer is composed from) and a matching probe is answered
without composing at all, while every entry the last full answer read is still fresh and no
purge has landed since (the store's purge count, shared by every process): the probe then
costs a digest of the request and one read of the count, not a decoded feed (see
:class:`ProbeMemo`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from .advisory import STALE_RESPONSE, AdcpError
from .collector import current_collector
from .purges import UNREADABLE, purge_count
from .wholesale import (
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
    keyed = any(label.startswith("partition=") for label in labels)
    return Scope.ACCOUNT if keyed else Scope.PUBLIC


@dataclass(frozen=True, slots=True)
class Known:
    """What the last full answer to a request was: its token and scope, the caller partition
    it was keyed by (None: shared entries only), until when every entry it read is fresh, and
    the purge count it was composed under."""

    token: str
    scope: Scope
    partition: str | None
    fresh_until: float
    purges: object


class ProbeMemo:
    """The last full answer's token per request, for answering matching probes without
    composing (one per cache, at most ``size`` requests, least recently used first out).

    Sound because within its entries' freshness a composition reads the same entries (each a
    fresh hit), and anything that changes them before that (a purge, a soft purge, an
    operator's refresh) moves the purge count first."""

    def __init__(self, size: int = 10_000) -> None:
        self._known: LRUCache[str, Known] = LRUCache(size)

    @staticmethod
    def key(request: Mapping[str, Any], *parts: object) -> str:
        """What identifies a request's answer: the request, canonical, less what does not
        change the answer (its context, idempotency key, the tokens), and ``parts``."""
        asked = {k: v for k, v in request.items() if k not in _NOT_THE_ANSWER}
        text = json.dumps([canonical(asked), [str(p) for p in parts]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Known | None:
        return self._known.get(key)

    def put(self, key: str, known: Known) -> None:
        self._known[key] = known


_NOT_THE_ANSWER = frozenset(
    {"context", "idempotency_key", "if_wholesale_feed_version", "if_pricing_version"}
)
_memos: weakref.WeakKeyDictionary[Any, ProbeMemo] = weakref.WeakKeyDictionary()


def _memo_of(cache: Any) -> ProbeMemo:
    memo = _memos.get(cache)
    if memo is None:
        memo = _memos[cache] = ProbeMemo()
    return memo


async def answer_wholesale(
    request: Mapping[str, Any],
    compose: Callable[[], Awaitable[dict[str, Any]]],
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    strict: bool = False,
    cache: Any = None,
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
    module). Runs inside the request's collector (the middleware's, or
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
    memo, key, purges = None, None, None
    if cache is not None:
        memo, key = _memo_of(cache), ProbeMemo.key(request, scope, account, agent)
        purges = await purge_count(cache.store)  # before composing: a purge after it counts
        known = memo.get(key)
        outages = getattr(cache, "outages", None)  # an injected outage must reach its call
        if (
            known is not None
            and (outages is None or len(outages) == 0)
            and evaluate(request, known.token) is Outcome.UNCHANGED
            and cache.clock() < known.fresh_until
            and purges not in (None, UNREADABLE) and known.purges == purges
            and (known.partition is None or known.partition == collector.partition)
        ):  # fmt: skip
            return unchanged_answer(known.token, known.scope, context=request.get("context"))
    outer = collector.composition, collector.read_labels, collector.fresh_until
    collector.composition, collector.read_labels, collector.fresh_until = [], set(), math.inf
    try:
        answer = await compose()
        composition, labels = collector.composition, collector.read_labels
        fresh_until = collector.fresh_until
    finally:
        collector.composition, collector.read_labels, collector.fresh_until = outer
    keyed = keyed_scope(request, labels)
    if scope is None:
        scope = keyed
    elif scope is Scope.PUBLIC and keyed is Scope.ACCOUNT:  # the other way round is safe
        _contradiction(scope, keyed, strict)
    if scope is Scope.ACCOUNT and account is None:
        account = collector.partition or str(request.get("account"))
    if not composition:  # composed of nothing cached: its own content is the version
        composition = [json.dumps(answer.get("products"), sort_keys=True, default=str).encode()]
        fresh_until = -math.inf  # and nothing says until when: never answered from memory
    token = feed_version(feed_scope(request, scope, account, agent), composition)
    current = not any(a.code == STALE_RESPONSE for a in collector.advisories())
    if memo is not None and key is not None and current and purges not in (None, UNREADABLE):
        partition = collector.partition if keyed is Scope.ACCOUNT else None
        memo.put(key, Known(token, scope, partition, fresh_until, purges))
    if evaluate(request, token, known=current) is Outcome.UNCHANGED:
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
