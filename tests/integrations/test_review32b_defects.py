"""Review 32b: reproductions of defects in the parts of issue 32's work the first review did
not reach (the adcp SDK integration, the conformance kit), each fixed since. Its
per-tenant breaker case is in test_tenant_breakers."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..a2a_kit_seller import CAPABILITIES, a2a_seller

# --- the adcp SDK integration ----------------------------------------------------------------


async def test_with_advisories_alone_keeps_callers_apart() -> None:
    from types import SimpleNamespace

    from adcp_stale_cache.integrations.adcp_sdk import with_advisories

    per_caller = SurfacePolicy(name="get_products", field="products")  # not shared
    assert not per_caller.shared_across_callers
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(per_caller))

    class Seller:
        @with_advisories(cache.surfaces)
        async def get_products(self, params: Any, context: Any = None) -> dict[str, Any]:
            async def own_products() -> dict[str, Any]:
                return {"products": [{"product_id": f"for-{context.caller_identity}"}]}

            return await cache.fetch(Upstream(name="sub-seller"), "products", own_products)

    for caller in ("buyer-a", "buyer-b"):
        context = SimpleNamespace(caller_identity=caller, tenant_id="t")
        answer = await Seller().get_products({"brief": "b"}, context=context)
        assert answer["products"][0]["product_id"] == f"for-{caller}"


# --- the conformance kit ---------------------------------------------------------------------


async def test_the_kit_passes_a_seller_whose_capabilities_hold_a_null_adcp_error() -> None:
    pytest.importorskip("jsonschema", reason="the check extra is needed")
    from adcp_stale_cache.conformance import check_seller, rules

    if rules.response_schema("list_products") is None:
        pytest.skip("the installed adcp bundles no 3.2 list_products schema")
    told = {"incomplete": [{"scope": "products", "description": "served from cache"}]}
    good = await check_seller(a2a_seller(told), transport="a2a", tool="list_products")
    assert good.passed, good.text()  # the same seller, without the null member, passes
    nulled = {**CAPABILITIES, "adcp_error": None}
    report = await check_seller(
        a2a_seller(told, capabilities=nulled), transport="a2a", tool="list_products"
    )
    assert report.passed, report.text()


def stale_response(age: float) -> dict[str, Any]:
    return {
        "code": "STALE_RESPONSE",
        "message": "Served from cache: an upstream is unavailable",
        "recovery": "transient",
        "field": "products",
        "details": {
            "served_from_cache": True,
            "cache_age_seconds": age,
            "freshness_target_seconds": 60,
            "upstream": {"name": "inventory"},
            "original_error": {"code": "SERVICE_UNAVAILABLE"},
        },
    }


async def test_the_kit_passes_a_seller_stating_its_age_as_an_integral_double() -> None:
    pytest.importorskip("jsonschema", reason="the check extra is needed")
    pytest.importorskip("adcp", reason="the check extra is needed (its schemas)")
    from adcp_stale_cache.conformance import check_seller

    async def check(age: float) -> Any:
        seller = a2a_seller({"errors": [stale_response(age)]}, "get_products")
        return await check_seller(seller, transport="a2a", tool="get_products")

    good = await check(120)
    assert good.passed, good.text()  # the same seller stating 120 passes
    report = await check(120.0)
    assert report.passed, report.text()
