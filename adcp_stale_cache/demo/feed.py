"""The example seller's wholesale product feed (``get_products``, ``buying_mode: "wholesale"``).

Every account reads the public rate card, one entry shared across callers; the reserved
overlay account ``account-overlay.example`` reads its own rows, keyed per caller. The seller
declares neither tokens nor scopes: :func:`~adcp_stale_cache.answer_wholesale` derives the
``wholesale_feed_version`` from the cached entries the answer was composed of, the
``cache_scope`` from how they were keyed (``public`` for the rate card, ``account`` for the
overlay), and answers a matching probe ``unchanged: true``. The same feed answers 3.2's
``list_products`` (:func:`~adcp_stale_cache.adcp.feeds.answer_list_products`), and its signals, read
the same way from the inventory's ``/signals``, a signals agent's ``get_signals`` in
``discovery_mode: "wholesale"`` (:func:`~adcp_stale_cache.adcp.feeds.answer_signals`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from ..adcp.conditional import InvalidConditionalRequest, answer_wholesale, invalid_request
from ..adcp.feeds import answer_list_products, answer_signals
from ..adcp.wholesale import canonical
from ..pipeline.cache import UpstreamCache

#: The account the AdCP storyboards use to elicit an account-scoped answer.
OVERLAY_ACCOUNT = "account-overlay.example"

#: The members of the inventory's rows that 3.2's canonical product (``list_products``, no
#: extra member allowed) has: ``format_ids`` is for 3.0 and 3.1 buyers only.
CANONICAL_PRODUCT = frozenset({
    "product_id", "name", "description", "publisher_properties", "format_options",
    "delivery_type", "pricing_options", "reporting_capabilities",
})  # fmt: skip


class WholesaleFeed:
    """Wholesale answers from the inventory service: ``rate_card`` is a client on a surface
    shared across callers, ``overlays`` one on a per-caller surface, both through ``cache``
    (which also answers matching probes without composing); ``signals`` the same pair for
    the signals feed (None: no signals)."""

    def __init__(
        self,
        cache: UpstreamCache,
        rate_card: httpx.AsyncClient,
        overlays: httpx.AsyncClient,
        signals: tuple[httpx.AsyncClient, httpx.AsyncClient] | None = None,
    ) -> None:
        self.cache = cache
        self.rate_card = rate_card
        self.overlays = overlays
        self.signal_clients = signals

    async def answer(self, request: Mapping[str, Any], authorization: str | None) -> dict[str, Any]:
        """The wholesale answer to ``request`` (raises ``InvalidConditionalRequest`` for a
        lone pricing token, ``UpstreamUnavailable`` when nothing can answer)."""
        rows = self._rows("products", (self.rate_card, self.overlays), request,
                          request.get("filters"), authorization)  # fmt: skip

        async def compose() -> dict[str, Any]:
            return {"products": await rows()}

        return await answer_wholesale(request, compose, cache=self.cache)

    async def list_products(
        self, request: Mapping[str, Any], authorization: str | None
    ) -> dict[str, Any]:
        """The ``list_products`` answer to ``request`` (its ``criteria.offer_filters`` are
        the inventory's product filters)."""
        criteria = request.get("criteria")
        filters = criteria.get("offer_filters") if isinstance(criteria, dict) else None
        rows = self._rows("products", (self.rate_card, self.overlays), request, filters,
                          authorization)  # fmt: skip
        fields = request.get("fields")
        wanted = set(fields) | {"product_id", "name"} if isinstance(fields, list) else None

        async def canonical_products() -> list[Any]:
            return [{k: v for k, v in row.items() if k in CANONICAL_PRODUCT and
                     (wanted is None or k in wanted)} for row in await rows()]  # fmt: skip

        return await answer_list_products(request, canonical_products, cache=self.cache)

    async def signals(
        self, request: Mapping[str, Any], authorization: str | None
    ) -> dict[str, Any]:
        """The ``get_signals`` answer to ``request``: the signals feed, conditional in
        ``discovery_mode: "wholesale"``."""
        assert self.signal_clients is not None, "this feed has no signals"
        rows = self._rows("signals", self.signal_clients, request, None, authorization)
        if request.get("discovery_mode") != "wholesale":
            return {"signals": await rows()}
        return await answer_signals(request, rows, cache=self.cache)

    def _rows(
        self, member: str, clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
        request: Mapping[str, Any], filters: Any, authorization: str | None,
    ) -> Callable[[], Awaitable[list[Any]]]:  # fmt: skip
        """How to read the feed's ``member`` rows for ``request``: the overlay account's
        own (per caller), the public rate card otherwise (no caller's credentials reach it)."""
        query: dict[str, str] = {}
        if filters is not None:  # canonical: reordered filters, one entry
            query["filters"] = json.dumps(_canonical_filters(filters))
        rate_card, overlays = clients

        async def rows() -> list[Any]:
            if account_domain(request) == OVERLAY_ACCOUNT:
                headers = {"authorization": authorization} if authorization else None
                response = await overlays.get(
                    f"/{member}", params={**query, "account": OVERLAY_ACCOUNT}, headers=headers
                )
            else:
                response = await rate_card.get(f"/{member}", params=query)
            found: list[Any] = response.json()[member]
            return found

        return rows


def _canonical_filters(filters: Any) -> Any:
    """``filters`` in canonical form; what this inventory cannot read is refused as the
    buyer's mistake (``INVALID_REQUEST``), never as an upstream fault: a buyer's bad filters
    must not open the inventory's breaker for every buyer."""
    if not isinstance(filters, dict):
        raise InvalidConditionalRequest(invalid_request("filters is not an object", "filters"))
    for name in ("channels", "format_kinds"):
        value = filters.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise InvalidConditionalRequest(
                invalid_request(f"filters.{name} is not a list of strings", f"filters.{name}")
            )
    try:
        return canonical(filters, "get_products", at=("filters",))
    except (TypeError, ValueError) as exc:
        raise InvalidConditionalRequest(invalid_request(str(exc), "filters")) from exc


def account_domain(request: Mapping[str, Any]) -> str | None:
    """The brand domain of the request's account reference, if it names one."""
    account = request.get("account")
    brand = account.get("brand") if isinstance(account, dict) else None
    domain = brand.get("domain") if isinstance(brand, dict) else None
    return domain if isinstance(domain, str) else None
