"""``adcp-stale-cache demo``: a scripted outage, as the buyer sees it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

import httpx

from .processes import App, free_port

FRESHNESS_TARGET = 1
UPSTREAM_TIMEOUT = 1.0


def run_demo() -> int:
    """Play the story; exit status 0 when every step showed what it should."""
    started = time.monotonic()
    agents = {
        name: App("creative-agent", free_port(), "--name", name, quiet=True) for name in "abc"
    }
    inventory = App("inventory-service", free_port(), quiet=True)
    seller = App(
        "seller",
        free_port(),
        *[f"--creative-agent={n}={a.url}/mcp" for n, a in agents.items()],
        "--inventory-service",
        inventory.url,
        "--freshness-target",
        str(FRESHNESS_TARGET),
        "--upstream-timeout",
        str(UPSTREAM_TIMEOUT),
        quiet=True,
    )
    apps = [*agents.values(), inventory, seller]
    ok = True
    try:
        _say("Starting 3 creative agents (MCP), an inventory service and the seller on loopback")
        for app in apps:
            app.start()
        for app in apps:
            app.wait()
        with httpx.Client(base_url=seller.url, timeout=10) as buyer:
            warm(buyer, ("list_creative_formats", "get_products"))  # the story starts warm
            _chapter("1. Every upstream healthy")
            ok &= _ask(buyer, "list_creative_formats", expect_stale=[])
            ok &= _ask(buyer, "get_products", expect_stale=[])

            _chapter(
                f"2. {FRESHNESS_TARGET + 0.5:g}s later (past the {FRESHNESS_TARGET}s target): "
                "agent a killed, agent b frozen, inventory service killed"
            )
            time.sleep(FRESHNESS_TARGET + 0.5)
            agents["a"].kill()
            agents["b"].freeze()
            inventory.kill()
            ok &= _ask(buyer, "list_creative_formats", expect_stale=["a", "b"])
            ok &= _ask(buyer, "get_products", expect_stale=["inventory-service"])

            _chapter("3. Upstreams back: agent a and the inventory service restarted, b thawed")
            agents["a"].start()
            inventory.start()
            agents["b"].thaw()
            agents["a"].wait()
            inventory.wait()
            ok &= _ask(buyer, "list_creative_formats", expect_stale=[])
            ok &= _ask(buyer, "get_products", expect_stale=[])
    finally:
        for app in apps:
            with contextlib.suppress(Exception):
                app.stop()
    verdict = "every step as expected" if ok else "SOME STEP DID NOT GO AS EXPECTED"
    print(f"\nDemo finished in {time.monotonic() - started:.1f}s: {verdict}.")
    return 0 if ok else 1


def warm(buyer: httpx.Client, tools: Iterable[str], attempts: int = 10) -> httpx.Response | None:
    """Ask each tool until it answers healthy (HTTP 200, no ``errors``); the last answer of a
    tool that never did, else None. Each process's first upstream call (a cold client and
    session) can outlast the seller's 1 s timeout on a busy machine."""
    for tool in tools:
        for _ in range(attempts):
            response = buyer.post(f"/api/{tool}", json={})
            if response.status_code == 200 and "errors" not in response.json():
                break
        else:
            return response
    return None


def _ask(buyer: httpx.Client, tool: str, *, expect_stale: list[str]) -> bool:
    started = time.monotonic()
    response = buyer.post(f"/api/{tool}", json={"context": {"correlation_id": f"demo-{tool}"}})
    elapsed = time.monotonic() - started
    body: dict[str, Any] = response.json()
    items = body.get("formats", body.get("products", []))
    print(
        f"  buyer -> {tool}: HTTP {response.status_code} in {elapsed:.2f}s, {_count(tool, items)}"
    )
    stale = []
    for error in body.get("errors", []):
        details = error.get("details", {})
        if error.get("code") == "STALE_RESPONSE":
            stale.append(details["upstream"]["name"])
            print(
                f"    errors[]: STALE_RESPONSE upstream={details['upstream']['name']} "
                f"field={error.get('field')} cache_age={details['cache_age_seconds']}s "
                f"original_error={details['original_error']['code']}"
            )
        else:
            print(f"    errors[]: {error.get('code')}: {error.get('message')}")
    if not body.get("errors"):
        print("    errors[]: none")
    good = response.status_code == 200 and sorted(stale) == sorted(expect_stale) and bool(items)
    if not good:
        print(f"    !! expected HTTP 200 with data and advisories for {expect_stale or 'none'}")
    return good


def _count(tool: str, items: list[Any]) -> str:
    if tool != "list_creative_formats":
        return f"{len(items)} products"
    per_agent: dict[str, int] = {}
    for item in items:
        agent = item["format_id"]["id"].split("_", 1)[0]
        per_agent[agent] = per_agent.get(agent, 0) + 1
    return (
        f"{len(items)} formats ("
        + ", ".join(f"{a}: {n}" for a, n in sorted(per_agent.items()))
        + ")"
    )


def _chapter(title: str) -> None:
    print(f"\n== {title}")


def _say(text: str) -> None:
    print(text)
