"""Review 32b: reproductions of defects in the parts of issue 32's work the first review did
not reach (per-tenant breakers, the adcp SDK integration, the conformance kit), each
fixed since."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.breaker import BreakerPolicy
from adcp_stale_cache.failures import UpstreamError

from .conftest import FakeClock

# --- per-tenant breakers -------------------------------------------------------------------

POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=1000
)
BREAKER = BreakerPolicy(failure_threshold=2, window_seconds=60, cooldown_seconds=30)
AGENT = "https://agent.example/mcp"
TENANT_A = Upstream(name="agent", url=AGENT, credentials="token-of-a")
TENANT_B = Upstream(name="agent", url=AGENT, credentials="token-of-b")


class Agent:
    def __init__(self, fails: BaseException | None = None) -> None:
        self.calls = 0
        self.fails = fails

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.fails is not None:
            raise self.fails
        return {"products": [self.calls]}


@pytest.mark.parametrize("code", ["AUTH_INVALID", "ACCOUNT_SUSPENDED", "AGENT_SUSPENDED"])
async def test_one_tenants_revoked_credentials_never_hold_another_back(
    clock: FakeClock, code: str
) -> None:
    cache = UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock, breaker=BREAKER
    )
    for _ in range(2):  # tenant A's token is revoked: its own calls fail
        with collect_advisories(), pytest.raises(UpstreamUnavailable):
            await cache.fetch(TENANT_A, "k", Agent(fails=UpstreamError(code)), surface=POLICY)
    agent_b = Agent()
    with collect_advisories():
        answer = await cache.fetch(TENANT_B, "k", agent_b, surface=POLICY)
    assert agent_b.calls == 1 and answer == {"products": [1]}


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


def a2a_seller(
    capabilities: dict[str, Any], tool: str = "list_products", told: dict[str, Any] | None = None
) -> Starlette:
    """An A2A seller of ``tool`` that passes the kit (see test_conformance_no_errors), whose
    capabilities answer is ``capabilities`` and whose stale answer adds ``told``."""
    forced: list[bool] = []

    def answer(skill: str, parameters: dict[str, Any]) -> dict[str, Any]:
        context = parameters.get("context")
        if skill == "comply_test_controller":
            cold = parameters.get("params", {}).get("empty_cache") is True
            if not cold:
                forced.append(True)
            return {"success": not cold, "current_state": "unavailable", "context": context}
        if skill == "get_adcp_capabilities":
            return {**capabilities, "context": context}
        if told is None:
            stale = {"incomplete": [{"scope": "products", "description": "served from cache"}]}
        else:
            stale = told
        payload = {"outcome": "products", "products": [{"product_id": "p1"}],
                   "cache_scope": "public", "context": context, **(stale if forced else {})}  # fmt: skip
        forced.clear()
        return payload

    async def card(request: Request) -> JSONResponse:
        skills = ["get_adcp_capabilities", tool, "comply_test_controller"]
        return JSONResponse({"skills": [{"id": skill} for skill in skills]})

    async def send(request: Request) -> JSONResponse:
        rpc = json.loads(await request.body())
        data = rpc["params"]["message"]["parts"][0]["data"]
        payload = answer(data["skill"], data.get("parameters") or {})
        task = {"id": "t", "kind": "task", "status": {"state": "completed"},
                "artifacts": [{"artifactId": "a", "parts": [{"kind": "data", "data": payload}]}]}  # fmt: skip
        return JSONResponse({"jsonrpc": "2.0", "id": rpc["id"], "result": task})

    return Starlette(
        routes=[Route("/.well-known/agent-card.json", card), Route("/", send, methods=["POST"])]
    )


async def test_the_kit_passes_a_seller_whose_capabilities_hold_a_null_adcp_error() -> None:
    pytest.importorskip("jsonschema", reason="the check extra is needed")
    from adcp_stale_cache.conformance import check_seller, rules

    if rules.response_schema("list_products") is None:
        pytest.skip("the installed adcp bundles no 3.2 list_products schema")
    capabilities = {"adcp": {"major_versions": [3]}}
    good = await check_seller(a2a_seller(capabilities), transport="a2a", tool="list_products")
    assert good.passed, good.text()  # the same seller, without the null member, passes
    nulled = {**capabilities, "adcp_error": None}
    report = await check_seller(a2a_seller(nulled), transport="a2a", tool="list_products")
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
    from adcp_stale_cache.conformance import check_seller

    capabilities = {"adcp": {"major_versions": [3]}}

    async def check(age: float) -> Any:
        seller = a2a_seller(capabilities, "get_products", {"errors": [stale_response(age)]})
        return await check_seller(seller, transport="a2a", tool="get_products")

    good = await check(120)
    assert good.passed, good.text()  # the same seller stating 120 passes
    report = await check(120.0)
    assert report.passed, report.text()
