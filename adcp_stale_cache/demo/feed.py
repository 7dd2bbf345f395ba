"""The example seller's wholesale product feed (``get_products``, ``buying_mode: "wholesale"``).

Every account reads the public rate card, one entry shared across callers; the reserved
overlay account ``account-overlay.example`` reads its own rows, keyed per caller. The seller
declares neither tokens nor scopes: :func:`~adcp_stale_cache.answer_wholesale` derives the
``wholesale_feed_version`` from the cached entries the answer was composed of, the
``cache_scope`` from how they were keyed (``public`` for the rate card, ``account`` for the
overlay), and answers a matching probe ``unchanged: true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from ..cache import UpstreamCache
from ..conditional import InvalidConditionalRequest, answer_wholesale, invalid_request
from ..wholesale import canonical

#: The account the AdCP storyboards use to elicit an account-scoped answer.
OVERLAY_ACCOUNT = "account-overlay.example"


class WholesaleFeed:
    """Wholesale answers from the inventory service: ``rate_card`` is a client on a surface
    shared across callers, ``overlays`` one on a per-caller surface, both through ``cache``
    (which also answers matching probes without composing)."""

    def __init__(
        self, cache: UpstreamCache, rate_card: httpx.AsyncClient, overlays: httpx.AsyncClient
    ) -> None:
        self.cache = cache
        self.rate_card = rate_card
        self.overlays = overlays

    async def answer(self, request: Mapping[str, Any], authorization: str | None) -> dict[str, Any]:
        """The wholesale answer to ``request`` (raises ``InvalidConditionalRequest`` for a
        lone pricing token, ``UpstreamUnavailable`` when nothing can answer)."""
        query: dict[str, str] = {}
        filters = request.get("filters")
        if filters is not None:  # canonical: reordered filters, one entry
            query["filters"] = json.dumps(_canonical_filters(filters))
        overlay = account_domain(request) == OVERLAY_ACCOUNT

        async def compose() -> dict[str, Any]:
            if overlay:
                headers = {"authorization": authorization} if authorization else None
                response = await self.overlays.get(
                    "/products", params={**query, "account": OVERLAY_ACCOUNT}, headers=headers
                )
            else:  # the rate card is everyone's: no caller's credentials reach it
                response = await self.rate_card.get("/products", params=query)
            return {"products": response.json()["products"]}

        return await answer_wholesale(request, compose, cache=self.cache)


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
