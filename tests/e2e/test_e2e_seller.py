"""The example seller end to end: real processes on loopback, real MCP creative agents.

These drive the console script's commands as black boxes, as a user would.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ..deployment import Deployment

pytestmark = pytest.mark.e2e

# Real MCP sessions per call: on a busy 2-core machine a healthy agent's answer took over 1 s.
TIMEOUT = 3.0


def seller_flags(freshness_target: int = 1, max_stale: int = 3600) -> tuple[str, ...]:
    return (
        "--freshness-target",
        str(freshness_target),
        "--max-stale",
        str(max_stale),
        "--upstream-timeout",
        str(TIMEOUT),
    )


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    with Deployment(*seller_flags()) as d:
        yield d


def stale(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body.get("errors", []) if e["code"] == "STALE_RESPONSE"]


def test_killed_and_frozen_agents_served_stale_within_the_timeout(
    deployment: Deployment, assert_valid_advisory: Any
) -> None:
    deployment.warm("list_creative_formats")
    warm, _ = deployment.post("list_creative_formats", json={})
    assert warm.status_code == 200 and not stale(warm.json())
    all_formats = warm.json()["formats"]
    assert len(all_formats) == 6
    time.sleep(1.2)  # past the 1 s freshness target
    deployment.agents["a"].kill()
    deployment.agents["b"].freeze()

    response, elapsed = deployment.post(
        "list_creative_formats", json={"context": {"correlation_id": "x"}}
    )

    assert response.status_code == 200
    assert elapsed < TIMEOUT + 1.5  # served at the deadline, not after the frozen agent
    body = response.json()
    assert body["formats"] == all_formats  # a's and b's from cache, c's fresh
    assert body["context"] == {"correlation_id": "x"}
    assert "adcp_error" not in body
    advisories = stale(body)
    assert len(advisories) == 2 == len(body["errors"])
    by_upstream = {e["details"]["upstream"]["name"]: e for e in advisories}
    assert by_upstream["a"]["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
    assert by_upstream["b"]["details"]["original_error"]["code"] == "TIMEOUT"
    for name, error in by_upstream.items():
        assert_valid_advisory(error)
        assert error["field"] == "formats"
        assert error["details"]["upstream"]["url"] == f"{deployment.agents[name].url}/mcp"
        assert error["details"]["cache_age_seconds"] >= 1
        assert error["details"]["freshness_target_seconds"] == 1


def test_no_advisory_when_healthy_fresh_or_refreshed(deployment: Deployment) -> None:
    deployment.warm("list_creative_formats", "get_products")
    time.sleep(1.2)  # past target: the first round refreshes
    for _ in range(2):  # a refresh, then a fresh hit
        for tool in ("list_creative_formats", "get_products"):
            response, _ = deployment.post(tool, json={})
            assert response.status_code == 200
            assert "errors" not in response.json()
    time.sleep(1.2)  # past target, upstreams healthy: a successful refresh
    for tool in ("list_creative_formats", "get_products"):
        response, _ = deployment.post(tool, json={})
        assert "errors" not in response.json()


def test_fresh_hit_makes_no_upstream_call(deployment: Deployment) -> None:
    deployment.post("get_products", json={})
    deployment.inventory.kill()  # a fresh hit must not notice
    response, _ = deployment.post("get_products", json={})
    assert response.status_code == 200 and "errors" not in response.json()


def test_inventory_down_serves_products_stale(
    deployment: Deployment, assert_valid_advisory: Any
) -> None:
    products = deployment.post("get_products", json={})[0].json()["products"]
    time.sleep(1.2)
    deployment.inventory.kill()
    response, _ = deployment.post("get_products", json={})
    body = response.json()
    assert response.status_code == 200
    assert body["products"] == products
    [advisory] = body["errors"]
    assert_valid_advisory(advisory)
    assert advisory["field"] == "products"
    assert advisory["details"]["upstream"] == {"name": "inventory-service"}  # internal: no url
    assert "127.0.0.1" not in response.text.split('"errors"')[1]


def test_no_entry_means_the_failure_stays_a_failure(deployment: Deployment) -> None:
    deployment.inventory.kill()
    response, _ = deployment.post("get_products", json={})
    body = response.json()
    assert response.status_code == 503
    assert body["adcp_error"]["code"] == "SERVICE_UNAVAILABLE"
    assert not stale(body)
    assert "products" not in body


def test_no_stale_serve_past_max_stale() -> None:
    with Deployment(*seller_flags(max_stale=1)) as deployment:
        deployment.post("get_products", json={})
        time.sleep(2.2)  # past target + max-stale
        deployment.inventory.kill()
        response, _ = deployment.post("get_products", json={})
        assert response.status_code == 503
        assert not stale(response.json())


def test_demo_command_plays_the_story() -> None:
    # Bounded, not timed: under load the story took 38 s (about 15 s idle).
    run = subprocess.run(
        [sys.executable, "-m", "adcp_stale_cache", "demo"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "STALE_RESPONSE upstream=a" in out and "original_error=CONNECTION_REFUSED" in out
    assert "STALE_RESPONSE upstream=b" in out and "original_error=TIMEOUT" in out
    assert "every step as expected" in out


def test_cli_rejects_bad_flags() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "adcp_stale_cache", "example", "seller", "--port", "1",
         "--inventory-service", "http://x", "--creative-agent", "no-url"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert run.returncode == 2
    assert "expected NAME=URL" in run.stderr


def test_metrics_show_the_stale_serve(deployment: Deployment) -> None:
    deployment.post("get_products", json={})
    time.sleep(1.2)
    deployment.inventory.kill()
    assert deployment.post("get_products", json={})[0].status_code == 200
    metrics = httpx.get(f"{deployment.url}/metrics", timeout=10).text
    labels = 'surface="get_products",upstream="inventory-service"'
    assert (
        f'adcp_stale_cache_stale_serves_total{{code="CONNECTION_REFUSED",{labels}}} 1.0' in metrics
    )
    assert f"adcp_stale_cache_advisories_total{{{labels}}} 1.0" in metrics
    assert (
        'adcp_stale_cache_upstream_failures_total{code="CONNECTION_REFUSED",upstream="inventory-service"} 1.0'
        in metrics
    )
    assert "adcp_stale_cache_store_entries 1.0" in metrics
