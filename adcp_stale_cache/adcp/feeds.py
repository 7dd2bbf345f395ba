"""AdCP's other conditional feed reads, answered from the cache as ``get_products``' wholesale
feed is: 3.2's ``list_products`` and ``get_signals`` in ``discovery_mode: "wholesale"``. A
``list_products`` answer has no ``errors[]``: a stale one is told in ``incomplete[]``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.advisory import STALE_RESPONSE, AdcpError
from ..pipeline.collector import current_collector
from .conditional import InvalidConditionalRequest, answer_wholesale, invalid_request
from .wholesale import Scope, canonical, release_of

Compose = Callable[[], Awaitable[list[Any]]]

#: Request members that say how to call, never what is answered (a page and its cursor select).
_NOT_THE_SELECTION = frozenset(
    {
        "context",
        "ext",
        "account",
        "idempotency_key",
        "adcp_version",
        "adcp_major_version",
        "context_id",
        "governance_context",
        "push_notification_config",
        "if_feed_version",
        "if_wholesale_feed_version",
        "if_pricing_version",
        "discovery_mode",
    }
)


async def answer_list_products(
    request: Mapping[str, Any],
    compose: Compose,
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    cache: Any = None,
) -> dict[str, Any]:
    """The ``list_products`` answer to ``request``: ``outcome: "listed"``, or
    ``"unchanged"`` when ``if_feed_version`` matches (never with ``forecast``, never stale).
    Arguments and errors as :func:`~adcp_stale_cache.adcp.conditional.answer_wholesale`'s."""
    if request.get("if_pricing_version") is not None and request.get("if_feed_version") is None:
        raise InvalidConditionalRequest(
            invalid_request("if_pricing_version needs if_feed_version", "if_pricing_version")
        )
    fields = request.get("fields")
    forecast = isinstance(fields, list) and "forecast" in fields
    tokens = (
        {}
        if forecast
        else {
            "if_wholesale_feed_version": request.get("if_feed_version"),
            "if_pricing_version": request.get("if_pricing_version"),
        }
    )
    selection = dict(request)
    if isinstance(fields, list):  # forecast is no part of the feed version (the spec)
        selection["fields"] = [f for f in fields if f != "forecast"]
    answer = await _wholesale(
        "list_products",
        "wholesale",
        request,
        selection,
        tokens,
        compose,
        scope,
        account,
        agent,
        cache,
    )
    listed: dict[str, Any] = {"outcome": "unchanged" if answer.get("unchanged") else "listed"}
    if "products" in answer:
        listed["products"] = answer["products"]
    listed["feed_version"] = answer["wholesale_feed_version"]
    listed["cache_scope"] = answer["cache_scope"]
    incomplete = _told_stale()
    if incomplete:
        listed["incomplete"] = incomplete
    if request.get("context") is not None:
        listed["context"] = request["context"]
    return listed


async def answer_signals(
    request: Mapping[str, Any],
    compose: Compose,
    *,
    scope: Scope | None = None,
    account: str | None = None,
    agent: str = "",
    cache: Any = None,
) -> dict[str, Any]:
    """The ``get_signals`` answer to ``request``: the signals with their tokens, or
    ``unchanged: true`` in ``discovery_mode: "wholesale"`` when the tokens match (never stale).
    Arguments as :func:`~adcp_stale_cache.adcp.conditional.answer_wholesale`'s."""
    tokens = {
        name: request.get(name) for name in ("if_wholesale_feed_version", "if_pricing_version")
    }
    mode = request.get("discovery_mode")  # only wholesale reads are ever unchanged
    answer = await _wholesale(
        "get_signals", mode, request, dict(request), tokens, compose, scope, account, agent, cache
    )
    if "products" in answer:
        answer["signals"] = answer.pop("products")
    return answer


async def _wholesale(
    tool: str,
    mode: Any,
    request: Mapping[str, Any],
    selection: dict[str, Any],
    tokens: Mapping[str, Any],
    compose: Compose,
    scope: Scope | None,
    account: str | None,
    agent: str,
    cache: Any,
) -> dict[str, Any]:
    """``answer_wholesale`` of the wholesale request ``request`` maps to, its selection
    in the token's keyspace (one tool's token never matches another's)."""
    asked = {k: v for k, v in selection.items() if k not in _NOT_THE_SELECTION}
    try:  # by the tool's request schema: sets in any order, defaults spelled or not, alike
        form = canonical(asked, tool, release_of(request))
        keyed = json.dumps(form, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidConditionalRequest(invalid_request(f"{tool} request: {exc}")) from exc
    wholesale: dict[str, Any] = {"buying_mode": mode, **tokens}
    for name in ("account", "context"):
        if request.get(name) is not None:
            wholesale[name] = request[name]

    async def products() -> dict[str, Any]:
        return {"products": await compose()}

    keyspace = f"{agent}\n{tool}\n{keyed}"
    return await answer_wholesale(
        wholesale, products, scope=scope, account=account, agent=keyspace, cache=cache
    )


def _told_stale() -> list[dict[str, Any]]:
    """The request's advisories as ``incomplete[]`` entries, taken off its collector."""
    collector = current_collector()
    advisories = collector.advisories() if collector is not None else []
    stale = [a for a in advisories if a.code == STALE_RESPONSE]
    if not stale:
        return []
    assert collector is not None
    collector.clear()
    return [{"scope": "products", "description": _description(stale)}]


def _description(stale: list[AdcpError]) -> str:
    names, ages = [], []
    for advisory in stale:
        details = advisory.details or {}
        upstream = details.get("upstream") or {}
        names.append(str(upstream.get("name") or "an upstream"))
        ages.append(int(details.get("cache_age_seconds") or 0))
    return (
        f"Served from cache: {', '.join(names)} could not be reached; the products are up "
        f"to {max(ages)} s old (STALE_RESPONSE). feed_version is the cached feed's."
    )
