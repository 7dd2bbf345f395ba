"""FeedWebhooks: a sub-agent's signed feed events, verified with adcp.signing, applied."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

pytest.importorskip("adcp.webhooks", reason="the adcp-server extra is needed (adcp 9.2+)")

from adcp.signing import StaticJwksResolver, generate_signing_keypair, load_private_key_pem
from adcp.webhooks import WebhookVerifyOptions, sign_webhook

from adcp_stale_cache import MemoryStore, Surfaces, UpstreamCache
from adcp_stale_cache.integrations.adcp_agent import AdcpAgent
from adcp_stale_cache.integrations.feed_webhooks import FeedWebhooks
from adcp_stale_cache.ops.control import CacheControl

from ..conftest import FakeClock
from ..integrations.test_adcp_agent import SUB, UPSTREAM, WHOLESALE, FakeAgent

URL = "http://seller.test/webhooks/sub"
PEM, JWK = generate_signing_keypair(alg="ed25519", kid="sub-wh-1", purpose="webhook-signing")
KEY = load_private_key_pem(PEM)


def event(kind: str = "product.updated", applies: Any = None, **extra: Any) -> dict[str, Any]:
    now = datetime.now(timezone.utc).isoformat()
    eid = str(uuid.uuid4())
    payload: dict[str, Any] = {"product_id": "p-v1", "applies_to": applies or {"scope": "public"}}
    if kind == "wholesale_feed.bulk_change":
        payload = {"applies_to": payload["applies_to"], "summary": "repriced", "affected_count": 9,
                   "affected_entity_type": "product"}  # fmt: skip
    return {
        "idempotency_key": "whk_" + uuid.uuid4().hex, "notification_id": eid,
        "notification_type": kind, "fired_at": now, "subscriber_id": "s2", "account_id": "acc-r",
        "wholesale_feed_version": "wfv-2", "cache_scope": "public",
        "event": {"event_id": eid, "event_type": kind, "entity_type": "product",
                  "entity_id": "p-v1", "created_at": now, "payload": payload},
        **extra,
    }  # fmt: skip


def signed(body: bytes, url: str = URL) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    signature = sign_webhook(method="POST", url=url, headers=headers, body=body,
                             private_key=KEY, key_id="sub-wh-1", alg="ed25519")  # fmt: skip
    return {**headers, **signature.as_dict()}


class Seller:
    def __init__(self, clock: FakeClock) -> None:
        self.cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(SUB), clock=clock)
        self.control = CacheControl(self.cache)
        self.agent = FakeAgent()
        self.sub = AdcpAgent(self.cache, UPSTREAM, surface="sub_products", call=self.agent)
        options = WebhookVerifyOptions(jwks_resolver=StaticJwksResolver({"keys": [JWK]}))
        app = FeedWebhooks(self.control, UPSTREAM, verify=options, url=URL)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return await self.http.post(URL, content=body, headers=headers)

    async def calls_after(self, request: dict[str, Any] = WHOLESALE) -> int:
        """How many calls the agent had once ``request`` was answered."""
        await self.sub.get_products(request)
        return len(self.agent.asked)


@pytest.fixture
def seller(clock: FakeClock) -> Seller:
    return Seller(clock)


async def test_a_signed_public_event_makes_the_next_request_revalidate(seller: Seller) -> None:
    assert await seller.calls_after() == 1
    seller.agent.version = 2  # the feed changed at the agent, and it says so
    body = json.dumps(event()).encode()
    response = await seller.post(body, signed(body))
    assert response.status_code == 202, response.text
    assert response.json() == {"applied": "product.updated", "scope": "public", "entries": 1}
    answer = await seller.sub.get_products(WHOLESALE)
    assert answer["products"] == [{"product_id": "p-v2"}]  # within its target, read again
    assert seller.agent.asked[1] == {**WHOLESALE, "if_wholesale_feed_version": "wfv-p-v1"}


@pytest.mark.parametrize("how", ["unsigned", "tampered", "replayed", "another url"])
async def test_an_unverified_event_is_401_and_changes_nothing(seller: Seller, how: str) -> None:
    await seller.calls_after()
    body = json.dumps(event()).encode()
    headers = signed(body, "http://elsewhere.test/hook" if how == "another url" else URL)
    if how == "unsigned":
        headers = {"content-type": "application/json"}
    if how == "tampered":
        body = body.replace(b"product.updated", b"product.removed")
    if how == "replayed":
        assert (await seller.post(body, headers)).status_code == 202
        await seller.calls_after()  # the genuine event's revalidation
    calls = len(seller.agent.asked)
    response = await seller.post(body, headers)
    assert response.status_code == 401
    assert response.json()["code"].startswith("webhook_signature_")
    assert await seller.calls_after() == calls  # still a fresh hit: nothing purged


async def test_account_events_select_those_accounts_entries(seller: Seller) -> None:
    accounts = {
        name: {**WHOLESALE, "account": {"account_id": name}} for name in ("a", "b", "acc-r")
    }
    for request in accounts.values():
        await seller.sub.get_products(request)
    assert len(seller.agent.asked) == 3
    body = json.dumps(event(applies={"scope": "account", "account_ids": ["a"]})).encode()
    assert (await seller.post(body, signed(body))).json()["entries"] == 1
    assert await seller.calls_after(accounts["b"]) == 3  # b untouched
    assert await seller.calls_after(accounts["a"]) == 4  # a revalidated
    # No account_ids: the receiving account's (the event's account_id).
    body = json.dumps(event(applies={"scope": "account"})).encode()
    assert (await seller.post(body, signed(body))).json()["entries"] == 1
    assert await seller.calls_after(accounts["acc-r"]) == 5


async def test_a_bulk_change_re_reads_the_feed_at_once(seller: Seller) -> None:
    await seller.calls_after()
    seller.agent.version = 2
    body = json.dumps(event("wholesale_feed.bulk_change")).encode()
    response = await seller.post(body, signed(body))
    assert response.status_code == 202 and response.json()["entries"] == 1
    for _ in range(50):  # the refresh runs behind the answer
        if len(seller.agent.asked) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(seller.agent.asked) == 2
    answer = await seller.sub.get_products(WHOLESALE)
    assert answer["products"] == [{"product_id": "p-v2"}] and len(seller.agent.asked) == 2


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'{"notification_type": "product.updated"}',
     json.dumps(event(applies={"scope": "everyone"})).encode(),
     json.dumps(event(applies={"scope": "account", "account_ids": []})).encode()],
    ids=["list", "no event", "odd scope", "no account"],
)  # fmt: skip
async def test_a_verified_body_that_is_no_event_is_400(seller: Seller, body: bytes) -> None:
    response = await seller.post(body, signed(body))
    assert response.status_code == 400


async def test_only_posts_of_bounded_size(seller: Seller) -> None:
    assert (await seller.http.get(URL)).status_code == 405
    big = b"x" * (256 * 1024 + 1)
    assert (await seller.post(big, {"content-type": "application/json"})).status_code == 413


async def test_the_url_verified_is_ours_whatever_the_host_header_says(seller: Seller) -> None:
    """An event signed for another seller's URL, sent here with that seller's Host: 401."""
    other = "http://seller-x.example/webhooks/sub"
    body = json.dumps(event()).encode()
    headers = {**signed(body, other), "host": "seller-x.example"}
    response = await seller.http.post("/", content=body, headers=headers)
    assert response.status_code == 401


async def test_on_a_starlette_route_it_answers(seller: Seller) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    options = WebhookVerifyOptions(jwks_resolver=StaticJwksResolver({"keys": [JWK]}))
    hooks = FeedWebhooks(seller.control, UPSTREAM, verify=options, url=URL)
    app = Starlette(routes=[Route("/webhooks/sub", hooks)])
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://seller.test")
    body = json.dumps(event()).encode()
    assert (await http.post(URL, content=body, headers=signed(body))).status_code == 202


async def test_a_verified_body_nested_past_any_parser_is_400_never_500(seller: Seller) -> None:
    """adcp 9.2's verifier refuses such a body itself (401, ``webhook_body_malformed``); a
    verifier that does not parse the body (HMAC, an older profile) leaves it to ours."""

    class BodyBlind(FeedWebhooks):
        def _unverified(self, headers: Mapping[str, str], body: bytes) -> str | None:
            return None

    deep = b"[" * 20_000 + b"]" * 20_000  # past every parser: 3.13's stdlib reads 10,000
    assert (await seller.post(deep, signed(deep))).status_code == 401
    app = BodyBlind(seller.control, UPSTREAM, verify=None, url=URL)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as http:
        answer = await http.post(URL, content=deep, headers=signed(deep))
    assert answer.status_code == 400 and "not a wholesale feed event" in answer.json()["error"]
