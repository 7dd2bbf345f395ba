"""Sellers that run tools in worker threads with a new event loop per call (issue 12)."""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from adcp_stale_cache import (
    AdvisoryLost,
    MemoryStore,
    SharedJsonCodec,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    carry_context,
    collect_advisories,
    current_collector,
    use_collector,
)
from adcp_stale_cache.pipeline.breaker import BreakerPolicy

FORMATS = SurfacePolicy(
    name="list_creative_formats", field="formats", freshness_target_seconds=1,
    max_stale_seconds=3600, shared_across_callers=True,
)  # fmt: skip
AGENT = Upstream(name="creative-agent", url="https://creative.example/mcp")


def test_one_cache_many_threads_each_with_its_own_loop() -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    calls = []

    async def list_formats() -> dict[str, Any]:
        calls.append(1)
        await asyncio.sleep(0.05)  # the threads overlap on a cold cache
        return {"formats": [{"format_id": {"id": "f1"}}]}

    def tool_call() -> Any:  # what the seller's sync tool does in its worker thread
        return asyncio.run(cache.fetch(AGENT, "formats", list_formats, surface=FORMATS))

    with ThreadPoolExecutor(4) as pool:
        answers = [f.result(timeout=10) for f in [pool.submit(tool_call) for _ in range(4)]]
    assert answers == [{"formats": [{"format_id": {"id": "f1"}}]}] * 4
    assert 1 <= len(calls) <= 4  # one flight per loop: loops cannot share a task


def test_memory_store_and_shared_codec_are_safe_across_threads() -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: races show
    try:
        _hammer()
    finally:
        sys.setswitchinterval(interval)


def _hammer() -> None:
    store = MemoryStore(max_entries=50, max_bytes=20_000)
    codec: SharedJsonCodec[Any] = SharedJsonCodec(max_values=8)
    cache = UpstreamCache(store, surfaces=Surfaces.of(FORMATS))

    def worker(n: int) -> None:
        async def run() -> None:
            for i in range(1500):
                key = f"k{(n * 7 + i) % 80}"

                async def call(key: str = key) -> dict[str, Any]:
                    return {"formats": [key]}

                value = await cache.fetch(AGENT, key, call, surface=FORMATS, codec=codec)
                assert value == {"formats": [key]}

        asyncio.run(run())

    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(worker, n) for n in range(4)]:
            future.result(timeout=60)
    assert store.entries <= 50


async def warm_then_expire(cache: UpstreamCache, call: Any) -> None:
    await cache.fetch(AGENT, "formats", call, surface=FORMATS)
    await asyncio.sleep(1.05)  # past the 1 s target


class Agent:
    def __init__(self) -> None:
        self.down = False

    async def __call__(self) -> dict[str, Any]:
        if self.down:
            raise ConnectionRefusedError
        return {"formats": ["f1"]}


async def test_advisory_lost_across_a_thread_hop_fails_loudly_in_strict_mode() -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS), strict_advisories=True)
    agent = Agent()
    await warm_then_expire(cache, agent)
    agent.down = True

    def in_thread() -> Any:  # a pool of the seller's own: it does not carry the context
        return asyncio.run(cache.fetch(AGENT, "formats", agent, surface=FORMATS))

    with collect_advisories() as advisories, ThreadPoolExecutor(1) as pool:
        with pytest.raises(AdvisoryLost, match="carry_context"):
            await asyncio.wrap_future(pool.submit(in_thread))
        assert advisories.errors() == []


@pytest.mark.parametrize("how", ["carry_context", "use_collector"])
async def test_the_request_collector_follows_into_a_thread_and_a_new_loop(how: str) -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS), strict_advisories=True)
    agent = Agent()
    await warm_then_expire(cache, agent)
    agent.down = True

    def fetch_in_new_loop() -> Any:
        return asyncio.run(cache.fetch(AGENT, "formats", agent, surface=FORMATS))

    with collect_advisories() as advisories, ThreadPoolExecutor(1) as pool:
        if how == "carry_context":
            future = pool.submit(carry_context(fetch_in_new_loop))
        else:
            handle = current_collector()

            def with_handle() -> Any:
                with use_collector(handle):
                    return fetch_in_new_loop()

            future = pool.submit(with_handle)
        assert await asyncio.wrap_future(future) == {"formats": ["f1"]}
        [advisory] = advisories.errors()
    assert advisory["details"]["upstream"]["url"] == "https://creative.example/mcp"


async def test_upstreams_with_one_name_and_two_urls_are_two_upstreams() -> None:
    cache = UpstreamCache(
        MemoryStore(clock=time.monotonic), surfaces=Surfaces.of(FORMATS),
        breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=60),
    )  # fmt: skip
    tenant_a = Upstream(name="DCO Agent", url="https://dco.tenant-a.example/mcp")
    tenant_b = Upstream(name="DCO Agent", url="https://dco.tenant-b.example/mcp")

    async def answer(who: str) -> dict[str, Any]:
        return {"formats": [who]}

    async def down() -> dict[str, Any]:
        raise ConnectionRefusedError

    await cache.fetch(tenant_a, "formats", lambda: answer("a"), surface=FORMATS)
    await cache.fetch(tenant_b, "formats", lambda: answer("b"), surface=FORMATS)
    await asyncio.sleep(1.05)
    with collect_advisories() as advisories:
        assert await cache.fetch(tenant_a, "formats", down, surface=FORMATS) == {"formats": ["a"]}
        assert cache.breaker_open(tenant_a) and not cache.breaker_open(tenant_b)
        assert await cache.fetch(tenant_b, "formats", down, surface=FORMATS) == {"formats": ["b"]}
    urls = [e["details"]["upstream"]["url"] for e in advisories.errors()]
    assert urls == ["https://dco.tenant-a.example/mcp", "https://dco.tenant-b.example/mcp"]
