"""Issue 14's acceptance, with real processes on loopback: two example sellers share a
redis-server; an operator steers both through seller A's /admin."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from adcp_stale_cache.demo.processes import App, free_port

from ..redis_server import RedisServer
from ..servers import START_SECONDS

pytestmark = pytest.mark.e2e
TOKEN = "operator-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def products(seller: App) -> tuple[int, dict[str, Any]]:
    answer = httpx.post(f"{seller.url}/api/get_products", json={"brief": "news"}, timeout=10)
    return answer.status_code, answer.json()


def stale(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in body.get("errors", []) if e["code"] == "STALE_RESPONSE"]


def test_two_sellers_on_one_redis_follow_invalidations_through_one_admin() -> None:
    pytest.importorskip("redis.asyncio", reason="the redis extra is needed")
    server = RedisServer().start()
    inventory_port = free_port()
    inventory = App("inventory-service", inventory_port, "--products", "4", quiet=True)
    common = ("--inventory-service", inventory.url, "--freshness-target", "600",
              "--redis", server.url)  # fmt: skip
    a = App("seller", free_port(), *common, "--admin-token", TOKEN, quiet=True)
    b = App("seller", free_port(), *common, quiet=True)  # no token: no /admin
    apps = [inventory, a, b]
    try:
        for app in apps:
            app.start()
        for app in apps:
            app.wait(START_SECONDS)
        for seller in (a, b):
            status, body = products(seller)
            assert status == 200 and len(body["products"]) == 4 and not stale(body)

        inventory.stop()  # restarted with another product count
        inventory = App("inventory-service", inventory_port, "--products", "6", quiet=True)
        apps[0] = inventory.start().wait(START_SECONDS)
        assert all(len(products(s)[1]["products"]) == 4 for s in (a, b))  # fresh for 600 s

        for headers in ({}, {"Authorization": "Bearer not-the-operator-token"}):
            for action in ("invalidate", "refresh"):
                answer = httpx.post(f"{a.url}/admin/api/{action}", headers=headers,
                                    json={"upstream": "inventory-service"})  # fmt: skip
                assert answer.status_code == 401
            assert httpx.get(f"{a.url}/admin/api/status", headers=headers).status_code == 401
        assert all(len(products(s)[1]["products"]) == 4 for s in (a, b))  # nothing changed
        assert httpx.get(f"{b.url}/admin/api/status", headers=BEARER).status_code == 404
        assert httpx.get(f"{b.url}/admin/", headers=BEARER).status_code == 404

        def invalidate(soft: bool) -> int:
            answer = httpx.post(f"{a.url}/admin/api/invalidate", headers=BEARER,
                                json={"upstream": "inventory-service", "soft": soft})  # fmt: skip
            assert answer.status_code == 200
            count: int = answer.json()["invalidated"]
            return count

        assert invalidate(soft=True) >= 1
        time.sleep(0.1)  # the bound: every process hears of a purge within 100 ms
        for seller in (b, a):
            status, body = products(seller)
            assert status == 200 and len(body["products"]) == 6 and not stale(body)

        inventory.kill()
        assert invalidate(soft=True) >= 1
        time.sleep(0.1)
        for seller in (a, b):
            status, body = products(seller)
            assert status == 200 and len(body["products"]) == 6  # the last products
            [advisory] = stale(body)
            assert advisory["details"]["upstream"]["name"] == "inventory-service"
            assert "adcp_error" not in body

        assert invalidate(soft=False) >= 1
        time.sleep(0.1)
        for seller in (a, b):
            status, body = products(seller)
            assert status == 503 and "products" not in body  # the spec's failure, no payload
            assert body["adcp_error"]["code"] == "SERVICE_UNAVAILABLE"
        status = httpx.get(f"{a.url}/admin/api/status", headers=BEARER).json()
        assert status["upstreams"]["inventory-service"]["failures"] >= 1
    finally:
        for app in apps:
            app.stop()
        server.kill()
