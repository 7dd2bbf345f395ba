"""The example seller's own feed webhooks: registered with sync_accounts, signed, sent when
the public feed changes, to active subscribers only."""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("adcp.webhooks", reason="the adcp-server extra is needed (adcp 9.2+)")

from adcp.signing import SignatureVerificationError, StaticJwksResolver, generate_signing_keypair
from adcp.webhooks import WebhookVerifyOptions, verify_webhook_signature

from adcp_stale_cache.demo.feed_events import FeedEvents, Signer, Subscriptions

from ..deployment import Deployment
from ..spec_schemas import spec_schema_with_refs

pytestmark = pytest.mark.e2e

Received = tuple[str, dict[str, str], bytes]


def test_the_signing_code_is_imported_at_start_not_on_the_seller_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Importing adcp.webhooks takes seconds: done at the first feed change, it stalled the
    seller's loop, and a get_signals beside it timed out under load (issue 33)."""
    monkeypatch.setitem(sys.modules, "adcp.webhooks", None)  # importing it now fails
    with pytest.raises(ImportError):
        FeedEvents(Subscriptions(), Signer(private_key=None, key_id="seller-wh"))


@pytest.fixture
def subscriber() -> Iterator[tuple[str, queue.Queue[Received]]]:
    """A loopback webhook receiver: its URL and what it was sent (path, headers, body)."""
    received: queue.Queue[Received] = queue.Queue()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.put((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_feed_change_is_sent_signed_to_active_subscribers_only(
    subscriber: tuple[str, queue.Queue[Received]], tmp_path: Path
) -> None:
    url, received = subscriber
    pem, jwk = generate_signing_keypair(alg="ed25519", kid="seller-wh", purpose="webhook-signing")
    (tmp_path / "key.pem").write_bytes(pem)
    key = f"--webhook-signing-key=seller-wh={tmp_path / 'key.pem'}"
    with Deployment("--freshness-target", "0", key, agents="", products=2) as seller:
        capabilities = seller.post("get_adcp_capabilities", json={})[0].json()
        assert "product.priced" in capabilities["wholesale_feed_webhooks"]["event_types"]

        def config(name: str, active: bool) -> dict[str, Any]:
            return {"subscriber_id": name, "url": f"{url}/{name}", "active": active,
                    "event_types": ["product.priced", "signal.priced"]}  # fmt: skip

        account = {"brand": {"domain": "buyer.example"}, "operator": "buyer.example",
                   "billing": "operator", "sandbox": True,
                   "notification_configs": [config("on", True), config("off", False)]}  # fmt: skip
        synced = seller.post("sync_accounts", json={"accounts": [account]})[0].json()
        [result] = synced["accounts"]
        assert [(c["subscriber_id"], c["active"]) for c in result["notification_configs"]] == [
            ("on", True), ("off", False)
        ]  # fmt: skip

        def read_feeds() -> None:
            products = seller.post("get_products", json={"buying_mode": "wholesale"})[0]
            signals = seller.post("get_signals", json={"discovery_mode": "wholesale"})[0]
            assert products.json()["cache_scope"] == signals.json()["cache_scope"] == "public"

        read_feeds()  # what the feed is: nothing to tell yet
        read_feeds()  # unchanged: nothing to tell
        ctv = {"buying_mode": "wholesale", "filters": {"channels": ["ctv"]}}
        assert seller.post("get_products", json=ctv)[0].json()["products"] == []  # not the feed
        with pytest.raises(queue.Empty):
            received.get(timeout=0.5)
        httpx.post(f"{seller.inventory.url}/revision", timeout=5)  # every price changes
        read_feeds()
        events = [received.get(timeout=10) for _ in range(4)]  # 2 products, 2 signals
        with pytest.raises(queue.Empty):  # none for the inactive subscriber, none twice
            received.get(timeout=1)

    options = WebhookVerifyOptions(jwks_resolver=StaticJwksResolver({"keys": [jwk]}))
    validator = spec_schema_with_refs("core/wholesale-feed-webhook.json")
    kinds = []
    for path, headers, body in events:
        assert path == "/on"
        verify_webhook_signature(method="POST", url=f"{url}{path}", headers=headers, body=body,
                                 options=options)  # fmt: skip
        sent = json.loads(body)
        assert [e.message for e in validator.iter_errors(sent)] == []
        assert sent["notification_id"] == sent["event"]["event_id"]
        assert sent["account_id"] == result["account_id"] and sent["subscriber_id"] == "on"
        assert sent["event"]["payload"]["pricing_options"]
        kinds.append(sent["notification_type"])
    assert sorted(kinds) == ["product.priced"] * 2 + ["signal.priced"] * 2
    # A tampered body does not verify against the seller's key.
    path, headers, body = events[0]
    with pytest.raises(SignatureVerificationError, match="Digest"):
        verify_webhook_signature(method="POST", url=f"{url}{path}", headers=headers,
                                 body=body.replace(b"priced", b"prized"), options=options)  # fmt: skip
