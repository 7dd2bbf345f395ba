"""Blocking upstream clients and sync tools (issue 31): ``fetch_blocking`` and its lanes.

A real blocking client (``requests``) against loopback upstreams served by a threaded HTTP
server: one that can be frozen (it accepts and never answers) and one healthy.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from typing import Any

import pytest
import requests

from adcp_stale_cache import (
    AdvisoryCollector,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    carry_context,
    collect_advisories,
    use_collector,
)
from adcp_stale_cache.pipeline import blocking
from adcp_stale_cache.pipeline.breaker import BreakerPolicy
from adcp_stale_cache.pipeline.call_loop import CALLS

from ..servers import serve

# Target 0: every fetch calls its upstream, and an entry held is past its target at once.
PRODUCTS = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=0)
SURFACES = Surfaces.of(default=PRODUCTS)  # in a request or not
BUDGETED = PRODUCTS.model_copy(update={"request_budget_seconds": 1.5})
LANE_THREADS = "adcp-stale-cache-blocking"
FASTMCP_2 = importlib.util.find_spec("fastmcp") is not None and version("fastmcp")[:2] == "2."


class Agent(ThreadingHTTPServer):
    """A loopback upstream answering ``GET /<key>`` with ``{"key", "version"}``; while
    ``frozen`` it accepts a request and answers nothing until released (or stopped)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.version = 1
        self.frozen = threading.Event()
        self.released = threading.Event()
        self.requests = 0  # received in all
        self.held = 0  # requests held unanswered right now
        self.most_held = 0
        self.requests_held = 0  # held in all
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def freeze(self) -> None:
        self.released.clear()
        self.frozen.set()

    def release(self) -> None:
        self.frozen.clear()
        self.released.set()

    def hold(self) -> None:
        with self.lock:
            self.held += 1
            self.requests_held += 1
            self.most_held = max(self.most_held, self.held)
        self.released.wait(20)  # bounded: a test's teardown releases it sooner
        with self.lock:
            self.held -= 1

    def stop(self) -> None:
        self.release()
        self.shutdown()
        self.server_close()
        self.thread.join(10)


class _Handler(BaseHTTPRequestHandler):
    server: Agent

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests += 1
        if self.server.frozen.is_set():
            self.server.hold()
        body = json.dumps({"key": self.path.strip("/"), "version": self.server.version}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def get(url: str) -> dict[str, Any]:
    """The blocking client call: ``requests``, as real sellers use it."""
    answer = requests.get(url, timeout=30)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


def lane_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(LANE_THREADS)]


def on_a_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@pytest.fixture
def agents() -> Iterator[tuple[Agent, Agent]]:
    frozen, healthy = Agent(), Agent()
    try:
        yield frozen, healthy
    finally:
        frozen.stop()
        healthy.stop()
        for thread in lane_threads():  # released: every abandoned call returns now
            thread.join(10)
        assert not lane_threads()


def test_a_frozen_upstream_holds_its_own_threads_and_no_others(
    agents: tuple[Agent, Agent],
) -> None:
    frozen_agent, healthy_agent = agents
    cache = UpstreamCache(surfaces=SURFACES, breaker=None, blocking_threads=4)
    frozen = Upstream(name="frozen-agent", url=frozen_agent.url, timeout_seconds=1.0)
    healthy = Upstream(name="healthy-agent", url=healthy_agent.url, timeout_seconds=1.0)
    keys = [f"k{i}" for i in range(20)]  # one key each: 20 flights, not one shared
    for key in keys:  # warm
        warm = cache.fetch_blocking(frozen, key, lambda k=key: get(f"{frozen_agent.url}/{k}"))
        assert warm == {"key": key, "version": 1}
    frozen_agent.freeze()
    start = threading.Barrier(len(keys) + 1, timeout=10)

    def tool(key: str) -> tuple[Any, list[dict[str, Any]], float]:
        start.wait()
        with collect_advisories(PRODUCTS) as advisories:
            began = time.monotonic()
            value = cache.fetch_blocking(frozen, key, lambda: get(f"{frozen_agent.url}/{key}"))
            return value, advisories.errors(), time.monotonic() - began

    with ThreadPoolExecutor(len(keys)) as pool:
        futures = [pool.submit(tool, key) for key in keys]
        start.wait()
        wait_until(lambda: frozen_agent.held >= 4)  # its lane is full, 16 calls wait
        began = time.monotonic()
        answer = cache.fetch_blocking(healthy, "h", lambda: get(f"{healthy_agent.url}/h"))
        healthy_took = time.monotonic() - began
        answers = [f.result(timeout=10) for f in futures]

    assert answer == {"key": "h", "version": 1}
    assert healthy_took < 0.5  # not queued behind the frozen upstream's calls
    for key, (value, errors, took) in zip(keys, answers, strict=True):
        assert value == {"key": key, "version": 1}
        assert [e["code"] for e in errors] == ["STALE_RESPONSE"]
        assert took < 1.0 + 1.0
    time.sleep(0.3)  # a call abandoned while it waited for a thread never starts
    assert frozen_agent.most_held == 4
    assert frozen_agent.requests_held == 4
    assert len(lane_threads()) == 4

    frozen_agent.version = 2
    frozen_agent.release()  # the abandoned calls return: their threads end, the lane is free
    wait_until(lambda: not lane_threads())
    assert frozen_agent.requests == len(keys) + 4  # the warm-up, and the 4 it held
    fresh = cache.fetch_blocking(frozen, "k0", lambda: get(f"{frozen_agent.url}/k0"))
    assert fresh == {"key": "k0", "version": 2}


@pytest.mark.parametrize("detach_calls", [False, True])
def test_a_sync_tool_called_on_the_servers_loop_thread(
    agents: tuple[Agent, Agent], detach_calls: bool
) -> None:
    frozen_agent, _ = agents
    cache = UpstreamCache(surfaces=SURFACES, detach_calls=detach_calls)
    frozen = Upstream(name="frozen-agent", url=frozen_agent.url, timeout_seconds=1.0)

    def list_products(key: str) -> Any:  # a sync tool: fastmcp 2.x calls it on its loop
        return cache.fetch_blocking(frozen, key, lambda: get(f"{frozen_agent.url}/{key}"))

    async def server() -> tuple[Any, list[dict[str, Any]], float, float]:
        asyncio.get_running_loop()  # a running loop here, where asyncio.run cannot run
        list_products("warm")
        frozen_agent.freeze()
        with collect_advisories(PRODUCTS) as advisories:
            began = time.monotonic()
            value = list_products("warm")
            stale_took = time.monotonic() - began
        began = time.monotonic()
        with pytest.raises(UpstreamUnavailable):
            list_products("cold")
        return value, advisories.errors(), stale_took, time.monotonic() - began

    value, errors, stale_took, failure_took = asyncio.run(server())
    assert value == {"key": "warm", "version": 1}
    assert [e["code"] for e in errors] == ["STALE_RESPONSE"]
    assert 0.9 < stale_took < 1.0 + 1.0
    assert 0.9 < failure_took < 1.0 + 1.0


def test_the_request_budget_bounds_a_sync_tool_from_its_first_fetch(
    agents: tuple[Agent, Agent],
) -> None:
    frozen_agent, healthy_agent = agents
    cache = UpstreamCache(surfaces=Surfaces.of(BUDGETED))
    slow = Upstream(name="frozen-agent", url=frozen_agent.url, timeout_seconds=10.0)
    first = Upstream(name="healthy-agent", url=healthy_agent.url)
    cache.fetch_blocking(slow, "k", lambda: get(f"{frozen_agent.url}/k"), surface=BUDGETED)
    frozen_agent.freeze()
    collector = AdvisoryCollector(BUDGETED)  # as the middleware does on the request's arrival

    def slow_first_call() -> dict[str, Any]:
        time.sleep(1.0)
        return get(f"{healthy_agent.url}/first")

    def tool() -> Any:  # the server runs the sync tool in a worker thread, a while later
        time.sleep(0.5)  # the seller's own queue: not the library's waiting
        began = time.monotonic()
        cache.fetch_blocking(first, "first", slow_first_call)  # cold: called in full
        return began, cache.fetch_blocking(slow, "k", lambda: get(f"{frozen_agent.url}/k"))

    with use_collector(collector), ThreadPoolExecutor(1) as pool:
        began, value = pool.submit(carry_context(tool)).result(timeout=15)
    answered_after = time.monotonic() - began
    assert value == {"key": "k", "version": 1}
    assert 1.4 < answered_after < 1.5 + 0.5  # the budget, not the upstream's 10 s deadline
    assert [e["code"] for e in collector.errors()] == ["STALE_RESPONSE"]


def test_cached_on_a_plain_function_is_a_blocking_wrapper(agents: tuple[Agent, Agent]) -> None:
    frozen_agent, _ = agents
    cache = UpstreamCache(surfaces=SURFACES)
    agent = Upstream(name="agent", url=frozen_agent.url, timeout_seconds=1.0)
    calls: list[str] = []

    @cache.cached(agent, surface=PRODUCTS)
    def products(country: str) -> dict[str, Any]:
        calls.append(country)
        return get(f"{frozen_agent.url}/{country}")

    assert not inspect.iscoroutinefunction(products)
    assert products.__name__ == "products"
    assert products("US") == {"key": "US", "version": 1}
    assert calls == ["US"]
    frozen_agent.freeze()
    with collect_advisories() as advisories:
        began = time.monotonic()
        assert products("US") == {"key": "US", "version": 1}
        assert time.monotonic() - began < 1.0 + 1.0
    assert calls == ["US", "US"]
    assert [e["code"] for e in advisories.errors()] == ["STALE_RESPONSE"]


class _AsyncCallable:
    """An upstream client object whose ``__call__`` is async."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, country: str) -> dict[str, Any]:
        self.calls.append(country)
        return {"products": [country]}


def _marked(calls: list[str]) -> Any:
    """A plain function marked async (it returns an awaitable), on Pythons that mark."""

    async def answer(country: str) -> dict[str, Any]:
        return {"products": [country]}

    def products(country: str) -> Any:
        calls.append(country)
        return answer(country)

    return inspect.markcoroutinefunction(products)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shape", ["async __call__", "markcoroutinefunction"])
async def test_cached_decides_async_by_what_the_function_is(shape: str) -> None:
    """An object with an async ``__call__`` and a marked function are async: cached, awaited,
    never sent to a lane thread (whose answer would be an uncached coroutine)."""
    if shape == "markcoroutinefunction" and not hasattr(inspect, "markcoroutinefunction"):
        pytest.skip("inspect.markcoroutinefunction needs Python 3.12")
    fresh = PRODUCTS.model_copy(update={"freshness_target_seconds": 60})
    cache = UpstreamCache(surfaces=Surfaces.of(fresh))
    client = _AsyncCallable()
    fn = client if shape == "async __call__" else _marked(client.calls)
    with pytest.raises(TypeError, match="needs key="):
        cache.cached(Upstream(name="agent"))(_AsyncCallable())  # one per tenant, say
    products = cache.cached(Upstream(name="agent"), surface=fresh, key=str)(fn)
    assert inspect.iscoroutinefunction(products)
    assert await products("US") == {"products": ["US"]}
    assert await products("US") == {"products": ["US"]}
    assert client.calls == ["US"]


def test_a_blocking_call_that_fetches_carries_its_advisory_to_the_request(
    agents: tuple[Agent, Agent],
) -> None:
    frozen_agent, healthy_agent = agents
    cache = UpstreamCache(surfaces=SURFACES)
    inner = Upstream(name="frozen-agent", url=frozen_agent.url, timeout_seconds=1.0)
    outer = Upstream(name="healthy-agent", url=healthy_agent.url, timeout_seconds=5.0)

    def formats() -> dict[str, Any]:
        return cache.fetch_blocking(inner, "f", lambda: get(f"{frozen_agent.url}/f"))

    def products() -> dict[str, Any]:  # runs in the outer upstream's lane, and fetches
        return {"products": get(f"{healthy_agent.url}/p"), "formats": formats()}

    formats()
    frozen_agent.freeze()
    with collect_advisories(PRODUCTS) as advisories:
        value = cache.fetch_blocking(outer, "p", products)
    assert value["formats"] == {"key": "f", "version": 1}
    assert [e["details"]["upstream"]["name"] for e in advisories.errors()] == ["frozen-agent"]


def test_fetch_blocking_on_the_call_loops_own_thread_is_refused() -> None:
    cache = UpstreamCache(surfaces=SURFACES)

    async def misuse() -> Any:  # a detached call that blocks: it would wait on itself
        return cache.fetch_blocking(Upstream(name="u"), "k", lambda: {"never": "called"})

    with pytest.raises(RuntimeError, match="wait on itself"):
        CALLS.submit(misuse).result(timeout=5)


def test_blocking_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="blocking_threads"):
        UpstreamCache(blocking_threads=0)


def test_a_forked_child_gets_lanes_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    lanes = blocking.Lanes(2)
    upstream = Upstream(name="u")
    parents = lanes.of(upstream)
    assert lanes.of(upstream) is parents
    monkeypatch.setattr(blocking.os, "getpid", lambda: -1)  # the parent's threads are not here
    childs = lanes.of(upstream)
    assert childs is not parents
    assert lanes.of(upstream) is childs


@pytest.mark.skipif(
    not FASTMCP_2, reason="fastmcp 2.x (sync tools on the server's loop): CI's fastmcp 2 stage"
)
def test_a_fastmcp_2_sync_tool_answers_stale_at_its_deadline(agents: tuple[Agent, Agent]) -> None:
    from fastmcp import FastMCP
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client  # mcp 1.x, as fastmcp 2 pins

    frozen_agent, _ = agents
    shared = PRODUCTS.model_copy(update={"shared_across_callers": True})
    surfaces = Surfaces.of(shared)
    cache = UpstreamCache(surfaces=surfaces)
    inventory = Upstream(name="inventory", url=frozen_agent.url, timeout_seconds=1.0)
    server = FastMCP("seller")
    loops: list[bool] = []

    @server.tool()
    def get_products(country: str) -> dict:  # type: ignore[type-arg]
        # A sync tool, run on the server's loop. (A bare dict: fastmcp 2.10 resolves a
        # string annotation's names in a namespace of its own, without this module's Any.)
        loops.append(on_a_running_loop())
        url = f"{frozen_agent.url}/{country}"
        return {"products": cache.fetch_blocking(inventory, country, lambda: get(url))}

    async def call(base: str) -> tuple[Any, float]:
        async with (
            streamablehttp_client(f"{base}/mcp/") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            began = time.monotonic()
            result = await session.call_tool("get_products", {"country": "US"})
            return result, time.monotonic() - began

    app = StaleAdvisoryMiddleware(server.http_app(path="/mcp"), surfaces=surfaces)
    with serve(app) as base:
        warm, _ = asyncio.run(call(base))
        frozen_agent.freeze()
        stale, took = asyncio.run(call(base))
    assert loops == [True, True]  # where asyncio.run cannot run
    assert warm.structuredContent == {"products": {"key": "US", "version": 1}}
    assert stale.isError is False
    assert stale.structuredContent["products"] == {"key": "US", "version": 1}
    assert [e["code"] for e in stale.structuredContent["errors"]] == ["STALE_RESPONSE"]
    assert took < 1.0 + 1.0


def test_a_thread_that_cannot_start_frees_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = UpstreamCache(surfaces=SURFACES, blocking_threads=1)
    upstream = Upstream(name="u", timeout_seconds=1.0)
    assert cache.fetch_blocking(upstream, "a", lambda: {"n": 1}) == {"n": 1}

    class NoLaneThreads(threading.Thread):  # as under a container's pids.max
        def start(self) -> None:
            if self.name.startswith(LANE_THREADS):
                raise RuntimeError("can't start new thread")
            super().start()

    with monkeypatch.context() as patched:
        patched.setattr(threading, "Thread", NoLaneThreads)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            cache.fetch_blocking(upstream, "b", lambda: {"n": 2})
    assert cache.fetch_blocking(upstream, "c", lambda: {"n": 3}) == {"n": 3}


@pytest.mark.timeout(60)
def test_the_breakers_probe_gets_a_thread_when_stuck_calls_hold_them_all() -> None:
    """Probes abandoned during a freeze hold every thread a lane may run (twice its share);
    the next probe still runs, so a recovered upstream is asked within cooldown + deadline
    (review 31: it waited in the lane's queue until the stuck calls returned)."""
    cooldown, deadline = 0.2, 0.2
    surface = PRODUCTS.model_copy(update={"upstream_timeout_seconds": deadline})
    cache = UpstreamCache(
        surfaces=Surfaces.of(surface), blocking_threads=1,
        breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=cooldown),
    )  # fmt: skip
    upstream = Upstream(name="stuck")
    frozen, released, asked = threading.Event(), threading.Event(), threading.Event()

    def call() -> dict[str, Any]:
        if frozen.is_set():
            released.wait(10)  # a client whose own timeout is long
            raise TimeoutError("read timed out")
        asked.set()
        return {"products": ["p"]}

    def request() -> None:
        with collect_advisories(surface):
            cache.fetch_blocking(upstream, "k", call, surface=surface)

    try:
        request()
        frozen.set()
        asked.clear()
        for _ in range(3):  # the first call, then two probes: each holds its thread
            request()
            time.sleep(cooldown + 0.05)
        lane = cache.lanes.of(upstream)
        assert lane.running == lane.stranded == 2  # the lane's bound: twice its one thread
        frozen.clear()
        recovered = time.monotonic()
        while not asked.is_set() and time.monotonic() < recovered + cooldown + deadline + 1.0:
            request()
            time.sleep(0.05)
        assert asked.is_set(), "the recovered upstream was never asked"
        assert time.monotonic() - recovered < cooldown + deadline + 0.3
    finally:
        released.set()


@pytest.mark.timeout(30)
async def test_what_a_probes_blocking_call_fetches_itself_is_no_probe() -> None:
    """A probe's call runs unbounded by its lane; the upstreams it calls in turn are not
    probed: their calls keep their own lanes' bounds."""
    lane = blocking.Lane(1, "t")

    async def refresh() -> bool:
        return await lane.calling(blocking._probing.get)()

    assert await blocking.as_probe(refresh)() is False
