"""Sellers built on the ``adcp`` SDK server (examples/adcp_sdk_seller.py), called by the
official ``adcp`` Python client: once with the ASGI middleware, once with the skill middleware,
and once with bearer tokens and the SDK's idempotency store (replays keep their advisories).

The SDK takes about half a minute to import, so both sellers start once, side by side.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adcp_stale_cache.demo.processes import App, free_port, wait_for_port

from ..servers import START_SECONDS, reap

pytest.importorskip("adcp", reason="the adcp extra is needed")
pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adcp_sdk_seller.py"


class SdkSeller:
    def __init__(self, inventory_url: str, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(EXAMPLE), "--port", str(self.port), "--inventory-service", inventory_url,
                   "--freshness-target", "0", *flags]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )


@pytest.fixture(scope="module")
def inventory() -> Iterator[App]:
    app = App("inventory-service", free_port()).start()
    try:
        yield app.wait(START_SECONDS)
    finally:
        app.stop()


@pytest.fixture(scope="module")
def sellers(inventory: App) -> Iterator[dict[str, SdkSeller]]:
    flags = {"asgi": (), "skill": ("--skill-middleware",),
             "idempotent": ("--token", f"{TOKEN}=buyer-1")}  # fmt: skip
    started: dict[str, SdkSeller] = {}
    try:
        for name, given in flags.items():  # one at a time: a failed start stops the others
            started[name] = SdkSeller(inventory.url, *given)
        for seller in started.values():
            wait_for_port(seller.port, START_SECONDS, process=seller.process)
            httpx.post(f"{seller.url}/mcp", timeout=30)  # first request warms lazy imports
        yield started
    finally:
        for seller in started.values():
            reap(seller.process)


TOKEN = "buyer-token-1"


async def get_products(url: str, protocol: str, token: str | None = None, **fields: Any) -> Any:
    from adcp import ADCPClient
    from adcp.types import GetProductsRequest
    from adcp.types.core import AgentConfig, Protocol

    config = AgentConfig(id="seller", agent_uri=url, protocol=Protocol(protocol), auth_token=token,
                         auth_type="bearer", auth_header="Authorization")  # fmt: skip
    client = ADCPClient(config)
    return await client.get_products(
        GetProductsRequest(buying_mode="brief", brief="outdoor display", **fields)
    )


@pytest.fixture(scope="module")
def outage(inventory: App, sellers: dict[str, SdkSeller]) -> dict[str, SdkSeller]:
    """Warm both sellers' caches over MCP, then kill the inventory service."""
    import asyncio

    for mode, seller in sellers.items():
        token = TOKEN if mode == "idempotent" else None
        healthy = asyncio.run(get_products(f"{seller.url}/mcp", "mcp", token))
        assert healthy.success and healthy.data.products
        assert not healthy.data.errors  # no advisory while the upstream is healthy
    inventory.kill()
    return sellers


@pytest.mark.parametrize("mode", ["asgi", "skill"])
async def test_adcp_client_over_mcp_sees_typed_stale_response(
    outage: dict[str, SdkSeller], mode: str
) -> None:
    from adcp.types import StaleResponseDetails

    result = await get_products(f"{outage[mode].url}/mcp", "mcp")
    assert result.success is True
    assert result.data.products
    [error] = result.data.errors
    assert error.code == "STALE_RESPONSE"
    assert error.field == "products"
    details = StaleResponseDetails.model_validate(error.details)
    assert details.served_from_cache is True
    assert details.upstream.name == "inventory-service"
    assert details.original_error.code == "CONNECTION_REFUSED"


@pytest.mark.parametrize("mode", ["asgi", "skill"])
async def test_a2a_wire_of_the_sdk_seller(outage: dict[str, SdkSeller], mode: str) -> None:
    """Over A2A the advisory rides in the completed task's DataPart. (The adcp 9.2 client
    reads any errors[] over A2A as a failure: see docs/faq.md.)"""
    message = {"messageId": "m1", "role": "ROLE_USER",
               "parts": [{"data": {"skill": "get_products", "parameters": {"buying_mode": "brief", "brief": "x"}}}]}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{outage[mode].url}/", json=body, headers={"A2A-Version": "1.0"}
        )
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    payload = [p["data"] for p in task["artifacts"][-1]["parts"] if "data" in p][-1]
    assert payload["products"]
    assert [e["code"] for e in payload["errors"]] == ["STALE_RESPONSE"]


async def test_an_idempotent_replay_keeps_its_advisories_with_the_current_context(
    outage: dict[str, SdkSeller],
) -> None:
    """The SDK's store replays what the handler returned; with_advisories put the advisory
    in it, so the replay carries the original one (the same age: it is the kept answer, not
    a new stale serve), and the SDK echoes the replaying request's own context."""
    url = f"{outage['idempotent'].url}/mcp"
    key = "replay-key-0123456789"
    first = await get_products(url, "mcp", TOKEN, idempotency_key=key,
                               context={"correlation_id": "first"})  # fmt: skip
    assert first.success is True and first.data.products
    [advisory] = first.data.errors
    assert advisory.code == "STALE_RESPONSE"
    assert first.data.context.correlation_id == "first"
    await asyncio.sleep(1.1)  # a new stale serve would be older
    replay = await get_products(url, "mcp", TOKEN, idempotency_key=key,
                                context={"correlation_id": "second"})  # fmt: skip
    assert replay.success is True
    assert replay.data.model_dump(mode="json")["replayed"] is True
    assert [e.model_dump(mode="json") for e in replay.data.errors] == [
        advisory.model_dump(mode="json")
    ]  # the original advisory, age and all
    assert replay.data.context.correlation_id == "second"
    assert replay.data.products == first.data.products
    # Another key is a new request: a new stale serve, one advisory, its own age.
    other = await get_products(url, "mcp", TOKEN, idempotency_key="another-key-0123456789")
    [fresh_advisory] = other.data.errors
    assert other.data.model_dump(mode="json").get("replayed") in (None, False)
    assert fresh_advisory.details["cache_age_seconds"] > advisory.details["cache_age_seconds"]


async def test_the_skill_middleware_keys_per_caller_by_the_sdks_principal() -> None:
    """No ASGI request in skill mode: the SDK's ToolContext names whose entry it is, so two
    principals never share a per-caller surface's entry (and one principal keeps its own)."""
    from adcp.server.base import ToolContext

    from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache
    from adcp_stale_cache.integrations.adcp_sdk import skill_middleware

    surfaces = Surfaces.of(SurfacePolicy(name="get_products", field="products"))
    cache = UpstreamCache(surfaces=surfaces)
    middleware = skill_middleware(surfaces)
    inventory = Upstream(name="inventory-service")

    async def as_(principal: str, tenant: str | None = None) -> Any:
        async def call_next() -> dict[str, Any]:
            async def own_rows() -> dict[str, Any]:
                return {"products": [{"product_id": f"{tenant}/{principal}"}]}

            return await cache.fetch(inventory, "products", own_rows)

        context = ToolContext(caller_identity=principal, tenant_id=tenant)
        return (await middleware("get_products", {}, context, call_next))["products"]

    assert await as_("alice") == [{"product_id": "None/alice"}]
    assert await as_("bob") == [{"product_id": "None/bob"}]
    assert await as_("alice", "acme") == [{"product_id": "acme/alice"}]  # another tenant's
    assert await as_("alice") == [{"product_id": "None/alice"}]  # a hit on her own entry
