"""The example seller's sub-sellers: other AdCP sellers whose public wholesale feeds it sells
too, asked over MCP behind the cache (:class:`~adcp_stale_cache.integrations.adcp_agent.AdcpAgent`).
Needs the ``adcp-server`` extra."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from .. import Upstream, UpstreamCache, UpstreamUnavailable, service_unavailable
from ..core.failures import classify
from ..integrations.adcp_agent import AdcpAgent, AgentRefused

logger = logging.getLogger("adcp_stale_cache.demo")

#: The surface of the sub-sellers' feeds: public rate cards, one entry for every caller.
SUB_SELLERS = "sub_seller_products"

#: What a sub-seller is asked for: its public wholesale feed.
FEED_REQUEST: dict[str, Any] = {"buying_mode": "wholesale"}


class SubSellers:
    """The sub-sellers ``urls`` names (name -> MCP URL), asked through ``cache``."""

    def __init__(self, cache: UpstreamCache, urls: Mapping[str, str]) -> None:
        self.agents = [
            AdcpAgent(cache, Upstream(name=name, url=url), surface=SUB_SELLERS)
            for name, url in urls.items()
        ]

    @property
    def names(self) -> tuple[str, ...]:
        """The sub-sellers' names, as our advisories name them."""
        return tuple(agent.upstream.name for agent in self.agents)

    async def products(self) -> tuple[list[Any], list[dict[str, Any]]]:
        """Every sub-seller's products, and a ``SERVICE_UNAVAILABLE`` error for each
        one that answered nothing."""
        return await gather_items(
            ((agent.upstream, self._products(agent)) for agent in self.agents), field="products"
        )

    @staticmethod
    async def _products(agent: AdcpAgent) -> list[Any]:
        answer = await agent.get_products(FEED_REQUEST)
        return list(answer.get("products") or [])


async def gather_items(
    calls: Iterable[tuple[Upstream, Awaitable[list[Any]]]], *, field: str
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The items of ``calls`` run at once, and a ``SERVICE_UNAVAILABLE`` error (for
    ``field``) per upstream that answered nothing: one upstream never sinks the others."""
    asked = list(calls)
    results = await asyncio.gather(*(call for _, call in asked), return_exceptions=True)
    items: list[Any] = []
    errors: list[dict[str, Any]] = []
    for (upstream, _), result in zip(asked, results, strict=True):
        if isinstance(result, Exception) and not isinstance(result, UpstreamUnavailable):
            logger.warning("upstream_failed upstream=%s", upstream.name, exc_info=result)
            failure = result.failure if isinstance(result, AgentRefused) else classify(result)
            result = UpstreamUnavailable(upstream, failure)
        if isinstance(result, UpstreamUnavailable):
            errors.append(service_unavailable(result, field=field).to_dict())
        elif isinstance(result, BaseException):  # cancelled: never an upstream's failure
            raise result
        else:
            items.extend(result)
    return items, errors
