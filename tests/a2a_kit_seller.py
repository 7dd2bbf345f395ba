"""A minimal A2A seller the conformance kit can check: it answers ``tool`` with one product,
and while its upstream is forced down (``comply_test_controller``) adds ``stale`` to that
answer (an ``errors[]`` with a ``STALE_RESPONSE``, an ``incomplete[]``, ...)."""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CAPABILITIES: dict[str, Any] = {"adcp": {"major_versions": [3]}}


def a2a_seller(
    stale: dict[str, Any], tool: str = "list_products", capabilities: dict[str, Any] | None = None
) -> Starlette:
    """The seller; ``capabilities`` is its ``get_adcp_capabilities`` answer."""
    forced: list[bool] = []
    skills = ["get_adcp_capabilities", tool, "comply_test_controller"]

    def answer(skill: str, parameters: dict[str, Any]) -> dict[str, Any]:
        context = parameters.get("context")
        if skill == "comply_test_controller":
            cold = parameters.get("params", {}).get("empty_cache") is True
            if not cold:
                forced.append(True)
            return {"success": not cold, "current_state": "unavailable", "context": context}
        if skill == "get_adcp_capabilities":
            return {**(capabilities or CAPABILITIES), "context": context}
        payload = {
            "outcome": "products",
            "products": [{"product_id": "p1"}],
            "cache_scope": "public",
            "context": context,
            **(stale if forced else {}),
        }
        forced.clear()
        return payload

    async def card(request: Request) -> JSONResponse:
        return JSONResponse({"skills": [{"id": skill} for skill in skills]})

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
