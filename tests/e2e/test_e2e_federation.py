"""A chain of sellers on loopback: inventory A -> seller S1 -> seller S2 -> buyer.

S2 sells its own inventory B and S1's public wholesale feed (``--sub-seller sub=<S1>/mcp``),
asked over MCP through the ``adcp`` client (issue 25's acceptance, real processes).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("adcp", reason="the adcp-server extra is needed (the adcp client)")

from ..deployment import Deployment

pytestmark = pytest.mark.e2e

TARGET = 2  # seconds: both sellers' freshness target
FLAGS = ("--freshness-target", str(TARGET), "--upstream-timeout", "2")


@pytest.fixture
def chain() -> Iterator[tuple[Deployment, Deployment]]:
    with Deployment(*FLAGS, agents="", products=2, inventory=("--name", "a")) as first:
        sub = f"--sub-seller=sub={first.url}/mcp"
        with Deployment(*FLAGS, sub, agents="", products=3, inventory=("--name", "b")) as second:
            # S2's first call to S1 (a cold client and MCP session) outlasted its 2 s timeout
            # on a busy machine: the tests start from answers both sellers hold.
            second.warm("get_products")
            yield first, second


def ask(seller: Deployment, **params: Any) -> dict[str, Any]:
    request = {**params, "context": {"correlation_id": "c-1"}}
    response, _ = seller.post("get_products", json=request)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["context"] == {"correlation_id": "c-1"}
    return body


def stale(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body.get("errors") or [] if e["code"] == "STALE_RESPONSE"]


def ids(body: dict[str, Any]) -> set[str]:
    return {product["product_id"] for product in body["products"]}


def wholesale_answers(seller: Deployment) -> dict[str, float]:
    """S1's own count of the wholesale answers it gave, by outcome (its /metrics)."""
    text = httpx.get(f"{seller.url}/metrics", timeout=5).text
    pattern = r'adcp_example_wholesale_answers_total\{outcome="(\w+)"\} ([0-9.e+]+)'
    return {outcome: float(n) for outcome, n in re.findall(pattern, text)}


def test_ages_and_advisories_cross_the_hop(
    chain: tuple[Deployment, Deployment], assert_valid_advisory: Any
) -> None:
    first, second = chain
    healthy = ask(second)
    a_rows = {f"a-public-display-{i}" for i in range(2)}
    b_rows = {f"b-public-display-{i}" for i in range(3)}
    assert ids(healthy) == a_rows | b_rows and not stale(healthy)
    last_fresh_at_a = time.monotonic()  # S1 read inventory A just now

    first.inventory.kill()
    time.sleep(TARGET + 0.5)  # past both targets
    # S1's feed, as S2 reads it: its cached rows, and it says so.
    [s1_advisory] = stale(ask(first, buying_mode="wholesale"))
    body = ask(second)
    assert ids(body) == a_rows | b_rows  # S1's rows kept, B's fresh
    [advisory] = stale(body)  # one, for the sub-seller; B's rows carry none
    assert_valid_advisory(advisory)
    details = advisory["details"]
    assert details["upstream"]["name"] == "sub"
    assert details["cache_age_seconds"] >= s1_advisory["details"]["cache_age_seconds"]
    assert details["cache_age_seconds"] >= TARGET
    assert "original_error" in details

    first.seller.kill()  # now the sub-seller itself is gone
    time.sleep(1)
    body = ask(second)
    assert ids(body) == a_rows | b_rows
    [advisory] = stale(body)
    assert advisory["details"]["upstream"]["name"] == "sub"
    # As old as the data at the bottom: counted from when inventory A last answered.
    bottom = time.monotonic() - last_fresh_at_a
    assert advisory["details"]["cache_age_seconds"] >= int(bottom) - 1
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"


def test_refreshes_of_an_unchanged_feed_are_probes(chain: tuple[Deployment, Deployment]) -> None:
    first, second = chain
    ask(second)
    before = wholesale_answers(first)
    assert before.get("full", 0) >= 1
    for _ in range(2):
        time.sleep(TARGET + 0.3)  # past S2's target: a refresh of S1's feed
        body = ask(second)
        assert not stale(body)
    after = wholesale_answers(first)
    assert after.get("unchanged", 0) - before.get("unchanged", 0) == 2
    assert after.get("full", 0) == before.get("full", 0)  # no full read

    httpx.post(f"{first.inventory.url}/revision", timeout=5)  # inventory A changes
    time.sleep(TARGET + 0.3)
    body = ask(second)
    assert any("revision 1" in product["name"] for product in body["products"])
    assert wholesale_answers(first).get("full", 0) == after.get("full", 0) + 1


def test_signed_webhooks_keep_every_process_current(tmp_path: Any) -> None:
    """S2 in two worker processes on one cache file, S1 always current (target 0): S2's own
    60 s target would hide S1's changes; a signed event makes every S2 process read them."""
    import json

    from adcp.signing import generate_signing_keypair, load_private_key_pem
    from adcp.webhooks import sign_webhook

    from ..integrations.test_feed_webhooks import event

    pem, jwk = generate_signing_keypair(alg="ed25519", kid="s1-wh", purpose="webhook-signing")
    key = load_private_key_pem(pem)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(
            Deployment("--freshness-target", "0", agents="", products=2, inventory=("--name", "a"))
        )
        second = stack.enter_context(Deployment(
            "--freshness-target", "60", "--workers", "2",
            "--cache-file", str(tmp_path / "s2.sqlite"), f"--webhook-jwks=sub={jwks}",
            f"--sub-seller=sub={first.url}/mcp", agents="", products=1, inventory=("--name", "b"),
        ))  # fmt: skip
        hook = f"{second.url}/webhooks/sub"

        def revisions() -> set[str]:
            """What S2's answers say of S1's rows, over new connections (either worker)."""
            seen = set()
            for _ in range(12):
                body = ask(second)
                seen |= {p["name"].rpartition("(")[2] for p in body["products"]
                         if p["product_id"].startswith("a-")}  # fmt: skip
                assert not stale(body)
            return seen

        def send(kind: str, signed: bool = True, tamper: bool = False) -> httpx.Response:
            body = json.dumps(event(kind)).encode()
            headers = {"content-type": "application/json"}
            if signed:
                headers |= sign_webhook(method="POST", url=hook, headers=headers, body=body,
                                        private_key=key, key_id="s1-wh",
                                        alg="ed25519").as_dict()  # fmt: skip
            if tamper:
                body = body.replace(b"repriced", b"free now").replace(b"p-v1", b"p-v9")
            return httpx.post(hook, content=body, headers=headers, timeout=10)

        assert revisions() == {"public)"}  # revision 0 in every worker
        httpx.post(f"{first.inventory.url}/revision", timeout=5)
        assert revisions() == {"public)"}  # S2's 60 s target hides the change
        assert send("product.updated", signed=False).status_code == 401
        assert send("product.updated", tamper=True).status_code == 401
        assert revisions() == {"public)"}  # nothing changed
        assert send("product.updated").status_code == 202
        time.sleep(0.3)  # within the propagation bound
        assert revisions() == {"public, revision 1)"}  # every worker, at once
        httpx.post(f"{first.inventory.url}/revision", timeout=5)
        assert send("wholesale_feed.bulk_change").status_code == 202
        time.sleep(0.3)
        assert revisions() == {"public, revision 2)"}
