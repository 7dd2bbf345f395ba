"""The kit fails a seller that puts ``errors`` (a ``STALE_RESPONSE`` say) in an answer whose
schema has none: 3.2's ``list_products`` (issue 32). Its table comes from the schemas the
``adcp`` package bundles, never from ``../shared``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache.conformance import check_seller, rules

pytest.importorskip("jsonschema", reason="the check extra is needed")
if rules.response_schema("list_products") is None:
    pytest.skip("the installed adcp bundles no 3.2 list_products schema", allow_module_level=True)

SKILLS = ["get_adcp_capabilities", "list_products", "comply_test_controller"]
PRODUCTS = [{"product_id": "p1"}]


def list_products_seller(stale: dict[str, Any]) -> Starlette:
    """A 3.2 A2A seller of ``list_products`` whose answer while its upstream is forced down
    holds ``stale`` beside its products."""
    forced: list[bool] = []

    def answer(skill: str, parameters: dict[str, Any]) -> dict[str, Any]:
        context = parameters.get("context")
        if skill == "comply_test_controller":
            cold = parameters.get("params", {}).get("empty_cache") is True
            if not cold:
                forced.append(True)
            return {"success": not cold, "current_state": "unavailable", "context": context}
        if skill == "get_adcp_capabilities":
            return {"adcp": {"major_versions": [3]}, "context": context}
        payload = {
            "outcome": "products",
            "products": PRODUCTS,
            "cache_scope": "public",
            "context": context,
            **(stale if forced else {}),
        }
        forced.clear()
        return payload

    async def card(request: Request) -> JSONResponse:
        return JSONResponse({"skills": [{"id": skill} for skill in SKILLS]})

    async def send(request: Request) -> JSONResponse:
        rpc = json.loads(await request.body())
        data = rpc["params"]["message"]["parts"][0]["data"]
        payload = answer(data["skill"], data.get("parameters") or {})
        task = {
            "id": "t",
            "kind": "task",
            "status": {"state": "completed"},
            "artifacts": [{"artifactId": "a", "parts": [{"kind": "data", "data": payload}]}],
        }
        return JSONResponse({"jsonrpc": "2.0", "id": rpc["id"], "result": task})

    return Starlette(
        routes=[Route("/.well-known/agent-card.json", card), Route("/", send, methods=["POST"])]
    )


STALE = {
    "code": "STALE_RESPONSE",
    "message": "m",
    "recovery": "transient",
    "field": "products",
    "details": {"served_from_cache": True, "cache_age_seconds": 120},
}


def test_the_table_comes_from_the_bundled_schemas() -> None:
    assert rules.has_errors_member("list_products") is False
    assert rules.has_errors_member("get_products") is True
    assert rules.has_errors_member("no_such_tool") is True  # unknown: not held to it


@pytest.mark.parametrize(
    ("stale", "passed"),
    [
        ({"errors": [STALE]}, False),
        ({"errors": []}, False),
        ({"incomplete": [{"scope": "products", "description": "served from cache"}]}, True),
    ],
    ids=["a STALE_RESPONSE", "an empty errors", "incomplete"],
)
async def test_a_list_products_answer_never_carries_errors(
    stale: dict[str, Any], passed: bool
) -> None:
    report = await check_seller(list_products_seller(stale), transport="a2a", tool="list_products")
    assert report.passed is passed, report.text()
    failed = {r.rule for r in report.failed()}
    assert failed == (set() if passed else {"no_errors_member (stale)"}), report.text()
