"""AdCP's wholesale conditional fetch, end to end: the example seller and the inventory
service behind it as real processes on loopback, a 2 s freshness target, a buyer on each of
the seller's transports (its REST route, MCP with the ``mcp`` client, A2A ``SendMessage``).

The story is issue 24's acceptance, in order: bootstrap; matching probe; lone pricing token;
reordered filters; the overlay account and scope isolation; the inventory changes; the
inventory goes down. Every answer must echo its own request's ``context``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import uuid4

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from ..deployment import Deployment
from ..spec_schemas import spec_schema

pytestmark = pytest.mark.e2e

TARGET = 2  # seconds: the seller's freshness target
ACCOUNT = {"brand": {"domain": "acmeoutdoor.example"}, "operator": "pinnacle-agency.example"}
OVERLAY = {"brand": {"domain": "account-overlay.example"}, "operator": "pinnacle-agency.example"}
FILTERS = {"channels": ["display", "olv"], "format_kinds": ["image", "html5"]}
REORDERED = {"format_kinds": ["html5", "image"], "channels": ["olv", "display"]}

#: A call of a tool (get_products unless named): the AdCP answer, and whether the transport
#: said the task failed.
Ask = Callable[..., Awaitable[tuple[dict[str, Any], bool]]]


@contextlib.asynccontextmanager
async def buyer(seller: str, transport: str) -> AsyncIterator[Ask]:
    async with httpx.AsyncClient(timeout=10) as http:
        if transport == "rest":

            async def rest(
                params: dict[str, Any], tool: str = "get_products"
            ) -> tuple[dict[str, Any], bool]:
                response = await http.post(f"{seller}/api/{tool}", json=params)
                assert response.status_code in (200, 400), response.text
                return response.json(), response.status_code != 200

            yield rest
        elif transport == "mcp":
            async with (
                streamable_http_client(f"{seller}/mcp", http_client=http) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()

                async def mcp(
                    params: dict[str, Any], tool: str = "get_products"
                ) -> tuple[dict[str, Any], bool]:
                    result = await session.call_tool(tool, params)
                    text = result.content[0]
                    assert isinstance(text, TextContent)  # the seller's tools answer JSON text
                    return result.structured_content or json.loads(text.text), result.is_error

                yield mcp
        else:

            async def a2a(
                params: dict[str, Any], tool: str = "get_products"
            ) -> tuple[dict[str, Any], bool]:
                message = {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [
                    {"data": {"skill": tool, "parameters": params}}
                ]}  # fmt: skip
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                        "params": {"message": message}}  # fmt: skip
                response = await http.post(f"{seller}/", json=body, headers={"A2A-Version": "1.0"})
                task = response.json()["result"]["task"]
                state = task["status"]["state"]
                assert state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")
                parts = task["artifacts"][-1]["parts"]
                payload: dict[str, Any] = [p["data"] for p in parts if "data" in p][-1]
                return payload, state == "TASK_STATE_FAILED"

            yield a2a


def list_products_errors(answer: dict[str, Any]) -> list[str]:
    """What the official 3.2 ``list_products`` response schema finds wrong with ``answer``."""
    validator = spec_schema("media-buy/list-products-response.json")
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(answer)]


def stale(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in answer.get("errors") or [] if e["code"] == "STALE_RESPONSE"]


async def served(deployment: Deployment) -> int:
    """How many full answers the inventory service has given."""
    async with httpx.AsyncClient(timeout=5) as http:
        return int((await http.get(f"{deployment.inventory.url}/stats")).json()["200"])


@pytest.mark.parametrize("transport", ["rest", "mcp", "a2a"])
def test_wholesale_conditional_fetch_end_to_end(transport: str) -> None:
    with Deployment("--freshness-target", str(TARGET), "--upstream-timeout", "2",
                    agents="a") as deployment:  # fmt: skip
        asyncio.run(story(deployment, transport))


async def story(deployment: Deployment, transport: str) -> None:
    async with buyer(deployment.url, transport) as ask:
        step = 0

        async def get(**params: Any) -> tuple[dict[str, Any], bool]:
            nonlocal step
            step += 1
            context = {"correlation_id": f"{transport}-{step}"}
            answer, failed = await ask({"buying_mode": "wholesale", "account": ACCOUNT,
                                        **params, "context": context})  # fmt: skip
            assert answer["context"] == context  # its own request's, every time
            return answer, failed

        # Bootstrap: products, a token, the public layer.
        boot, failed = await get()
        assert not failed and boot["products"] and boot["cache_scope"] == "public"
        token = boot["wholesale_feed_version"]
        assert "unchanged" not in boot and not stale(boot)
        # The same token: unchanged, no products, the token echoed.
        probe, _ = await get(if_wholesale_feed_version=token)
        assert probe["unchanged"] is True and "products" not in probe
        assert (probe["wholesale_feed_version"], probe["cache_scope"]) == (token, "public")
        # A lone pricing token: INVALID_REQUEST, as a failed task.
        refused, failed = await get(if_pricing_version="stale-pricing-token")
        assert failed and refused["adcp_error"]["code"] == "INVALID_REQUEST"
        assert refused["adcp_error"]["field"] == "if_pricing_version"
        # Filters and the same filters reordered: one token, one inventory call.
        before = await served(deployment)
        one, _ = await get(filters=FILTERS)
        other, _ = await get(filters=REORDERED)
        assert one["wholesale_feed_version"] == other["wholesale_feed_version"] != token
        assert one["products"] == other["products"] and await served(deployment) == before + 1
        # The overlay account: its own scope, rows and token; no token crosses scopes.
        overlay, _ = await get(account=OVERLAY)
        assert overlay["cache_scope"] == "account" and overlay["products"]
        mine = overlay["wholesale_feed_version"]
        assert mine != token
        assert {p["product_id"] for p in overlay["products"]}.isdisjoint(
            p["product_id"] for p in boot["products"]
        )
        crossed, _ = await get(account=OVERLAY, if_wholesale_feed_version=token)
        assert "unchanged" not in crossed and crossed["products"] == overlay["products"]
        back, _ = await get(if_wholesale_feed_version=mine)
        assert "unchanged" not in back and back["products"] == boot["products"]
        assert (await get(account=OVERLAY, if_wholesale_feed_version=mine))[0]["unchanged"]
        # The inventory changes; once the target passes the old token gets the new feed.
        async with httpx.AsyncClient(timeout=5) as http:
            (await http.post(f"{deployment.inventory.url}/revision")).raise_for_status()
        still, _ = await get(if_wholesale_feed_version=token)
        assert still["unchanged"] is True  # within the target: the cache answers
        await asyncio.sleep(TARGET + 0.3)
        changed, _ = await get(if_wholesale_feed_version=token)
        assert "unchanged" not in changed and not stale(changed)
        assert all("revision 1" in p["name"] for p in changed["products"])
        current = changed["wholesale_feed_version"]
        assert current != token
        # 3.2's list_products reads the same feed: its own token, unchanged when it matches.
        listing = {"account": ACCOUNT, "context": {"correlation_id": f"{transport}-list"}}
        listed, _ = await ask(listing, "list_products")
        assert listed["outcome"] == "listed" and listed["products"]
        feed = listed["feed_version"]
        assert feed != current and listed["context"] == listing["context"]
        same, _ = await ask({**listing, "if_feed_version": feed}, "list_products")
        assert (same["outcome"], same["feed_version"]) == ("unchanged", feed)
        for answer in (listed, same):
            assert list_products_errors(answer) == []
        # The inventory goes down, the entry past its target: the full cached feed, one
        # STALE_RESPONSE and the cached feed's token, never unchanged.
        deployment.inventory.kill()
        await asyncio.sleep(TARGET + 0.3)
        down, failed = await get(if_wholesale_feed_version=current)
        assert not failed and "unchanged" not in down
        assert down["products"] == changed["products"]
        assert down["wholesale_feed_version"] == current
        [advisory] = stale(down)
        assert advisory["field"] == "products"
        assert advisory["details"]["upstream"] == {"name": "inventory-service"}
        assert advisory["details"]["cache_age_seconds"] >= TARGET
        # list_products on the same stale entry: listed, told in incomplete[], no errors[].
        down_listed, failed = await ask({**listing, "if_feed_version": feed}, "list_products")
        assert not failed and down_listed["outcome"] == "listed"
        assert (down_listed["products"], down_listed["feed_version"]) == (listed["products"], feed)
        assert [i["scope"] for i in down_listed["incomplete"]] == ["products"]
        assert "errors" not in down_listed and list_products_errors(down_listed) == []
        assert down_listed["context"] == listing["context"]


# In process (the seller and its inventory service over httpx.ASGITransport): what a hostile
# buyer sends the example seller.


@contextlib.asynccontextmanager
async def in_process() -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    from adcp_stale_cache.demo.inventory_service import create_inventory_app
    from adcp_stale_cache.demo.seller import create_seller_app

    inventory = httpx.ASGITransport(app=create_inventory_app(count=3))
    seller = create_seller_app(creative_agents={}, inventory_url="http://inventory",
                               inventory_transport=inventory)  # fmt: skip
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=seller), base_url="http://s") as http,
        httpx.AsyncClient(transport=inventory, base_url="http://inventory") as stats,
    ):
        yield http, stats


async def test_bad_filters_are_the_buyers_to_correct_and_never_deny_other_buyers() -> None:
    async with in_process() as (http, inventory):
        for bad in ({"channels": 5}, {"format_kinds": [1]}, "display",
                    json.loads('{"x":' * 600 + "{}" + "}" * 600)):  # fmt: skip
            for _ in range(4):  # past the breaker's threshold, had they counted as outages
                response = await http.post(
                    "/api/get_products", json={"buying_mode": "wholesale", "filters": bad}
                )
                assert response.status_code == 400
                assert response.json()["adcp_error"]["code"] == "INVALID_REQUEST"
        good = await http.post("/api/get_products", json={"buying_mode": "wholesale"})
        assert good.status_code == 200 and good.json()["products"]
        assert (await inventory.get("/stats")).json()["200"] == 1  # called, not refused


@pytest.mark.parametrize(("pin", "status", "served"), [
    ({"adcp_version": "3.0.6"}, 200, "3.0"), ({"adcp_version": "3.1-beta"}, 200, "3.0"),
    ({"adcp_version": "3.9"}, 200, "3.2"), ({"adcp_version": "4.0"}, 400, "VERSION_UNSUPPORTED"),
    ({"adcp_version": "3." + "9" * 5000}, 400, "INVALID_REQUEST"),
    ({"adcp_version": 3.1}, 400, "INVALID_REQUEST"), ({"adcp_major_version": "3"}, 400, "INVALID_REQUEST"),
    ({"adcp_major_version": True}, 400, "INVALID_REQUEST"), ({"adcp_major_version": 3}, 200, "3.2"),
])  # fmt: skip
async def test_release_pins_are_served_or_refused_never_crash(
    pin: dict[str, Any], status: int, served: str
) -> None:
    async with in_process() as (http, _):
        for tool in ("get_adcp_capabilities", "get_products"):
            response = await http.post(f"/api/{tool}", json=pin)
            assert response.status_code == status, response.text
            body = response.json()
            assert (body["adcp_version"] if status == 200 else body["adcp_error"]["code"]) == served


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"wholesale"'])
async def test_a_body_that_is_not_a_json_object_is_refused(body: bytes) -> None:
    async with in_process() as (http, _):
        response = await http.post("/api/get_products", content=body)
    assert response.status_code == 400
    assert response.json()["adcp_error"]["code"] == "INVALID_REQUEST"
