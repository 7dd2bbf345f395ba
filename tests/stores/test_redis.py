"""The Redis store, two tiers, cross-process refresh leases, and Redis faults (real redis-server)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache, collect_advisories
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.labels import built_from
from adcp_stale_cache.ops.control import Selection
from adcp_stale_cache.pipeline.breaker import BreakerPolicy
from adcp_stale_cache.stores import MemoryStore, TieredStore
from adcp_stale_cache.stores.redis import RedisStore, decode, encode

from ..conftest import CountingUpstream
from ..redis_server import RedisServer
from ..servers import START_SECONDS

redis_asyncio = pytest.importorskip("redis.asyncio", reason="the redis extra is needed")

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=1, max_stale_seconds=600,
                       upstream_timeout_seconds=2)  # fmt: skip
INVENTORY = Upstream(name="inventory-service")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    s = RedisStore(url=redis_server.url, retry_after_seconds=0.2)
    try:
        yield s
    finally:
        await s.aclose()


def test_entry_format_is_versioned_and_never_misread() -> None:
    entry = Entry(b'{"products":[]}', 1_700_000_000.25)
    assert decode(encode(entry)) == entry
    assert decode(b"\x04" + encode(entry)[1:]) is None  # a future format is not misread
    assert decode(b"garbage") is None and decode(b"") is None


async def test_roundtrip_keys_and_expiry(store: RedisStore, redis_server: RedisServer) -> None:
    entry = Entry(b"data", time.time())
    await store.set("k", entry, 0.3)
    assert await store.get("k") == entry
    raw = redis_asyncio.Redis.from_url(redis_server.url)
    assert await raw.exists("adcp-stale-cache:v3:{k}") == 1
    assert 0 < await raw.pttl("adcp-stale-cache:v3:{k}") <= 300
    await asyncio.sleep(0.4)
    assert await store.get("k") is None
    await raw.aclose()


async def test_redis_down_degrades_and_recovers(
    store: RedisStore, redis_server: RedisServer
) -> None:
    await store.set("k", Entry(b"v", time.time()), 60)
    redis_server.kill()
    started = time.monotonic()
    assert await store.get("k") is None  # no entry rather than an error
    await store.set("k", Entry(b"w", time.time()), 60)  # no raise
    assert time.monotonic() - started < 1.0
    assert store.failures >= 1
    redis_server.start()  # flushed: a new, empty server on the same port
    await asyncio.sleep(0.3)
    await store.set("k", Entry(b"x", time.time()), 60)
    assert (await store.get("k") or Entry(b"", 0)).data == b"x"


def cache_on(url: str, **kwargs: Any) -> UpstreamCache:
    return UpstreamCache(
        TieredStore(RedisStore(url=url, retry_after_seconds=0.2)),
        surfaces=Surfaces.of(POLICY),
        **kwargs,
    )


async def test_cold_process_serves_stale_from_redis(redis_server: RedisServer) -> None:
    warm, cold = cache_on(redis_server.url), cache_on(redis_server.url)

    async def healthy() -> dict[str, Any]:
        return {"products": ["p1"]}

    async def down() -> dict[str, Any]:
        raise ConnectionRefusedError

    await warm.fetch(INVENTORY, "k", healthy, surface="get_products")
    await asyncio.sleep(1.1)
    with collect_advisories() as advisories:
        assert await cold.fetch(INVENTORY, "k", down, surface="get_products") == {
            "products": ["p1"]
        }
    [advisory] = advisories.errors()
    assert advisory["details"]["cache_age_seconds"] >= 1


async def test_redis_killed_mid_test_requests_keep_succeeding(redis_server: RedisServer) -> None:
    cache = cache_on(redis_server.url)
    up = {"down": False}

    async def call() -> dict[str, Any]:
        if up["down"]:
            raise ConnectionRefusedError
        return {"products": ["p1"]}

    await cache.fetch(INVENTORY, "k", call, surface="get_products")
    redis_server.kill()
    assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {
        "products": ["p1"]
    }  # fresh, memory
    await asyncio.sleep(1.1)
    up["down"] = True
    with collect_advisories() as advisories:
        assert await cache.fetch(INVENTORY, "k", call, surface="get_products") == {
            "products": ["p1"]
        }
    assert len(advisories) == 1  # stale from memory while Redis is down
    redis_server.start()
    await asyncio.sleep(0.3)
    up["down"] = False
    await cache.fetch(INVENTORY, "k2", call, surface="get_products")  # writes reach Redis again
    raw = redis_asyncio.Redis.from_url(redis_server.url)
    assert len(await raw.keys("adcp-stale-cache:v3:{adcp-stale-cache:*")) == 1  # the entry
    await raw.aclose()


REFRESHER = """
import asyncio, sys, time
import redis.asyncio as redis
from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.stores import TieredStore
from adcp_stale_cache.stores.redis import RedisStore

url, coordinate = sys.argv[1], sys.argv[2] == "1"
policy = SurfacePolicy(name="get_products", freshness_target_seconds=1, upstream_timeout_seconds=3)

async def main():
    cache = UpstreamCache(TieredStore(RedisStore(url=url)), surfaces=Surfaces.of(policy), coordinate_refreshes=coordinate)
    counter = redis.Redis.from_url(url)

    async def upstream():
        await counter.incr("upstream-calls")
        await asyncio.sleep(0.5)
        return {"products": ["fresh"]}

    # Start together once all four are ready: a process importing slowly under load would
    # otherwise come after the refreshed entry's 1 s target and rightly refresh it again.
    await counter.incr("ready")
    deadline = time.monotonic() + 120
    while int(await counter.get("ready") or 0) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    value = await cache.fetch(Upstream(name="inventory-service"), "k", upstream, surface="get_products")
    print(value["products"][0])

asyncio.run(main())
"""


async def run_refreshers(url: str, coordinate: bool) -> tuple[int, list[str]]:
    raw = redis_asyncio.Redis.from_url(url)
    seed = cache_on(url)

    async def old() -> dict[str, Any]:
        return {"products": ["old"]}

    await seed.fetch(INVENTORY, "k", old, surface="get_products")
    await asyncio.sleep(1.1)  # the key is past its target: every process wants to refresh it
    await raw.delete("upstream-calls", "ready")
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            REFRESHER,
            url,
            "1" if coordinate else "0",
            stdout=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    outputs = [(await p.communicate())[0].decode().strip() for p in procs]
    calls = int(await raw.get("upstream-calls") or 0)
    await raw.aclose()
    return calls, outputs


async def test_four_processes_one_upstream_call_with_the_lease(redis_server: RedisServer) -> None:
    calls, outputs = await run_refreshers(redis_server.url, coordinate=True)
    assert outputs == ["fresh"] * 4
    assert calls == 1


async def test_without_the_lease_each_process_calls(redis_server: RedisServer) -> None:
    calls, outputs = await run_refreshers(redis_server.url, coordinate=False)
    assert outputs == ["fresh"] * 4
    assert calls == 4  # the control: the lease is what made it one


async def test_dead_lease_holder_never_blocks_past_the_lease(store: RedisStore) -> None:
    raw_lock = f"{store.prefix}:lease:{{k}}"
    await store.client.set(raw_lock, "someone-who-died", px=300)
    async with store.lease("k", 1) as holder:
        assert holder is False
    await asyncio.sleep(0.35)
    async with store.lease("k", 1) as holder:
        assert holder is True


async def test_memory_tier_is_bounded_and_first(redis_server: RedisServer) -> None:
    far = RedisStore(url=redis_server.url)
    tiered = TieredStore(far, MemoryStore(max_entries=2))
    for i in range(3):
        await tiered.set(f"k{i}", Entry(b"v", time.time()), 60)
    assert tiered.near.entries == 2
    assert await tiered.get("k0") is not None  # evicted from memory, found in Redis
    await far.aclose()


def test_two_sellers_share_one_redis(redis_server: RedisServer) -> None:
    import httpx

    from adcp_stale_cache.demo.processes import App, free_port

    inventory = App("inventory-service", free_port()).start()
    flags = (
        "--inventory-service",
        inventory.url,
        "--freshness-target",
        "1",
        "--upstream-timeout",
        "1",
        "--redis",
        redis_server.url,
    )
    seller_a, seller_b = App("seller", free_port(), *flags), App("seller", free_port(), *flags)
    apps = [inventory, seller_a, seller_b]
    try:
        for app in apps[1:]:
            app.start()
        for app in apps:
            app.wait(START_SECONDS)
        warm = httpx.post(f"{seller_a.url}/api/get_products", json={}, timeout=10)
        assert warm.status_code == 200 and "errors" not in warm.json()
        inventory.kill()
        time.sleep(1.2)
        response = httpx.post(
            f"{seller_b.url}/api/get_products", json={}, timeout=10
        )  # never warmed
    finally:
        for app in apps:
            app.stop()
    assert response.status_code == 200
    body = response.json()
    assert body["products"] == warm.json()["products"]
    [advisory] = body["errors"]
    assert advisory["code"] == "STALE_RESPONSE"
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"


def test_a_loop_per_request_keeps_using_redis(redis_server: RedisServer, caplog: Any) -> None:
    """Sellers that asyncio.run() each request: every new loop gets a working client."""
    store = RedisStore(url=redis_server.url)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY))
    calls = []

    async def call() -> dict[str, Any]:
        calls.append(1)
        return {"products": [len(calls)]}

    answers = [
        asyncio.run(cache.fetch(INVENTORY, "k", call, surface="get_products")) for _ in range(3)
    ]
    assert answers == [{"products": [1]}] * 3 and len(calls) == 1
    assert store.failures == 0 and "redis_unavailable" not in caplog.text

    async def two_loops_at_once() -> None:  # a client passed in belongs to its first loop
        client = redis_asyncio.Redis.from_url(redis_server.url)
        shared = RedisStore(client)
        await shared.set("k", Entry(b"{}", time.time()), 60)
        other = await asyncio.to_thread(asyncio.run, shared.get("k"))
        assert other is None and await shared.get("k") is not None
        await client.aclose()

    asyncio.run(two_loops_at_once())
    assert "redis_other_event_loop" in caplog.text


def test_a_store_built_from_a_url_serves_loops_running_at_once(
    redis_server: RedisServer, caplog: Any
) -> None:
    """A loop per worker thread, and the library's call loop beside the request's: each loop
    gets its own client, none answers "no entry" for another's."""
    store = RedisStore(url=redis_server.url)

    async def write_then_read_elsewhere() -> Entry | None:
        await store.set("k", Entry(b"{}", time.time()), 60)
        return await asyncio.to_thread(asyncio.run, store.get("k"))  # while this loop runs

    assert asyncio.run(write_then_read_elsewhere()) is not None
    surface = POLICY.model_copy(update={"freshness_target_seconds": 0})
    breaker = BreakerPolicy(failure_threshold=1, cooldown_seconds=0.1)
    cache = UpstreamCache(store, surfaces=Surfaces.of(surface), detach_calls=True, breaker=breaker)
    up = {"down": False, "calls": 0}

    async def call() -> dict[str, Any]:
        up["calls"] += 1
        if up["down"]:
            raise ConnectionRefusedError
        return {"products": [up["calls"]]}

    def request() -> Any:
        with collect_advisories() as advisories:
            value = asyncio.run(cache.fetch(INVENTORY, "k", call, surface=surface))
        return value, advisories.errors()

    request()
    up["down"] = True
    assert request()[1]  # stale: the breaker opens
    up["down"] = False
    time.sleep(0.15)
    request()  # the probe, on the call loop, stores through that loop's own client
    deadline = time.monotonic() + 5
    while cache.breaker_open(INVENTORY) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert request() == ({"products": [up["calls"]]}, [])
    assert store.failures == 0 and "redis_other_event_loop" not in caplog.text


async def test_the_file_answers_while_redis_is_down_even_after_a_restart(
    redis_server: RedisServer, tmp_path: Any
) -> None:
    from adcp_stale_cache.stores.sqlite import SqliteStore

    def process() -> UpstreamCache:  # memory, then the file, then Redis
        far = TieredStore(RedisStore(url=redis_server.url, retry_after_seconds=0.2),
                          SqliteStore(tmp_path / "seller.db"))  # fmt: skip
        return UpstreamCache(TieredStore(far), surfaces=Surfaces.of(POLICY))

    inventory = CountingUpstream()
    await process().fetch(INVENTORY, "k", inventory, surface="get_products")
    inventory.down = True
    redis_server.kill()
    await asyncio.sleep(1.1)
    restarted = process()  # a new process: empty memory, Redis unreachable
    with collect_advisories() as advisories:
        value = await restarted.fetch(INVENTORY, "k", inventory, surface="get_products")
    assert value == {"products": [1]} and len(advisories.errors()) == 1


@pytest.mark.parametrize("share", [True, False], ids=["shared", "each-its-own"])
async def test_shared_breakers_spare_other_processes_their_first_timeouts(
    redis_server: RedisServer, share: bool
) -> None:
    from adcp_stale_cache.pipeline.breaker import BreakerPolicy
    from adcp_stale_cache.stores import TieredStore

    surface = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=0,
                            max_stale_seconds=600, upstream_timeout_seconds=0.3)  # fmt: skip

    def process() -> UpstreamCache:
        store = TieredStore(RedisStore(url=redis_server.url))
        return UpstreamCache(store, surfaces=Surfaces.of(surface), share_breakers=share,
                             breaker=BreakerPolicy(failure_threshold=2, cooldown_seconds=1))  # fmt: skip

    state = {"hang": False}

    async def call() -> dict[str, Any]:
        if state["hang"]:
            await asyncio.sleep(5)
        return {"products": ["p1"]}

    a, b = process(), process()
    await a.fetch(INVENTORY, "k", call, surface="get_products")
    await b.fetch(INVENTORY, "k", call, surface="get_products")
    state["hang"] = True
    for _ in range(2):  # a times out twice: its breaker opens
        with collect_advisories():
            await a.fetch(INVENTORY, "k", call, surface="get_products")
    assert a.breaker_open(INVENTORY)
    started = time.monotonic()
    with collect_advisories() as advisories:
        assert await b.fetch(INVENTORY, "k", call, surface="get_products") == {"products": ["p1"]}
    took = time.monotonic() - started
    [advisory] = advisories.errors()
    assert advisory["details"]["original_error"]["code"] == "TIMEOUT"
    if share:
        assert took < 0.2  # at once: a's breaker said the upstream is down
    else:
        assert took >= 0.3  # b spends its own timeout
    if not share:
        return
    state["hang"] = False
    await asyncio.sleep(1.05)  # a's cooldown: its next request probes (behind a stale answer)
    with collect_advisories():
        await a.fetch(INVENTORY, "k", call, surface="get_products")
    await asyncio.sleep(0.05)
    assert not a.breaker_open(INVENTORY)
    raw = redis_asyncio.Redis.from_url(redis_server.url)
    assert await raw.keys("*:breaker:*") == []  # withdrawn by the process that recovered
    await raw.aclose()
    with collect_advisories() as advisories:
        await b.fetch(INVENTORY, "k", call, surface="get_products")
    assert advisories.errors() == []  # b calls again, and the upstream answers


async def test_after_any_purge_a_redis_outage_keeps_the_memory_fallback(
    redis_server: RedisServer,
) -> None:
    """Found by a hostile review of issue 22: while Redis was down, the tiered store read
    its "no entry" as "no shared copy" and, after any purge (of other entries too), forgot
    every memory copy stored before it, so an upstream outage then failed instead of being
    served stale. A shared store that did not answer says nothing."""
    from adcp_stale_cache.ops.control import CacheControl

    cache = cache_on(redis_server.url)
    up = CountingUpstream()
    await cache.fetch(INVENTORY, "k", up, surface="get_products", tags=["a"])
    await cache.fetch(INVENTORY, "other", up, surface="get_products", tags=["b"])
    assert await CacheControl(cache).invalidate(tags=["b"], soft=False) == 1
    await asyncio.sleep(0.1)  # past check_seconds: the next read hears the purge
    await cache.fetch(INVENTORY, "third", up, surface="get_products")
    redis_server.kill()
    up.down = True
    await asyncio.sleep(1.1)  # past the target: each fetch refreshes, fails, serves stale
    for _ in range(2):
        with collect_advisories() as advisories:
            value = await cache.fetch(INVENTORY, "k", up, surface="get_products", tags=["a"])
        assert value["products"] and [e["code"] for e in advisories.errors()] == ["STALE_RESPONSE"]


async def test_a_purge_during_another_processs_coordinated_refresh_fails_no_waiter(
    redis_server: RedisServer,
) -> None:
    """Second hostile review of issue 22: a purge (of anything) while another process held
    the refresh lease kept that process's answer out, as it should; but the process waiting
    on the lease read "released, nothing stored" as an outage and failed its caller while
    the upstream was healthy. It now asks the upstream itself."""
    from adcp_stale_cache.ops.control import CacheControl

    a, b = (cache_on(redis_server.url, coordinate_refreshes=True) for _ in range(2))

    async def slow() -> dict[str, Any]:
        await asyncio.sleep(0.4)
        return {"products": ["a"]}

    async def fast() -> dict[str, Any]:
        return {"products": ["b"]}

    holder = asyncio.ensure_future(a.fetch(INVENTORY, "k", slow, surface="get_products"))
    await asyncio.sleep(0.1)
    waiter = asyncio.ensure_future(b.fetch(INVENTORY, "k", fast, surface="get_products"))
    await asyncio.sleep(0.1)
    await CacheControl(b).invalidate(tags=["unrelated"], soft=False)
    assert await holder == {"products": ["a"]}
    assert await waiter == {"products": ["b"]}  # asked for itself: no false outage


async def test_a_redis_back_empty_keeps_the_memory_fallback(redis_server: RedisServer) -> None:
    """Second hostile review of issue 22: the first reading of the purge count (Redis down at
    start, back empty, or restarted: its count back to 0) was taken as a purge, so every
    memory copy with no shared copy was forgotten, and an upstream outage then failed."""
    cache = cache_on(redis_server.url)
    redis_server.kill()
    up = CountingUpstream()
    await cache.fetch(INVENTORY, "k", up, surface="get_products")  # memory only
    redis_server.start()
    up.down = True
    await asyncio.sleep(1.2)  # past the target, and past the store's retry_after
    with collect_advisories() as advisories:
        value = await cache.fetch(INVENTORY, "k", up, surface="get_products")
    assert value == {"products": [1]}
    assert [e["code"] for e in advisories.errors()] == ["STALE_RESPONSE"]


class QueuedClient:
    """A client out of reach, as redis-py's Cluster client is: one operation at a time
    (its re-initialisation is behind a lock), each waiting as long as it is let."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.calls = 0

    async def get(self, key: str) -> bytes | None:
        self.calls += 1
        async with self.lock:
            await asyncio.Event().wait()  # never answered
        return None


async def test_an_operation_is_bounded_as_a_whole_not_per_read() -> None:
    """Socket timeouts bound each read, not an operation: twenty requests queued behind an
    unreachable Cluster's client each waited for all the ones before (a seller cut off from
    its Cluster answered in 8 s, then 15 s and more). Each now fails by its own deadline."""
    client = QueuedClient()
    store = RedisStore(client, socket_timeout=0.01)
    found = await asyncio.wait_for(asyncio.gather(*(store.get(f"k{i}") for i in range(20))), 10)
    assert found == [None] * 20 and store.failures == 20 and client.calls == 20
    assert await store.get("k") is None and client.calls == 20  # then it stays away


def test_every_client_retries_once_at_once() -> None:
    """redis-py retries an operation ten times with a backoff by default: a Redis out of
    reach held each for seconds. One immediate retry (an idle connection the server closed)."""
    from redis.backoff import NoBackoff

    from adcp_stale_cache.stores.redis_urls import client_from_url

    for url in ("redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1,127.0.0.1:2",
                "redis+sentinel://127.0.0.1:1/seller"):  # fmt: skip
        client = client_from_url(url, socket_timeout=0.25)
        retry = getattr(client, "retry", None) or client.connection_pool.connection_kwargs["retry"]
        assert retry.get_retries() == 1 and isinstance(retry._backoff, NoBackoff), url


async def test_a_key_purge_counts_an_entry_built_from_itself_once(store: RedisStore) -> None:
    """The entry is listed twice (the key, and what is built from it): marked and counted
    once, the second time too (it was counted again when already marked)."""
    await store.set("K", Entry(b"v", time.time(), (built_from("K"),)), 60)
    selection = Selection(frozenset(), store_key="K")
    assert await store.purge(selection, soft=True) == 1
    assert await store.purge(selection, soft=True) == 1
    assert await store.purge(selection, soft=False) == 1
