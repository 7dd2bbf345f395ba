"""The ``adcp`` SDK's ways in without ASGI (``skill_middleware``, ``with_advisories``): each
keys ``varies_by_version`` surfaces by the release its request pins, and no answer carries a
``context`` other than its own request's, as the ASGI middleware does. Driven with the SDK's
own ``ToolContext`` and request models; the sellers themselves are in test_e2e_adcp_sdk."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache

pytest.importorskip("adcp", reason="the adcp extra is needed")

from adcp.server.base import ToolContext
from adcp.types import GetProductsRequest

from adcp_stale_cache.integrations.adcp_sdk import skill_middleware, with_advisories

from ..conftest import CountingMetrics

SUB_AGENT = Upstream(name="sub-seller")


def seller(**policy: Any) -> tuple[UpstreamCache, list[Any]]:
    surface = SurfacePolicy(name="get_products", field="products", shared_across_callers=True,
                            **policy)  # fmt: skip
    return UpstreamCache(MemoryStore(), surfaces=Surfaces.of(surface)), []


async def test_the_skill_middleware_keys_by_the_pinned_release() -> None:
    cache, asked = seller(varies_by_version=True)
    middleware = skill_middleware(cache.surfaces)

    async def as_pinned(**pins: Any) -> Any:
        params = {"buying_mode": "brief", "brief": "b", **pins}

        async def call_next() -> dict[str, Any]:
            async def shaped_for_the_pin() -> dict[str, Any]:
                asked.append(params.get("adcp_version", params.get("adcp_major_version")))
                return {"products": [{"product_id": "p1", "shape": asked[-1]}]}

            return await cache.fetch(SUB_AGENT, "products", shaped_for_the_pin)

        answer = await middleware("get_products", params, ToolContext(), call_next)
        return answer["products"][0]["shape"]

    assert await as_pinned(adcp_version="3.1") == "3.1"
    assert await as_pinned(adcp_version="3.2") == "3.2"  # never 3.1's shape as a hit
    assert await as_pinned(adcp_major_version=3) == 3
    assert await as_pinned(adcp_version="3.1") == "3.1"  # a hit on its own entry
    assert asked == ["3.1", "3.2", 3]


@pytest.mark.parametrize("typed", [False, True])
async def test_with_advisories_alone_keys_by_the_pin_of_its_params(typed: bool) -> None:
    """No middleware at all: the method's ``params`` (a dict, or the SDK's typed request)
    are the request."""
    cache, asked = seller(varies_by_version=True)

    class Seller:
        @with_advisories(cache.surfaces)
        async def get_products(self, params: Any, context: Any = None) -> dict[str, Any]:
            pin = params.adcp_version if typed else params.get("adcp_version")

            async def shaped_for_the_pin() -> dict[str, Any]:
                asked.append(pin)
                return {"products": [{"product_id": "p1", "shape": pin}]}

            return await cache.fetch(SUB_AGENT, "products", shaped_for_the_pin)

    def request(version: str) -> Any:
        fields = {"buying_mode": "brief", "brief": "b", "adcp_version": version}
        return GetProductsRequest(**fields) if typed else fields

    for version in ("3.1", "3.2", "3.1"):
        answer = await Seller().get_products(request(version))
        assert answer["products"][0]["shape"] == version
    assert asked == ["3.1", "3.2"]


async def test_a_cached_context_never_reaches_another_buyer_through_the_skill_middleware() -> None:
    """An upstream's answer cached with buyer A's ``context`` (its echo), served to buyer B
    as a hit: B's answer carries B's own context, or none when B sent none (the SDK echoes
    the request's context only into an answer that has none)."""
    cache, _ = seller()
    middleware = skill_middleware(cache.surfaces)

    async def as_buyer(context: Any) -> dict[str, Any]:
        params = {"buying_mode": "brief", "brief": "b", "context": context}
        if context is None:
            del params["context"]

        async def call_next() -> dict[str, Any]:
            async def echoing_upstream() -> dict[str, Any]:
                return {"products": [{"product_id": "p1"}], "context": context}

            return dict(await cache.fetch(SUB_AGENT, "products", echoing_upstream))

        answer: dict[str, Any] = await middleware("get_products", params, ToolContext(), call_next)
        return answer

    assert (await as_buyer({"correlation_id": "A"}))["context"] == {"correlation_id": "A"}
    assert (await as_buyer({"correlation_id": "B"}))["context"] == {"correlation_id": "B"}
    assert "context" not in await as_buyer(None)


async def test_with_advisories_drops_a_cached_context_for_the_sdk_to_echo_its_own() -> None:
    """Inside the idempotency store's wrap, what the method returns is kept and replayed:
    a context in doubt is dropped there (the SDK then echoes each request's own)."""
    cache, _ = seller()

    class Seller:
        @with_advisories(cache.surfaces)
        async def get_products(self, params: Any, context: Any = None) -> dict[str, Any]:
            async def echoing_upstream() -> dict[str, Any]:
                return {"products": [{"product_id": "p1"}], "context": params["context"]}

            return dict(await cache.fetch(SUB_AGENT, "products", echoing_upstream))

    await Seller().get_products({"context": {"correlation_id": "A"}})
    answer = await Seller().get_products({"context": {"correlation_id": "B"}})
    assert answer["products"] and "context" not in answer


async def test_through_the_sdks_own_mcp_dispatch() -> None:
    """The SDK's MCP server with the skill middleware, called in-process by the ``mcp``
    client: a 3.0 request (which the SDK converts to and from the handler's 3.2) and an
    unpinned one never hit the 3.2 entry, and each answer echoes its own context."""
    from typing import ClassVar

    from adcp.server import ADCPHandler, create_mcp_server
    from mcp import Client

    cache, asked = seller(varies_by_version=True)

    class Seller(ADCPHandler):  # type: ignore[misc]
        advertised_tools: ClassVar[set[str]] = {"get_adcp_capabilities", "get_products"}

        async def get_products(self, params: Any, context: Any = None) -> dict[str, Any]:
            async def echoing_upstream() -> dict[str, Any]:
                asked.append(params.get("context"))
                return {"products": [], "context": params.get("context")}

            return dict(await cache.fetch(SUB_AGENT, "products", echoing_upstream))

    server = create_mcp_server(Seller(), middleware=[skill_middleware(cache.surfaces)])
    answers = []
    async with Client(server) as client:
        for buyer, pin in (("A", "3.2"), ("B", "3.0"), ("C", "3.2"), ("D", None)):
            request = {"buying_mode": "brief", "brief": "b", "context": {"correlation_id": buyer}}
            if pin is not None:
                request["adcp_version"] = pin
            result = await client.call_tool("get_products", request)
            assert not result.is_error
            answers.append(result.structured_content["context"]["correlation_id"])
    assert answers == ["A", "B", "C", "D"]
    assert asked == [{"correlation_id": "A"}, {"correlation_id": "B"}, {"correlation_id": "D"}]


@pytest.mark.parametrize(
    ("way_in", "answer", "reason"),
    [
        ("skill", "payload", None),
        ("skill", "text", "not_json"),
        ("skill", "failed", "failed_task"),
        ("method", "payload", None),
        ("method", "text", "not_json"),
    ],
)
async def test_an_advisory_the_answer_drops_counts_as_lost(
    way_in: str, answer: str, reason: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale serve whose answer cannot carry its advisory (a text answer, a failed task)
    counts as lost, with its reason, never as delivered; one the answer carries, delivered."""
    metrics = CountingMetrics()
    surface = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=0)
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(surface), metrics=metrics)
    state = {"up": True}

    async def answered() -> Any:
        async def load() -> list[Any]:
            if not state["up"]:
                raise ConnectionRefusedError
            return [{"product_id": "p1"}]

        products = await cache.fetch(SUB_AGENT, "products", load)
        if answer == "text":
            return f"{len(products)} products"
        if answer == "failed":
            return {"products": products, "adcp_error": {"code": "INTERNAL_ERROR"}}
        return {"products": products}

    class Seller:
        @with_advisories(cache.surfaces)
        async def get_products(self, params: Any, context: Any = None) -> Any:
            return await answered()

    async def ask() -> Any:
        if way_in == "method":
            return await Seller().get_products({})
        return await skill_middleware(cache.surfaces)("get_products", {}, ToolContext(), answered)

    await ask()
    state["up"], metrics.delivered = False, 0
    with caplog.at_level("WARNING", logger="adcp_stale_cache"):
        stale = await ask()
    lost = [r.getMessage() for r in caplog.records if r.getMessage().startswith("advisory_lost")]
    if reason is None:
        assert [e["code"] for e in stale["errors"]] == ["STALE_RESPONSE"]
        assert (metrics.delivered, metrics.lost) == (1, 0) and not lost
    else:
        assert "STALE_RESPONSE" not in str(stale)
        assert (metrics.delivered, metrics.lost) == (0, 1)
        [line] = lost
        assert f"reason={reason}:" in line and "upstream=sub-seller" in line
