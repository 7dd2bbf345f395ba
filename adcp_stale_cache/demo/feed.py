"""The example seller's wholesale product feed: the public rate card shared across callers,
and the overlay account's own rows keyed per caller. It declares neither tokens nor scopes:
the cache derives both (see docs/adcp-caching.md)."""

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

#: The row members 3.2's canonical product allows (``format_ids`` is for 3.0 and 3.1 only).
CANONICAL_PRODUCT = frozenset(
    {
        "product_id",
        "name",
        "description",
        "publisher_properties",
        "format_options",
        "delivery_type",
        "pricing_options",
        "reporting_capabilities",
    }
)


class WholesaleFeed:
    """Wholesale answers from the inventory service through ``cache``: ``rate_card``
    on a shared surface, ``overlays`` on a per-caller one, ``signals`` the same pair (or None)."""

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
        """The wholesale answer to ``request`` (raises ``InvalidConditionalRequest``
        or ``UpstreamUnavailable``)."""
        rows = self._rows(
            "products",
            (self.rate_card, self.overlays),
            request,
            request.get("filters"),
            authorization,
        )

        async def compose() -> dict[str, Any]:
            return {"products": await rows()}

        return await answer_wholesale(request, compose, cache=self.cache)

    async def list_products(
        self, request: Mapping[str, Any], authorization: str | None
    ) -> dict[str, Any]:
        """The ``list_products`` answer to ``request`` (its
        ``criteria.offer_filters`` filter the inventory)."""
        criteria = request.get("criteria")
        filters = criteria.get("offer_filters") if isinstance(criteria, dict) else None
        rows = self._rows(
            "products", (self.rate_card, self.overlays), request, filters, authorization
        )
        fields = request.get("fields")
        wanted = set(fields) | {"product_id", "name"} if isinstance(fields, list) else None

        async def canonical_products() -> list[Any]:
            return [
                {
                    k: v
                    for k, v in row.items()
                    if k in CANONICAL_PRODUCT and (wanted is None or k in wanted)
                }
                for row in await rows()
            ]

        return await answer_list_products(request, canonical_products, cache=self.cache)

    async def signals(
        self, request: Mapping[str, Any], authorization: str | None
    ) -> dict[str, Any]:
        """The ``get_signals`` answer to ``request``, conditional in ``discovery_mode:
        "wholesale"``."""
        assert self.signal_clients is not None, "this feed has no signals"
        rows = self._rows("signals", self.signal_clients, request, None, authorization)
        if request.get("discovery_mode") != "wholesale":
            return {"signals": await rows()}
        return await answer_signals(request, rows, cache=self.cache)

    def _rows(
        self,
        member: str,
        clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
        request: Mapping[str, Any],
        filters: Any,
        authorization: str | None,
    ) -> Callable[[], Awaitable[list[Any]]]:
        """How to read ``member`` rows: the overlay account's own, else the public
        rate card (no caller's credentials reach it)."""
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
    """``filters`` in canonical form; what the inventory cannot read is the buyer's
    ``INVALID_REQUEST``, never an upstream fault (which would open the breaker for everyone)."""
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
