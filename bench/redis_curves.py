"""Redis round trips per request, and a purge's propagation across processes (issue 26).

Both run on redis-servers of their own, started on free loopback ports, in the deployment's
shape: ``UpstreamCache(TieredStore(RedisStore(url)))``, a memory tier in front of Redis.

**Round trips** are counted by the server. A round trip is one request the client sends and
waits for; a script (``EVAL``) is one, whatever it calls. Redis 7.0 counts the commands a
script runs in ``INFO commandstats`` (and in ``total_commands_processed``) as if clients had
sent them, so a window's figure is the growth of every ``cmdstat_*`` count, minus the
commands ``MONITOR`` shows run by a script (``[0 lua]``), minus this bench's own commands
(the ``INFO`` that opened the window and two ``ECHO`` markers that bound it in the
``MONITOR`` stream). The same window's ``MONITOR`` lines sent by clients are counted too: the
two counts must agree, else the figure is refused. (``RedisStore`` sends no pipeline or
``MULTI`` outside a Redis Cluster, where one pipeline would show as several lines.)

- ``memory_hit``: one hot key, fetched by one process at a steady rate (:data:`RATE` per
  second, a busy process), over 20,000 hits: the memory tier answers, and re-reads the
  shared purge count at most every ``check_seconds`` (50 ms), so the figure is amortised:
  about ``1 / (RATE * check_seconds)``.
- ``redis_hit``: keys another process stored, read once each by a process that never held
  them (its memory tier is cold), at the same rate.
- ``miss``: keys no one stored: the lookup, the upstream call, the store's write.
- ``miss_bytes_sent``: what a miss sends Redis, in bytes (its key, value and labels, and
  its script by SHA-1: see ``RedisStore``).
- ``miss_coordinated``: a miss with ``coordinate_refreshes=True`` (the cross-process refresh
  lease, as the docs' recipe sets it): information, no target.

**Propagation**: ``n`` worker processes (each its own interpreter and event loop) poll
their own ``cache.fetch`` of one key every :data:`POLL_SECONDS`; the operator's process
purges it (``CacheControl.invalidate``) and notes when the call returned. Each worker
reports when it first served an answer the purge made it fetch again (the upstream's
answer carries the purge's number, read from Redis at call time, so whichever worker's
refresh a worker serves, it is recognisably new). A purge's figure is the last worker's
first new answer minus the acknowledgement; the poll adds up to one interval (plus the
fetch itself), so the figure from each worker's last old answer is reported beside it as
the lower bound. p99 over :data:`PURGES` purges (fewer in quick mode). Beside them,
``woke_late``: per purge, the most any worker's 5 ms sleep overran in the 250 ms before it
reported (p99): how short of CPU the machine was, which no cache setting changes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.demo.processes import free_port, wait_for_port
from adcp_stale_cache.ops.control import CacheControl
from adcp_stale_cache.stores import TieredStore
from adcp_stale_cache.stores.redis import RedisStore

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=3600,
                       max_stale_seconds=3600)  # fmt: skip
SURFACES = Surfaces.of(POLICY)
UPSTREAM = Upstream(name="inventory", url="https://inventory.example/products")
VALUE = {"products": [{"product_id": f"p-{i}", "name": "Run of network display"}
                      for i in range(3)]}  # fmt: skip

RATE = 1000  # requests per second one process is driven at
HITS, QUICK_HITS = 20_000, 2_000  # memory-tier hits per window
KEYS, QUICK_KEYS = 2_000, 300  # Redis hits and misses per window
PROCESSES = (2, 5, 10)
PURGES, QUICK_PURGES = 100, 10  # p99 of 100: the second worst
POLL_SECONDS = 0.005  # each worker's fetch interval
VERSION_KEY = "bench:version"  # the purge number the upstream answers with


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A redis-server of our own on a free loopback port (no persistence): its URL."""
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, process=process)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def tiered(url: str, **tier: Any) -> TieredStore:
    """The deployment's store: a memory tier in front of ``url``."""
    return TieredStore(RedisStore(url=url), **tier)


class RoundTrips:
    """Counts the round trips clients make to one redis-server within a window, from the
    server's own statistics (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        import redis.asyncio as redis_asyncio

        self.admin = redis_asyncio.Redis.from_url(url)
        self.seen: list[tuple[str, str]] = []  # (client type, command) per MONITOR line
        self._marks = 0
        self._monitor: Any = None
        self._task: asyncio.Task[None] | None = None
        self._own_bytes: int | None = None  # what a window's own commands send
        self.received = 0

    @staticmethod
    async def _nothing() -> None:
        return None

    async def _bytes_of(self, work: Callable[[], Awaitable[object]]) -> int:
        await self.count(work)
        return self.received

    async def __aenter__(self) -> RoundTrips:
        self._monitor = self.admin.monitor()
        await self._monitor.__aenter__()
        self._task = asyncio.ensure_future(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        with contextlib.suppress(Exception):
            await self._monitor.__aexit__(None, None, None)
        await self.admin.aclose()

    async def _listen(self) -> None:
        while True:
            line = await self._monitor.next_command()
            self.seen.append((line["client_type"], line["command"]))

    async def _mark(self) -> int:
        """An ``ECHO`` marker, waited for in the MONITOR stream: its index there."""
        self._marks += 1
        mark = f"round-trips-mark-{self._marks}"
        await self.admin.echo(mark)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for i in range(len(self.seen) - 1, -1, -1):
                if self.seen[i][1].endswith(mark):
                    return i
            await asyncio.sleep(0.01)
        raise TimeoutError("the MONITOR stream never showed the marker")

    async def _calls(self) -> tuple[int, int]:
        """Commands run so far, and bytes received (one ``INFO``)."""
        stats = await self.admin.info("stats", "commandstats")
        calls = sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_"))
        return calls, int(stats["total_net_input_bytes"])

    async def count(self, work: Callable[[], Awaitable[object]]) -> int:
        """The round trips clients made to the server while ``work`` ran (and, in
        :attr:`received`, the bytes they sent it, this bench's own subtracted)."""
        if self._own_bytes is None:
            self._own_bytes = 0
            self._own_bytes = await self._bytes_of(self._nothing)  # INFO and the markers
        before, bytes_before = await self._calls()  # counted once it has answered
        start = await self._mark()
        await work()
        end = await self._mark()
        after, bytes_after = await self._calls()
        self.received = bytes_after - bytes_before - self._own_bytes
        window = self.seen[start + 1 : end]
        scripted = sum(1 for kind, _ in window if kind == "lua")
        own = 3  # the opening INFO and the two markers
        counted = after - before - own - scripted
        sent = len(window) - scripted
        if counted != sent:
            raise RuntimeError(f"commandstats counts {counted} round trips, MONITOR {sent}")
        return counted


async def paced(requests: list[Callable[[], Awaitable[object]]], rate: float) -> float:
    """Run ``requests`` one after another at ``rate`` per second (in 10 ms ticks); the rate
    achieved."""
    per_tick = max(1, round(rate / 100))
    started = time.monotonic()
    for i in range(0, len(requests), per_tick):
        for request in requests[i : i + per_tick]:
            await request()
        due = started + (i + per_tick) / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    return len(requests) / (time.monotonic() - started)


def fetcher(cache: UpstreamCache, key: object) -> Callable[[], Awaitable[object]]:
    """One request: ``cache.fetch`` of ``key`` (its upstream answers :data:`VALUE`)."""

    async def call() -> dict[str, Any]:
        return VALUE

    async def request() -> object:
        return await cache.fetch(UPSTREAM, key, call, surface="get_products")

    return request


async def count_round_trips(
    url: str, *, hits: int, keys: int, rate: float = RATE, **tier: Any
) -> dict[str, float]:
    """Round trips per memory-tier hit, Redis hit and miss (and coordinated miss), each
    counted over its own window; ``tier`` configures every ``TieredStore``."""
    out: dict[str, float] = {}
    caches: list[UpstreamCache] = []

    def cache(**options: Any) -> UpstreamCache:
        caches.append(UpstreamCache(tiered(url, **tier), surfaces=SURFACES, **options))
        return caches[-1]

    try:
        async with RoundTrips(url) as trips:
            # A memory-tier hit: one hot key of this process.
            hot = cache()
            await fetcher(hot, "hot")()
            requests = [fetcher(hot, "hot")] * hits
            achieved: list[float] = []

            async def paced_here(requests: list[Callable[[], Awaitable[object]]]) -> None:
                achieved.append(await paced(requests, rate))  # the rate achieved, noted

            out["memory_hit"] = await trips.count(lambda: paced_here(requests)) / hits
            out["memory_hit_rate"] = achieved[-1]
            # A Redis hit: keys another process stored, read by one that never held them.
            writer, reader = cache(), cache()
            for i in range(keys):
                await fetcher(writer, ("shared", i))()
            await fetcher(reader, "warm")()  # its first purge-count reading: not a hit's
            shared = [fetcher(reader, ("shared", i)) for i in range(keys)]
            out["redis_hit"] = await trips.count(lambda: paced_here(shared)) / keys
            out["redis_hit_rate"] = achieved[-1]
            # A miss: nothing cached anywhere.
            cold = [fetcher(reader, ("cold", i)) for i in range(keys)]
            out["miss"] = await trips.count(lambda: paced_here(cold)) / keys
            out["miss_rate"] = achieved[-1]
            out["miss_bytes_sent"] = trips.received / keys
            leased = cache(coordinate_refreshes=True)
            await fetcher(leased, "warm-leased")()  # a miss: its scripts are cached
            cold = [fetcher(leased, ("cold-leased", i)) for i in range(keys)]
            out["miss_coordinated"] = await trips.count(lambda: paced_here(cold)) / keys
            out["miss_coordinated_rate"] = achieved[-1]
    finally:
        for each in caches:
            with contextlib.suppress(Exception):
                await each.store.far.aclose()  # type: ignore[attr-defined]
    return out


# --- propagation -----------------------------------------------------------------------


async def worker(url: str, seconds: float) -> None:
    """One process: poll ``cache.fetch`` of the key every :data:`POLL_SECONDS` for at most
    ``seconds``, printing a JSON line each time the purge number it serves grows."""
    import redis.asyncio as redis_asyncio

    cache = UpstreamCache(tiered(url), surfaces=SURFACES)
    raw = redis_asyncio.Redis.from_url(url)

    async def call() -> dict[str, Any]:
        return {"version": int(await raw.get(VERSION_KEY) or 0), **VALUE}

    served, last_old = -1, time.time()
    late: collections.deque[tuple[float, float]] = collections.deque(maxlen=100)
    deadline = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < deadline:
        value = await cache.fetch(UPSTREAM, "purged", call, surface="get_products")
        now = time.time()
        if value["version"] > served:
            if served >= 0:
                # How late this process woke, at worst, over the last 250 ms: a machine
                # short of CPU shows here, not in the cache.
                woke = max((d for at, d in late if at > now - 0.25), default=0.0)
                report = {"v": value["version"], "t": now, "prev": last_old, "late": woke}
                print(json.dumps(report), flush=True)
            served = value["version"]
        last_old = now
        slept = time.monotonic()
        await asyncio.sleep(POLL_SECONDS)
        late.append((time.time(), time.monotonic() - slept - POLL_SECONDS))
    await raw.aclose()


@contextlib.asynccontextmanager
async def workers(url: str, n: int, seconds: float) -> AsyncIterator[list[Any]]:
    """``n`` worker processes, each ready (it fetched the key once)."""
    command = [sys.executable, "-m", "bench.redis_curves", "worker", url, str(seconds)]
    procs = [await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE,
                                                  stdin=subprocess.DEVNULL) for _ in range(n)]  # fmt: skip
    try:
        for proc in procs:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"a worker did not start: {line!r}")
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()


async def propagation(url: str, n: int, purges: int) -> dict[str, float]:
    """p99 (and median) over ``purges`` purges of the time until all ``n`` workers served
    the purged key as not fresh, ms after the purge was acknowledged; upper bound (first
    new answer) and lower bound (last old answer)."""
    import redis.asyncio as redis_asyncio

    raw = redis_asyncio.Redis.from_url(url)
    operator = UpstreamCache(tiered(url), surfaces=SURFACES)
    control = CacheControl(operator)
    await raw.set(VERSION_KEY, 0)
    upper: list[float] = []
    lower: list[float] = []
    late: list[float] = []  # per purge, the latest a worker woke from its poll's sleep
    try:
        async with workers(url, n, seconds=30 + purges * 3.0) as procs:
            await asyncio.sleep(1.5)  # every worker's copy settled (past near_max_age)
            for i in range(1, purges + 1):
                await raw.set(VERSION_KEY, i)
                await control.invalidate(upstream=UPSTREAM, key="purged")
                acked = time.time()
                reports = [await _report(proc, i) for proc in procs]
                upper.append(max(r["t"] for r in reports) - acked)
                lower.append(max(r["prev"] for r in reports) - acked)
                late.append(max(r["late"] for r in reports))
                await asyncio.sleep(random.uniform(0.1, 0.3))  # out of phase with the tiers
    finally:
        await raw.aclose()
        await operator.store.far.aclose()  # type: ignore[attr-defined]
    return {
        f"purge_propagation_ms.{n}": _p99(upper) * 1000,
        f"purge_propagation_ms.{n}.median": statistics.median(upper) * 1000,
        f"purge_propagation_ms.{n}.lower": _p99(lower) * 1000,
        f"purge_propagation_ms.{n}.woke_late": _p99(late) * 1000,
    }


async def _report(proc: Any, version: int) -> dict[str, float]:
    """The worker's first report of ``version`` (or later), within 10 s."""
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        if not line:
            raise RuntimeError("a worker exited")
        report: dict[str, float] = json.loads(line)
        if report["v"] >= version:
            return report


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return max(0.0, ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)])


async def redis_curves_async(quick: bool) -> dict[str, float]:
    """Every figure, each on a redis-server of its own."""
    out: dict[str, float] = {}
    with redis_server() as url:
        hits, keys = (QUICK_HITS, QUICK_KEYS) if quick else (HITS, KEYS)
        counted = await count_round_trips(url, hits=hits, keys=keys)
        out.update({f"redis_round_trips.{name}": value for name, value in counted.items()})
    for n in PROCESSES:
        with redis_server() as url:
            out.update(await propagation(url, n, QUICK_PURGES if quick else PURGES))
    return out


def redis_curves(quick: bool) -> dict[str, float]:
    """``redis_round_trips.memory_hit|redis_hit|miss`` (round trips per request) and
    ``purge_propagation_ms.2|5|10`` (p99, ms), with their side figures; empty when
    redis-server is not installed."""
    if shutil.which("redis-server") is None:
        return {}
    return asyncio.run(redis_curves_async(quick))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(worker(sys.argv[2], float(sys.argv[3])))
    else:
        for name, figure in redis_curves("--quick" in sys.argv).items():
            print(f"{name:45} {figure:10.3f}")
