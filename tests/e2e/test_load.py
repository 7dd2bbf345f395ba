"""A bounded loopback load test: 20,000 requests at concurrency 200 against a real uvicorn
seller (tests/load_app.py, its own process) whose upstreams fail 30% of the time. It stops by
itself: a fixed request count, and a 10-minute cap.

100 upstreams, one key each; 30 of them go down after warm-up. Every answer must be 200
(every key has a usable entry), carry exactly one advisory for a down upstream and none for
a healthy one, and the store must stay within its byte bound.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adcp_stale_cache.demo.processes import free_port, wait_for_port

from ..servers import START_SECONDS, reap

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 20_000
CONCURRENCY = 200


@pytest.fixture
def seller_port() -> Iterator[int]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "tests.load_app:app",
        "--port",
        str(port),
        "--log-level",
        "warning",
        # Longer than any pause of a starved client: uvicorn's 5 s default closed a pooled
        # connection as the client reused it once on a busy CI machine ("Server
        # disconnected without sending a response"), a race of the harness, not the seller.
        "--timeout-keep-alive",
        "60",
    ]
    server = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, START_SECONDS, process=server)
        yield port
    finally:
        reap(server)


async def test_load_with_30_percent_failing_upstreams(seller_port: int) -> None:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{seller_port}", timeout=30, limits=limits
    ) as client:
        setup = (await client.get("/control")).json()  # not imported: it sets log levels
        upstreams, down = setup["upstreams"], set(setup["down"])
        for n in range(upstreams):  # warm every key
            assert (await client.post("/api/get_products", params={"u": n})).status_code == 200
        await client.post("/control")  # the outage starts
        counts = {"ok": 0, "5xx": 0, "wrong": 0}
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(REQUESTS):
            queue.put_nowait(i % upstreams)

        async def worker() -> None:
            while not queue.empty():
                n = queue.get_nowait()
                response = await client.post("/api/get_products", params={"u": n})
                if response.status_code >= 500:
                    counts["5xx"] += 1
                    continue
                body = response.json()
                names = [e["details"]["upstream"]["name"] for e in body.get("errors", [])]
                expected = [f"upstream-{n}"] if n in down else []
                right = names == expected and body["products"][0]["product_id"] == f"u{n}-0"
                counts["ok" if right else "wrong"] += 1

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CONCURRENCY))), timeout=600)
        memory = (await client.get("/control")).json()
    assert counts == {"ok": REQUESTS, "5xx": 0, "wrong": 0}
    assert 0 < memory["bytes"] <= memory["max_bytes"]
