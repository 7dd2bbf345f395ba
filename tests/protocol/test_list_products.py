"""3.2's ``list_products`` and a signals agent's ``get_signals``, answered from the cache as
``get_products``' wholesale feed is: the example seller and its inventory service in process
(httpx.ASGITransport), a clock of the test's own, the inventory taken down at will.

Every ``list_products`` answer is checked against the official 3.2 schema (as the ``adcp``
package bundles it): it has no ``errors[]`` and allows no extra member, so a stale answer is
told in ``incomplete[]``, and nothing (the middleware included) may add an ``errors`` member.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import uuid4

import httpx
import pytest

from adcp_stale_cache import StaleAdvisoryMiddleware, SurfacePolicy, Surfaces, Upstream
from adcp_stale_cache.core.advisory import stale_response
from adcp_stale_cache.pipeline.collector import current_collector
from adcp_stale_cache.stores import MemoryStore

from ..spec_schemas import spec_schema

ACCOUNT = {"brand": {"domain": "acmeoutdoor.example"}, "operator": "pinnacle-agency.example"}
OVERLAY = {"brand": {"domain": "account-overlay.example"}, "operator": "pinnacle-agency.example"}
CRITERIA = {"offer_filters": {"channels": ["display"]}}
TARGET = 60


def schema_errors(answer: dict[str, Any]) -> list[str]:
    validator = spec_schema("media-buy/list-products-response.json")
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(answer)]


class Inventory(httpx.AsyncBaseTransport):
    """The inventory service in process, refusing connections while ``down``."""

    def __init__(self) -> None:
        from adcp_stale_cache.demo.inventory_service import create_inventory_app

        self.app = httpx.ASGITransport(app=create_inventory_app(count=3))
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return await self.app.handle_async_request(request)


Post = Callable[..., Awaitable[tuple[dict[str, Any], int]]]


@contextlib.asynccontextmanager
async def seller(transport: str) -> AsyncIterator[tuple[Post, Inventory, list[float]]]:
    """A buyer of the example seller over ``transport`` (its REST route, or A2A
    ``SendMessage``), the inventory, and the clock (``now[0]``, seconds)."""
    from adcp_stale_cache.demo.seller import create_seller_app

    now = [1000.0]
    inventory = Inventory()
    app = create_seller_app(creative_agents={}, inventory_url="http://inventory",
                            inventory_transport=inventory, freshness_target=TARGET,
                            store=MemoryStore(clock=lambda: now[0]))  # fmt: skip
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://s"
    ) as http:

        async def rest(tool: str, **params: Any) -> tuple[dict[str, Any], int]:
            response = await http.post(f"/api/{tool}", json=params)
            return response.json(), response.status_code

        async def a2a(tool: str, **params: Any) -> tuple[dict[str, Any], int]:
            message = {"messageId": str(uuid4()), "role": "ROLE_USER",
                       "parts": [{"data": {"skill": tool, "parameters": params}}]}  # fmt: skip
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": message}}  # fmt: skip
            response = await http.post("/", json=body, headers={"A2A-Version": "1.0"})
            task = response.json()["result"]["task"]
            parts = task["artifacts"][-1]["parts"]
            payload: dict[str, Any] = [p["data"] for p in parts if "data" in p][-1]
            failed = task["status"]["state"] == "TASK_STATE_FAILED"
            return payload, 400 if failed else 200

        yield (rest if transport == "rest" else a2a), inventory, now


TRANSPORTS = pytest.mark.parametrize("transport", ["rest", "a2a"])


@TRANSPORTS
async def test_a_matching_feed_version_is_answered_unchanged(transport: str) -> None:
    async with seller(transport) as (post, _, _):
        listed, status = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                                    context={"correlation_id": "a"})  # fmt: skip
        assert status == 200 and schema_errors(listed) == []
        assert listed["outcome"] == "listed" and listed["products"]
        assert listed["cache_scope"] == "public" and listed["context"] == {"correlation_id": "a"}
        token = listed["feed_version"]
        probe, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                              if_feed_version=token, context={"correlation_id": "b"})  # fmt: skip
        assert probe == {"outcome": "unchanged", "feed_version": token, "cache_scope": "public",
                         "context": {"correlation_id": "b"}}  # fmt: skip
        assert schema_errors(probe) == []
        # Another selection, the overlay account: another token, never unchanged.
        other, _ = await post("list_products", account=ACCOUNT, if_feed_version=token,
                              criteria={"offer_filters": {"channels": ["olv"]}})  # fmt: skip
        overlay, _ = await post("list_products", account=OVERLAY, criteria=CRITERIA,
                                if_feed_version=token)  # fmt: skip
        for answer in (other, overlay):
            assert answer["outcome"] == "listed" and answer["feed_version"] != token
            assert schema_errors(answer) == []
        assert overlay["cache_scope"] == "account"
        # Arrays keep their order in the token: a lng/lat pair swapped is another place.
        places = [(await post("list_products", account=ACCOUNT, criteria={
            **CRITERIA, "targeting_overlay": {"coordinates": pair}}))[0]["feed_version"]
            for pair in ([-73.9, 40.7], [40.7, -73.9])]  # fmt: skip
        assert places[0] != places[1]
        # get_products' token is another tool's: it never matches list_products.
        wholesale, _ = await post("get_products", buying_mode="wholesale", account=ACCOUNT,
                                  filters=CRITERIA["offer_filters"])  # fmt: skip
        crossed, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                                if_feed_version=wholesale["wholesale_feed_version"])  # fmt: skip
        assert crossed["outcome"] == "listed"


@TRANSPORTS
async def test_forecast_is_never_answered_unchanged(transport: str) -> None:
    async with seller(transport) as (post, _, _):
        fields = ["product_id", "name"]
        listed, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA, fields=fields)
        token = listed["feed_version"]
        same, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                             fields=fields, if_feed_version=token)  # fmt: skip
        assert same["outcome"] == "unchanged"
        asked, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                              fields=[*fields, "forecast"], if_feed_version=token)  # fmt: skip
        assert asked["outcome"] == "listed" and asked["products"]
        assert asked["feed_version"] == token  # forecast is no part of the feed version
        assert schema_errors(asked) == []


@TRANSPORTS
async def test_a_stale_answer_is_told_in_incomplete_never_errors_nor_unchanged(
    transport: str,
) -> None:
    async with seller(transport) as (post, inventory, now):
        listed, _ = await post("list_products", account=ACCOUNT, criteria=CRITERIA)
        token = listed["feed_version"]
        inventory.down = True
        now[0] += TARGET + 15  # past the target: the inventory is asked, and fails
        stale, status = await post("list_products", account=ACCOUNT, criteria=CRITERIA,
                                   if_feed_version=token, context={"correlation_id": "s"})  # fmt: skip
        assert status == 200, stale
        assert "errors" not in stale and stale["outcome"] == "listed"
        assert stale["products"] == listed["products"] and stale["feed_version"] == token
        [told] = stale["incomplete"]
        assert told["scope"] == "products"
        assert "inventory-service" in told["description"] and "75 s" in told["description"]
        assert stale["context"] == {"correlation_id": "s"}
        assert schema_errors(stale) == []
        # get_products' answer, on the same stale entry, carries its STALE_RESPONSE.
        products, _ = await post("get_products", buying_mode="wholesale", account=ACCOUNT,
                                 filters=CRITERIA["offer_filters"])  # fmt: skip
        assert [e["code"] for e in products["errors"]] == ["STALE_RESPONSE"]


async def test_a_lone_pricing_version_and_a_deep_selection_are_refused() -> None:
    deep = json.loads('{"x":' * 600 + "{}" + "}" * 600)
    async with seller("rest") as (post, _, _):
        refused, status = await post("list_products", if_pricing_version="p")
        assert status == 400 and refused["adcp_error"]["code"] == "INVALID_REQUEST"
        assert refused["adcp_error"]["field"] == "if_pricing_version"
        for tool, params in (("list_products", {"criteria": {"targeting_overlay": deep}}),
                             ("get_signals", {"discovery_mode": "wholesale", "filters": deep})):  # fmt: skip
            refused, status = await post(tool, **params)
            assert status == 400 and refused["adcp_error"]["code"] == "INVALID_REQUEST"


@TRANSPORTS
async def test_signals_feed_conditional_scoped_and_stale_with_its_advisory(transport: str) -> None:
    validator = spec_schema("signals/get-signals-response.json")
    async with seller(transport) as (post, inventory, now):
        full, _ = await post("get_signals", discovery_mode="wholesale", account=ACCOUNT)
        assert full["signals"] and full["cache_scope"] == "public"
        token = full["wholesale_feed_version"]
        probe, _ = await post("get_signals", discovery_mode="wholesale", account=ACCOUNT,
                              if_wholesale_feed_version=token)  # fmt: skip
        assert probe["unchanged"] is True and "signals" not in probe
        overlay, _ = await post("get_signals", discovery_mode="wholesale", account=OVERLAY,
                                if_wholesale_feed_version=token)  # fmt: skip
        assert "unchanged" not in overlay and overlay["cache_scope"] == "account"
        assert overlay["wholesale_feed_version"] != token
        inventory.down = True
        now[0] += TARGET + 5
        stale, status = await post("get_signals", discovery_mode="wholesale", account=ACCOUNT,
                                   if_wholesale_feed_version=token)  # fmt: skip
        assert status == 200 and "unchanged" not in stale and stale["signals"] == full["signals"]
        [advisory] = stale["errors"]
        assert advisory["code"] == "STALE_RESPONSE" and advisory["field"] == "signals"
        for answer in (full, probe, overlay, stale):  # status: the task envelope's
            answer = {**answer, "status": "completed"}
            assert [e.message for e in validator.iter_errors(answer)] == []


LISTED = {"outcome": "listed", "products": [], "feed_version": "v", "cache_scope": "public"}
LISTING = SurfacePolicy(name="list_products", field="products", paths=("/list_products",))


def record_a_stale_serve() -> None:
    """What a seller that does not tell staleness in incomplete[] leaves: an advisory on the
    request's collector."""
    collector, upstream = current_collector(), Upstream(name="inventory")
    assert collector is not None
    collector.record(upstream.identity, stale_response(upstream, LISTING, 90, None))


async def test_the_sdk_skill_middleware_never_adds_errors_to_a_list_products_answer() -> None:
    from adcp_stale_cache.integrations.adcp_sdk import skill_middleware

    async def call_next() -> dict[str, Any]:
        record_a_stale_serve()
        return dict(LISTED)

    middleware = skill_middleware(Surfaces.of(LISTING))
    assert await middleware("list_products", {}, None, call_next) == LISTED


async def test_the_middleware_never_adds_errors_to_a_list_products_answer() -> None:
    listed, policy = LISTED, LISTING

    async def app(scope: Any, receive: Any, send: Any) -> None:
        record_a_stale_serve()
        body = json.dumps(listed).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    wrapped = StaleAdvisoryMiddleware(app, surfaces=Surfaces.of(policy))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=wrapped), base_url="http://s"
    ) as c:
        answer = (await c.post("/list_products", json={})).json()
    assert answer == listed


async def test_signals_are_unchanged_only_in_wholesale_mode() -> None:
    from adcp_stale_cache import collect_advisories
    from adcp_stale_cache.adcp.feeds import answer_signals

    async def rows() -> list[Any]:
        return [{"signal_agent_segment_id": "s"}]

    async with collect_advisories():
        token = (await answer_signals({"discovery_mode": "wholesale"}, rows))[
            "wholesale_feed_version"
        ]
        probe = {"discovery_mode": "wholesale", "if_wholesale_feed_version": token}
        assert (await answer_signals(probe, rows))["unchanged"] is True
        for mode in (None, "brief"):
            answer = await answer_signals({**probe, "discovery_mode": mode}, rows)
            assert "unchanged" not in answer and answer["signals"] == await rows()
