"""The quick starts of docs/quickstart.md, each run for real: a healthy answer, then the
inventory service killed (a real process on loopback) and a stale answer with its advisory,
through the transport's own client (httpx, the ``mcp`` client, the ``a2a-sdk`` client)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import uuid4

import httpx
import pytest

from adcp_stale_cache.demo.processes import App, free_port

from ..conftest import age_entries
from ..servers import inventory_service, serve

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture
def inventory() -> Iterator[App]:
    with inventory_service() as app:
        yield app


def quickstart(name: str, inventory: App) -> ModuleType:
    """Load examples/<name>.py as a fresh module, its inventory client pointed at ``inventory``."""
    spec = importlib.util.spec_from_file_location(
        f"quickstart_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.inventory.base_url = inventory.url
    return module


async def outage(module: ModuleType, inventory: App) -> None:
    """Kill the inventory service and age the cache past its 60 s target."""
    inventory.kill()
    await age_entries(module.cache.store, 75)


def check(payload: dict[str, Any], products: list[Any]) -> None:
    assert payload["products"] == products
    [advisory] = payload["errors"]
    assert advisory["code"] == "STALE_RESPONSE"
    assert advisory["field"] == "products"
    assert advisory["details"]["upstream"] == {"name": "inventory-service"}
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
    assert advisory["details"]["cache_age_seconds"] >= 75


async def test_fastapi(inventory: App) -> None:
    module = quickstart("fastapi_seller", inventory)
    transport = httpx.ASGITransport(app=module.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as buyer:
        healthy = (await buyer.post("/api/get_products")).json()
        await outage(module, inventory)
        stale = await buyer.post("/api/get_products")
    assert "errors" not in healthy and healthy["products"]
    assert stale.status_code == 200
    check(stale.json(), healthy["products"])
    assert stale.headers["age"] == str(stale.json()["errors"][0]["details"]["cache_age_seconds"])


async def test_mcp_server(inventory: App) -> None:
    from mcp import Client

    module = quickstart("mcp_seller", inventory)
    with serve(module.app) as url:
        async with Client(f"{url}/mcp", cache=None) as client:
            healthy = await client.call_tool("get_products", {"brief": "video"})
            await outage(module, inventory)
            stale = await client.call_tool("get_products", {"brief": "video"})
    assert healthy.is_error is False and "errors" not in healthy.structured_content
    assert stale.is_error is False
    products = healthy.structured_content["products"]
    check(stale.structured_content, products)
    [text] = [block.text for block in stale.content if getattr(block, "text", "").startswith("{")]
    check(json.loads(text), products)


async def test_a2a_server(inventory: App, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2a import types as pb
    from a2a.client import ClientConfig, create_client
    from google.protobuf.json_format import MessageToDict, ParseDict
    from google.protobuf.struct_pb2 import Value

    port = free_port()
    monkeypatch.setenv("SELLER_URL", f"http://127.0.0.1:{port}/")
    module = quickstart("a2a_seller", inventory)
    data = Value()
    ParseDict({"skill": "get_products", "parameters": {"brief": "video"}}, data)

    async def ask(client: Any) -> tuple[str, dict[str, Any]]:
        message = pb.Message(
            message_id=str(uuid4()), role=pb.Role.ROLE_USER, parts=[pb.Part(data=data)]
        )
        events = [
            MessageToDict(e)
            async for e in client.send_message(pb.SendMessageRequest(message=message))
        ]
        task = [e["task"] for e in events if "task" in e][-1]
        [part] = task["artifacts"][-1]["parts"]
        return task["status"]["state"], part["data"]

    with serve(module.app, port=port) as url:
        async with httpx.AsyncClient(timeout=10) as http:
            client = await create_client(
                url, client_config=ClientConfig(streaming=False, httpx_client=http)
            )
            state, healthy = await ask(client)
            await outage(module, inventory)
            stale_state, stale = await ask(client)
    assert state == stale_state == "TASK_STATE_COMPLETED"
    assert "errors" not in healthy
    check(stale, healthy["products"])
