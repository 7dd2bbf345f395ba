"""REVIEW 31: reproductions of defects found attacking issue 31's work as a hostile user.

Each test asserts the behaviour a seller should get; each FAILS on the library as reviewed
(h-review31 at main's tip, e92ef84). Marked ``review31`` in their names; not fixes. The
module is ``xfail(strict=True)`` so that the suite stays green until a fix lands: a fixed
defect's test then XPASSes and fails the run, and its marker is to be removed with the fix
(run one red as it is: ``pytest tests/pipeline/test_review31_defects.py --runxfail``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)
from adcp_stale_cache.core.failures import classify

from ..conftest import CountingMetrics

OPEN = pytest.mark.xfail(strict=True, reason="review 31: reproduces an open defect")

PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
INVENTORY = Upstream(name="inventory")
AGENT = Upstream(name="signals-platform")


class _LazyMessage(Exception):
    """A seller's own exception whose ``__str__`` reads an attribute set only on some paths
    (a common shape: ``self.detail`` filled in by the caller after construction)."""

    def __str__(self) -> str:
        return str(self.detail)  # type: ignore[attr-defined]


def test_review31_classify_survives_an_exception_whose_str_raises() -> None:
    """REVIEW 31 defect: failures._text guards a raising ``__str__``, but the transport
    rules (``"connection refused" in str(e)``, ``_is_dns``, the TLS rule) call ``str(e)``
    bare: classify raises AttributeError from inside the library, so the seller sees the
    library's error instead of their own exception (or a stale serve)."""
    error = _LazyMessage()
    failure = classify(error)
    assert failure.code == "UPSTREAM_ERROR"


@pytest.mark.timeout(30)
async def test_review31_fetch_reraises_the_sellers_own_exception_whose_str_raises() -> None:
    """REVIEW 31 defect (same root as above), as a seller meets it through fetch."""
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))

    async def call() -> Any:
        raise _LazyMessage()

    with pytest.raises(_LazyMessage):
        await cache.fetch(INVENTORY, "k", call, surface="get_products")


@pytest.mark.timeout(60)
def test_review31_a_loop_per_request_does_not_pile_up_redis_connections() -> None:
    """REVIEW 31 defect: ``RedisStore(url=...)`` gives each event loop its own client
    (stores/redis_urls.LoopClients), kept in a WeakKeyDictionary by loop "so a loop's goes
    with it". But the value (the client, its connections' transports, redis-py's locks)
    references the loop, so the entry never goes: with ``asyncio.run`` per request (adopting
    step 4) every request leaves one open Redis connection and one closed loop behind, until
    the server's maxclients refuses everyone. ``aclose()`` closes one loop's client only."""
    import gc
    import re

    from adcp_stale_cache.core.entry import Entry
    from adcp_stale_cache.stores.redis import RedisStore

    from ..redis_server import RedisServer, redis_cli

    pytest.importorskip("redis.asyncio", reason="the redis extra is needed")
    server = RedisServer().start()
    try:
        store = RedisStore(url=server.url)
        asyncio.run(store.set("k", Entry(b"{}", time.time()), 60))

        def connected() -> int:
            found = re.search(r"connected_clients:(\d+)", redis_cli(server.port, "INFO", "clients"))
            assert found is not None
            return int(found.group(1)) - 1  # less redis-cli's own

        before = connected()
        for _ in range(40):  # 40 requests, each on its own loop, as asyncio.run per request
            assert asyncio.run(store.get("k")) is not None
        gc.collect()
        time.sleep(0.2)
        after = connected()
        loops_held = len(store._clients._by_loop)
        assert after - before <= 4, f"{after - before} Redis connections left open by 40 loops"
        assert loops_held <= 4, f"{loops_held} finished loops still hold a client"
    finally:
        server.kill()


def _echo_app(middleware_options: dict[str, Any]) -> Any:
    """An MCP-ish endpoint that answers every POST itself (a real server would answer a
    deep body with its own JSON-RPC parse error), behind the advisory middleware."""

    async def route(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({"jsonrpc": "2.0", "id": None, "result": {"bytes": len(body)}})

    app = FastAPI()
    app.add_api_route("/mcp", route, methods=["POST"])
    app.add_middleware(
        StaleAdvisoryMiddleware, surfaces=Surfaces.of(PRODUCTS), **middleware_options
    )
    return app


@pytest.mark.timeout(30)
async def test_review31_deeply_nested_arguments_do_not_crash_the_middleware() -> None:
    """REVIEW 31 defect: a tools/call whose arguments nest 100 000 deep (200 kB, well under
    max_peek_bytes): orjson refuses it (depth 1024), the stdlib fallback
    (codecs.json._stdlib) raises RecursionError, which only ValueError is caught for, so
    RequestPeek.receive raises inside the app's body read: a 500 with a traceback for any
    anonymous buyer, before the app (or its auth) ever saw the request."""
    depth = 100_000
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_products",'
        b'"arguments":{"x":' + b"[" * depth + b"]" * depth + b"}}}"
    )
    transport = httpx.ASGITransport(app=_echo_app({}), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        answer = await http.post("/mcp", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text[:200]
    assert answer.json()["result"]["bytes"] == len(body)


def _logged(fn: Any) -> Any:
    """A seller's own plain decorator around an async function (functools.wraps does not
    mark the wrapper a coroutine function): calling it returns the coroutine."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@pytest.mark.timeout(30)
async def test_review31_cached_still_serves_a_function_returning_an_awaitable() -> None:
    """REVIEW 31 defect (a regression): before issue 31, ``@cache.cached`` wrapped any
    function as async and awaited what it returned. It now picks ``fetch_blocking`` for
    whatever ``inspect.iscoroutinefunction`` says is not async: an async function behind a
    plain decorator (or an object with an async ``__call__``) is run in a lane thread, its
    coroutine handed back uncached (log: ``not_cacheable ... error=TypeError``): every call
    goes to the upstream, nothing is ever served from cache or stale in an outage, and the
    caller's event loop blocks on the lane hop meanwhile. Silent, where it used to work."""
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))
    calls = []

    @cache.cached(INVENTORY, surface="get_products")
    @_logged
    async def products(region: str) -> dict[str, Any]:
        calls.append(region)
        return {"products": [region]}

    assert await products("eu") == {"products": ["eu"]}
    assert await products("eu") == {"products": ["eu"]}
    assert calls == ["eu"], "cached, then served from the cache (it is never cached now)"


@pytest.mark.timeout(60)
def settled_answers(
    ask: Callable[[], list[dict[str, Any]]], recovered: float, settles_in: float, margin: float
) -> list[list[dict[str, Any]]]:
    """The errors of each of ``ask``'s answers, asked every 50 ms until 1.5 s past
    ``recovered`` + ``settles_in``, that came more than ``margin`` s after that point."""
    answers = []
    while time.monotonic() < recovered + settles_in + 1.5:
        answers.append((time.monotonic() - recovered, ask()))
        time.sleep(0.05)
    return [errors for at, errors in answers if at > settles_in + margin]


def test_review31_breaker_closes_when_each_request_closes_its_own_loop() -> None:
    """REVIEW 31 defect: docs/guide.md ("Threads and event loops") says work behind an
    answer finishes "whatever the runtime" and a recovered upstream is called again within
    cooldown + one deadline. A loop per request closed without asyncio.run's cancel-all
    (``loop = new_event_loop(); loop.run_until_complete(...); loop.close()``, the classic
    pattern, detach_calls left at its default) leaves the breaker's probe task pending
    forever: it is never cancelled, so Flights._landed never sets ``in_front``; it is held
    in Flights.tasks, so it is never collected and ``_releasing`` never frees the probe
    slot. The breaker stays half-open with its one probe taken: every later request is
    served stale (advisories about a healthy upstream) until max-stale runs out."""

    from adcp_stale_cache import collect_advisories
    from adcp_stale_cache.pipeline.breaker import BreakerPolicy

    cooldown, deadline = 0.3, 0.5
    surface = SurfacePolicy(
        name="get_signals", field="signals", freshness_target_seconds=0, max_stale_seconds=3600,
        upstream_timeout_seconds=deadline, shared_across_callers=True,
    )  # fmt: skip
    cache = UpstreamCache(
        surfaces=Surfaces.of(surface),
        breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=cooldown),
    )
    platform = {"up": True, "calls": 0}

    async def call() -> dict[str, Any]:
        platform["calls"] += 1
        await asyncio.sleep(0.01)
        if not platform["up"]:
            raise ConnectionRefusedError
        return {"signals": [platform["calls"]]}

    async def request() -> list[dict[str, Any]]:
        with collect_advisories() as advisories:
            await cache.fetch(AGENT, "segments", call, surface=surface)
        return advisories.errors()

    def run() -> list[dict[str, Any]]:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(request())
        finally:
            loop.close()

    assert run() == []
    platform["up"] = False
    assert run()[0]["code"] == "STALE_RESPONSE"
    platform["up"], recovered = True, time.monotonic()
    time.sleep(cooldown + 0.05)
    settled = settled_answers(run, recovered, cooldown + deadline, 0.1)
    assert settled and all(errors == [] for errors in settled), (
        f"{sum(1 for e in settled if e)} of {len(settled)} answers after cooldown + deadline "
        "were stale; breaker open: " + str(cache.breaker_open(AGENT))
    )


@pytest.mark.timeout(30)
async def test_review31_partition_from_call_is_not_fixed_before_the_body_is_read() -> None:
    """REVIEW 31 defect (security): StaleAdvisoryMiddleware(partition_from_call=) computes
    the partition once, at the request's first fetch, assuming "the app has read its body"
    by then (middleware._partition). A fetch made before the body is read (a seller's own
    middleware or route step reading tenant settings through the cache first) calls the hook
    with ``arguments=None``, indistinguishable from "no body", and that answer is memoised
    for the request (collector.partition). With a hook shaped like the shipped example's
    (examples/signals_agent.py ``principal``: None when no principal is named), every
    principal's later fetches share one partition: principal B is served principal A's
    segments."""
    from adcp_stale_cache import ToolCall

    signals = SurfacePolicy(
        name="get_signals", field="signals", paths=("/api/get_signals",),
        freshness_target_seconds=300, max_stale_seconds=3600,
    )  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(signals))
    settings, platform = Upstream(name="settings"), Upstream(name="data-platform")

    def principal(call: ToolCall) -> str | None:  # as examples/signals_agent.py
        named = (call.arguments or {}).get("principal_id")
        return None if named is None else f"principal:{named}"

    async def route(request: Request) -> JSONResponse:
        async def seller_settings() -> dict[str, Any]:
            return {"currency": "EUR"}

        await cache.fetch(settings, "settings", seller_settings)  # before the body is read
        asked = (await request.json())["principal_id"]

        async def segments() -> dict[str, Any]:
            return {"signals": [f"segment-of-{asked}"]}

        return JSONResponse(await cache.fetch(platform, "segments", segments))

    app = FastAPI()
    app.add_api_route("/api/get_signals", route, methods=["POST"])
    app.add_middleware(
        StaleAdvisoryMiddleware, surfaces=cache.surfaces, partition_from_call=principal
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        a = await http.post("/api/get_signals", json={"principal_id": "A"})
        b = await http.post("/api/get_signals", json={"principal_id": "B"})
    assert a.json()["signals"] == ["segment-of-A"]
    assert b.json()["signals"] == ["segment-of-B"], "principal B was served principal A's data"


@pytest.mark.timeout(30)
async def test_review31_agents_differing_only_in_query_or_userinfo_do_not_share_entries() -> None:
    """REVIEW 31 defect (security; pre-dates issue 31, now reached with the AnyUrl/httpx.URL
    sellers hold): Upstream(url=) strips userinfo, query and path parameters so that no
    credential reaches a buyer, and that stripped URL is also the upstream's identity and
    part of every store key (policy._public_url, lookup.store_key). Two tenants' agents
    told apart only by ``?tenant=`` / ``?api_key=`` or ``user:password@`` then share one
    breaker and, on a surface shared_across_callers (the guide's advice for public surfaces
    such as list_creative_formats), one entry: tenant B's buyers get tenant A's formats."""
    formats = SurfacePolicy(
        name="list_creative_formats", field="formats", shared_across_callers=True,
        freshness_target_seconds=300, max_stale_seconds=3600,
    )  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(formats))
    for url_a, url_b in (
        ("https://agent.example/mcp?tenant=a", "https://agent.example/mcp?tenant=b"),
        ("https://a:secret-a@agent.example/mcp", "https://b:secret-b@agent.example/mcp"),
    ):
        agents = {
            tenant: Upstream(name="creative-agent", url=httpx.URL(url))
            for tenant, url in (("a", url_a), ("b", url_b))
        }
        answers = {}
        for tenant, agent in agents.items():

            async def call(tenant: str = tenant) -> dict[str, Any]:
                return {"formats": [f"private-format-of-{tenant}"]}

            answers[tenant] = await cache.fetch(agent, "formats", call, surface=formats)
        assert answers["b"] == {"formats": ["private-format-of-b"]}, (url_b, answers)


@pytest.mark.timeout(30)
async def test_review31_a_cold_outage_in_a_task_group_fan_out_is_service_unavailable() -> None:
    """REVIEW 31 defect: the cold-outage answer (middleware.__call__: ``except
    UpstreamUnavailable``) misses the same exception raised from a fan-out in an
    ``asyncio.TaskGroup`` (or anyio's), which arrives as an ExceptionGroup: the buyer gets the
    text/plain 500 with a traceback that issue 31 asked to be an AdCP SERVICE_UNAVAILABLE.
    Fanning out to several upstreams is the shape the guide's request budget is for."""
    if not hasattr(asyncio, "TaskGroup"):
        pytest.skip("asyncio.TaskGroup needs Python 3.11")
    cache = UpstreamCache(surfaces=Surfaces.of(PRODUCTS))
    formats_agent = Upstream(name="creative-agent")

    async def down() -> Any:
        raise ConnectionRefusedError

    async def up() -> Any:
        return {"formats": []}

    async def route(request: Request) -> JSONResponse:
        await request.body()
        async with asyncio.TaskGroup() as fan_out:
            products = fan_out.create_task(cache.fetch(INVENTORY, "all", down))
            fan_out.create_task(cache.fetch(formats_agent, "all", up))
        return JSONResponse({"products": products.result()})

    app = FastAPI()
    app.add_api_route("/api/get_products", route, methods=["POST"])
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=cache.surfaces)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        answer = await http.post("/api/get_products", json={})
    assert answer.status_code == 503, (answer.status_code, answer.text[:100])
    assert answer.json()["adcp_error"]["code"] == "SERVICE_UNAVAILABLE"


@pytest.mark.timeout(30)
async def test_review31_a_request_joining_a_longer_flight_keeps_its_budget() -> None:
    """REVIEW 31 defect: the budget bounds a call only through the timeout of the flight a
    request starts (admission: ``timeout = min(timeout, budget)``); a request that joins a
    flight already running for its key (Flights.fly -> SingleFlight.run) awaits that flight
    whole, under the starter's deadline. A refresh started without a request (a start-up
    warm, CacheControl.refresh, refresh_soon: the full upstream deadline) against a frozen
    upstream then holds a buyer whose budget is 0.3 s, with a stale entry to serve, for the
    whole 2 s deadline."""

    from adcp_stale_cache import collect_advisories

    surface = SurfacePolicy(
        name="get_signals", field="signals", freshness_target_seconds=0, max_stale_seconds=3600,
        upstream_timeout_seconds=2.0, request_budget_seconds=0.3, shared_across_callers=True,
    )  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(surface), breaker=None)
    frozen = asyncio.Event()

    async def call() -> dict[str, Any]:
        if frozen.is_set():
            await asyncio.sleep(30)
        return {"signals": ["s"]}

    await cache.fetch(AGENT, "segments", call, surface=surface)  # warm
    frozen.set()
    warm_again = asyncio.ensure_future(cache.fetch(AGENT, "segments", call, surface=surface))
    await asyncio.sleep(0.05)  # that refresh is in flight, with the full 2 s deadline
    started = time.monotonic()
    with collect_advisories(surface) as advisories:
        value = await cache.fetch(AGENT, "segments", call, surface=surface)
    took = time.monotonic() - started
    assert value == {"signals": ["s"]} and advisories.errors()
    assert took < 0.3 + 0.3, f"a 0.3 s budget answered after {took:.2f} s"
    await asyncio.gather(warm_again, return_exceptions=True)


@pytest.mark.timeout(60)
def test_review31_fetch_blocking_asks_a_recovered_upstream_within_cooldown_and_deadline() -> None:
    """REVIEW 31 defect (docs claim): docs/guide.md says a recovered upstream is called again
    within the breaker's cooldown and one deadline, "whatever the runtime". Through
    ``fetch_blocking`` it is not while the calls abandoned during the freeze still hold the
    lane's threads (blocking.Lane: "a call abandoned at its deadline keeps its thread until
    it returns", i.e. until the client's own timeout, 30 s in examples/signals_agent.py):
    every new call, the breaker's probe included, waits for a thread past its deadline and
    never runs, so the upstream stays unasked and every answer stale for the client's
    timeout, not cooldown + deadline. Here the stuck calls return after 4 s."""
    import threading

    from adcp_stale_cache import collect_advisories
    from adcp_stale_cache.pipeline.breaker import BreakerPolicy

    cooldown, deadline, stuck_for = 0.3, 0.3, 4.0
    surface = SurfacePolicy(
        name="get_signals", field="signals", freshness_target_seconds=0, max_stale_seconds=3600,
        upstream_timeout_seconds=deadline, shared_across_callers=True,
    )  # fmt: skip
    cache = UpstreamCache(
        surfaces=Surfaces.of(surface), blocking_threads=2,
        breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=cooldown),
    )  # fmt: skip
    frozen = threading.Event()

    def post() -> dict[str, Any]:  # a requests call: a frozen one returns at its own timeout
        if frozen.is_set():
            time.sleep(stuck_for)
            raise TimeoutError("read timed out")
        return {"signals": ["s"]}

    def request(spec: str = "auto") -> list[dict[str, Any]]:
        with collect_advisories(surface) as advisories:
            cache.fetch_blocking(AGENT, ("segments", spec), post, surface=surface)
        return advisories.errors()

    specs = ["auto", "travel", "finance", "sports"]
    for spec in specs:
        assert request(spec) == []
    frozen.set()
    with __import__("concurrent.futures").futures.ThreadPoolExecutor(4) as buyers:
        list(buyers.map(request, specs))  # the lane's 2 threads now stuck
    frozen.clear()
    recovered = time.monotonic()
    settled = settled_answers(request, recovered, cooldown + deadline, 0.5)
    assert settled and all(errors == [] for errors in settled), (
        f"{sum(1 for e in settled if e)} of {len(settled)} answers past cooldown + deadline "
        "were stale"
    )


@pytest.mark.parametrize(
    ("parts", "skill", "sdk_runs"),
    [
        # ``input`` only: the adcp SDK server hands the skill ``parameters`` or {}, never ``input``
        (
            [{"data": {"skill": "get_signals", "input": {"principal_id": "victim"}}}],
            "get_signals",
            {},
        ),
        # a DataPart and a TextPart, each an invocation: the installed SDK (adcp 9.2,
        # a2a_server._default_parse_request) scans both alike and fails closed on two
        (
            [
                {"text": '{"skill": "get_signals", "parameters": {"principal_id": "victim"}}'},
                {"data": {"skill": "get_signals", "parameters": {"principal_id": "caller"}}},
            ],
            None,
            {},
        ),
        # parameters that are not an object: the SDK hands the skill {}
        ([{"data": {"skill": "get_signals", "parameters": ["victim"]}}], "get_signals", {}),
    ],
    ids=["input-not-parameters", "text-and-data-parts", "parameters-not-an-object"],
)
def test_review31_a2a_partition_reads_the_arguments_the_skill_gets(
    parts: list[Any], skill: str | None, sdk_runs: dict[str, Any]
) -> None:
    """REVIEW 31 defect (security, differential parsing): ToolCall.arguments for A2A are
    documented as "the A2A DataPart's parameters", what the skill runs with, and
    partition_from_call keys the caller's entries by them. codecs.jsonrpc.a2a_call read
    them differently from the adcp SDK server it claims to follow (adcp/server/a2a_server.py
    ``_default_parse_request``): it fell back to ``input`` (the SDK hands the skill {}).
    The hook then names a principal other than the one the skill serves (or none): a
    caller can steer which partition its answer is read from and stored in. (The review's
    second case expected the DataPart to win over a TextPart; the installed SDK runs
    neither: both are invocations, and two fail closed, as a2a_call reads them.)"""
    from adcp_stale_cache.codecs import parse_calls

    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"role": "user", "messageId": "m", "parts": parts}}}  # fmt: skip
    [call] = parse_calls(json.dumps(body).encode())
    assert call.surface == skill
    assert (call.arguments or {}) == sdk_runs


@pytest.mark.timeout(30)
async def test_review31_an_advisory_dropped_at_delivery_counts_as_lost() -> None:
    """REVIEW 31 defect (observability): issue 31 asked that a stale serve whose advisory no
    request carried be logged and counted apart from a delivered one. Only a serve with no
    collector at all counts in ``advisory_lost`` (serving._advisory_lost); one recorded in a
    collector and then dropped at delivery (an answer that is not JSON, a status or content
    type that cannot carry it; AdvisoryMiddleware's isError or non-JSON tool result) counts in
    ``advisories_total`` as one that "will reach the buyer" (metrics.stale_serve) and only
    logs ``advisories_not_delivered``: a dashboard on advisories_lost_total shows 0 while
    buyers get stale data unannounced."""
    from starlette.responses import PlainTextResponse

    metrics = CountingMetrics()
    surface = PRODUCTS.model_copy(update={"freshness_target_seconds": 0})
    cache = UpstreamCache(surfaces=Surfaces.of(surface), metrics=metrics)
    state = {"up": True}

    async def load() -> Any:
        if not state["up"]:
            raise ConnectionRefusedError
        return {"products": ["p1"]}

    async def route(request: Request) -> PlainTextResponse:  # a text answer from the data
        products = (await cache.fetch(INVENTORY, "all", load))["products"]
        return PlainTextResponse(", ".join(products))

    app = FastAPI()
    app.add_api_route("/api/get_products", route, methods=["POST"])
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=cache.surfaces)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        await http.post("/api/get_products", json={})
        state["up"] = False
        stale = await http.post("/api/get_products", json={})
    assert stale.text == "p1"  # stale data, no advisory anywhere in the answer
    assert (metrics.delivered, metrics.lost) == (0, 1)


@pytest.mark.timeout(30)
async def test_review31_a_stdlib_urllib_4xx_is_not_an_outage() -> None:
    """REVIEW 31 defect: "failures of any client mean something", and a 4xx is the caller's
    problem, not an outage (failures._explicit, for requests' HTTPError, also an OSError).
    The stdlib's ``urllib.error.HTTPError`` (``urlopen``: the other blocking client sellers
    use) is not read for its status (``urllib`` is not in failures._HTTP_CLIENTS, HTTPError
    is not a bare type): being an OSError it falls to the transport rules as
    CONNECTION_ERROR, whatever its code. So a 404 is an outage: re-raised as
    UpstreamUnavailable (or served stale), and counted by the breaker: a buyer asking for
    a few unknown ids opens the breaker, and every other key is served stale; a 503 or 429
    loses its code and Retry-After."""
    import http.client
    import urllib.error

    from adcp_stale_cache.pipeline.breaker import BreakerPolicy

    cache = UpstreamCache(
        surfaces=Surfaces.of(PRODUCTS), breaker=BreakerPolicy(failure_threshold=3)
    )

    async def not_found() -> Any:
        raise urllib.error.HTTPError(
            "https://inventory/p/x", 404, "Not Found", http.client.HTTPMessage(), None
        )

    for unknown in range(5):
        with pytest.raises(urllib.error.HTTPError):  # the caller's 404, as it came
            await cache.fetch(INVENTORY, ("product", unknown), not_found, surface=PRODUCTS)
    assert not cache.breaker_open(INVENTORY), "five 404s opened the breaker"
    headers = http.client.HTTPMessage()
    headers["Retry-After"] = "7"
    unavailable = urllib.error.HTTPError("https://inventory/", 503, "Unavailable", headers, None)
    assert classify(unavailable).code == "UPSTREAM_HTTP_503"


@pytest.mark.timeout(30)
def test_review31_a_templated_surface_path_is_matched_or_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """REVIEW 31 defect: surface ``paths`` are matched literally per request
    (middleware._surface_at), but the start-up check (routes.serves) matches them with the
    route's regex, so a path declared as the route is written, ``/api/{tenant}/get_products``,
    "is served" (the literal ``{tenant}`` matches ``[^/]+``): no ``surface_unserved`` at
    start-up, while no request ever reaches the surface (each falls to the default policy:
    its freshness, no ``field``). Issue 31 asked that such a surface be reported when the
    app starts."""
    import logging

    from starlette.testclient import TestClient

    from adcp_stale_cache import current_collector

    templated = SurfacePolicy(
        name="get_products", field="products", paths=("/api/{tenant}/get_products",)
    )
    seen: list[str | None] = []
    app = FastAPI()

    @app.post("/api/{tenant}/get_products")
    async def get_products(tenant: str) -> dict[str, Any]:
        collector = current_collector()
        seen.append(None if collector is None or collector.surface is None else "matched")
        return {"products": []}

    app.add_middleware(StaleAdvisoryMiddleware, surfaces=Surfaces.of(templated))
    with caplog.at_level(logging.INFO), TestClient(app) as client:
        client.post("/api/acme/get_products", json={})
    reported = any("surface_unserved" in r.getMessage() for r in caplog.records)
    assert seen == ["matched"] or reported, "neither matched nor reported at start-up"
