"""The example seller under a frozen upstream (SIGSTOP), and with two principals.

- a hung inventory service costs at most the upstream timeout, then the breaker opens and
  stale answers come from it, waiting on nothing (their cost beside fresh hits is printed);
- two principals under concurrent load while the upstream is down: nobody ever gets the
  other's products.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adcp_stale_cache.demo.processes import App

from ..deployment import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture
def seller() -> Iterator[tuple[App, App]]:
    with Deployment("--freshness-target", "1", "--upstream-timeout", "1", agents="a") as deployment:
        yield deployment.seller, deployment.inventory


def timed(client: httpx.Client, **kwargs: Any) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = client.post("/api/get_products", json={}, **kwargs)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    return elapsed, response.json()


def test_frozen_upstream_first_answer_within_timeout_then_breaker_makes_stale_cheap(
    seller: tuple[App, App],
) -> None:
    app, inventory = seller
    with httpx.Client(base_url=app.url, timeout=10) as client:
        timed(client)  # warm
        fresh = [timed(client)[0] for _ in range(40)]  # fresh hits, within the 1 s target
        time.sleep(1.2)
        inventory.freeze()
        first, body = timed(client)
        assert first < 1.5, first
        [advisory] = body["errors"]
        assert advisory["details"]["original_error"]["code"] == "TIMEOUT"
        assert body["products"]
        for _ in range(2):  # three failures open the breaker
            timed(client)
        stale = []
        for _ in range(40):
            elapsed, body = timed(client)
            assert [e["code"] for e in body["errors"]] == ["STALE_RESPONSE"]
            stale.append(elapsed)
    ratio = statistics.median(stale) / statistics.median(fresh)
    print(f"first stale answer {first:.3f}s; median fresh {statistics.median(fresh) * 1000:.2f} ms, "
          f"median stale (breaker open) {statistics.median(stale) * 1000:.2f} ms, ratio {ratio:.2f}")  # fmt: skip
    # Not a speed target (the bench measures those, a loaded CI machine moved this ratio past
    # 3): the open breaker answers at once, where a call to the frozen upstream waits 1 s.
    assert statistics.median(stale) < 0.5, stale


async def test_principals_never_see_each_other(seller: tuple[App, App]) -> None:
    app, inventory = seller
    principals = {
        "alice": {"authorization": "Bearer alice-token"},
        "bob": {"authorization": "Bearer bob-token"},
        "anonymous": {},
    }
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as client:
        own = {}
        for who, headers in principals.items():
            response = await client.post("/api/get_products", json={}, headers=headers)
            own[who] = [p["product_id"] for p in response.json()["products"]]
        assert len({tuple(v) for v in own.values()}) == 3  # the inventory answers per principal
        await asyncio.sleep(1.2)
        inventory.kill()

        async def ask(who: str) -> tuple[str, dict[str, Any]]:
            response = await client.post("/api/get_products", json={}, headers=principals[who])
            assert response.status_code == 200
            return who, response.json()

        answers = await asyncio.gather(*(ask(who) for _ in range(100) for who in principals))
    for who, body in answers:
        assert [p["product_id"] for p in body["products"]] == own[who]
        assert [e["code"] for e in body["errors"]] == ["STALE_RESPONSE"]
