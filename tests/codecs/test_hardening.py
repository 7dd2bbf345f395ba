"""Defects found by adversarial testing (issue 11): each test failed before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel, SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from adcp_stale_cache import (
    CachingTransport,
    MemoryStore,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.failures import classify
from adcp_stale_cache.core.keys import digest
from adcp_stale_cache.pipeline.breaker import BreakerPolicy

from ..conftest import CountingUpstream as Inventory
from ..conftest import FakeClock

INVENTORY = Upstream(name="inventory-service")
POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=1000
)
BREAKER = BreakerPolicy(failure_threshold=1, window_seconds=60, cooldown_seconds=30)


async def settle(cache: UpstreamCache) -> None:
    await asyncio.wait_for(asyncio.gather(*cache.flights.tasks, return_exceptions=True), timeout=10)


# 1. A probe taken by a request whose budget was already spent was never run nor released.
SLOW = Upstream(name="slow")


async def slow_answer() -> dict[str, Any]:
    await asyncio.sleep(0.06)
    return {"products": []}


async def test_spent_budget_never_takes_the_breaker_probe(clock: FakeClock) -> None:
    policy = POLICY.model_copy(update={"request_budget_seconds": 0.05})
    cache = UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(policy), clock=clock, breaker=BREAKER
    )
    up = Inventory()
    await cache.fetch(INVENTORY, "k", up, surface=policy)
    clock.advance(20)
    up.down = True
    with collect_advisories():
        await cache.fetch(INVENTORY, "k", up, surface=policy)  # fails: the breaker opens
    assert cache.breaker_open(INVENTORY.name)
    clock.advance(30)  # cooldown over
    with collect_advisories():
        await cache.fetch(SLOW, "k", slow_answer, surface=policy)  # spends the budget
        await cache.fetch(INVENTORY, "k", up, surface=policy)
    up.down = False
    with collect_advisories():  # the next caller must still get to probe
        await cache.fetch(INVENTORY, "k", up, surface=policy)
    await settle(cache)
    assert not cache.breaker_open(INVENTORY.name) and up.calls == 3


async def test_a_probe_cancelled_before_its_verdict_frees_the_slot(clock: FakeClock) -> None:
    cache = UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock, breaker=BREAKER
    )
    up = Inventory()
    up.down = True
    with contextlib.suppress(Exception):
        await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    clock.advance(30)
    hung = asyncio.Event()

    async def hangs() -> dict[str, Any]:
        await hung.wait()
        return {}

    probe = asyncio.ensure_future(cache.fetch(INVENTORY, "k", hangs, surface=POLICY))
    await asyncio.sleep(0.01)
    for task in cache.flights.flights.flights().values():
        task.cancel()  # the flight ends with no verdict (a loop shutting down, say)
    with contextlib.suppress(BaseException):
        await probe
    up.down = False
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    assert not cache.breaker_open(INVENTORY.name)


class LeasedStore(MemoryStore):
    """A store shared by two 'processes' (two caches), with Redis-like refresh leases."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.held: set[str] = set()

    @contextlib.asynccontextmanager
    async def lease(self, key: str, seconds: float) -> AsyncIterator[bool]:
        if key in self.held:
            yield False
            return
        self.held.add(key)
        try:
            yield True
        finally:
            self.held.discard(key)

    async def lease_active(self, key: str) -> bool:
        return key in self.held


# 2. A probe that lost the refresh lease to another process never reported to its breaker.
async def test_probe_answered_by_another_process_closes_the_breaker(clock: FakeClock) -> None:
    store = LeasedStore(clock)

    def process() -> UpstreamCache:
        return UpstreamCache(
            store, surfaces=Surfaces.of(POLICY), clock=clock, breaker=BREAKER,
            coordinate_refreshes=True,
        )  # fmt: skip

    a, b = process(), process()
    up = Inventory()
    await a.fetch(INVENTORY, "k", up, surface=POLICY)
    clock.advance(20)
    up.down = True
    with collect_advisories():
        await a.fetch(INVENTORY, "k", up, surface=POLICY)
    assert a.breaker_open(INVENTORY.name)
    clock.advance(30)
    up.down = False
    released = asyncio.Event()

    async def slow_recovery() -> dict[str, Any]:
        await released.wait()
        return await up()

    other = asyncio.ensure_future(b.fetch(INVENTORY, "k", slow_recovery, surface=POLICY))
    await asyncio.sleep(0.01)  # b holds the lease
    with collect_advisories():
        await a.fetch(INVENTORY, "k", up, surface=POLICY)  # a's probe waits for b's refresh
    clock.advance(0.5)
    released.set()
    await other
    await settle(a)
    assert not a.breaker_open(INVENTORY.name)
    clock.advance(20)
    calls = up.calls
    assert await a.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [calls + 1]}


async def test_breaker_cooldown_ignores_a_wall_clock_stepped_back() -> None:
    step = [0.0]
    store = MemoryStore()
    store.clock = lambda: time.time() + step[0]  # a shared store's wall clock
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY), breaker=BreakerPolicy(
        failure_threshold=1, window_seconds=60, cooldown_seconds=0.05))  # fmt: skip
    up = Inventory()
    up.down = True
    with contextlib.suppress(Exception):
        await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    assert cache.breaker_open(INVENTORY.name)
    step[0] = -3600.0  # NTP steps the clock back an hour
    await asyncio.sleep(0.06)
    up.down = False
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    assert not cache.breaker_open(INVENTORY.name)


# 3. Behind a root path, the surface was not found and the default policy (shared) applied.
@pytest.mark.parametrize("how", ["mount", "root_path"])
async def test_surface_found_behind_a_path_prefix_and_unknown_never_widens_sharing(
    how: str,
) -> None:
    private = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
    surfaces = Surfaces.of(
        private, default=SurfacePolicy(name="default", shared_across_callers=True)
    )
    cache = UpstreamCache(surfaces=surfaces)

    async def get_products(request: Request) -> JSONResponse:
        who = request.headers["authorization"]

        async def call() -> dict[str, Any]:
            return {"products": [who]}

        collector = request.scope["state"]["adcp_stale_cache"]
        seen.append(collector.surface.name if collector.surface else None)
        return JSONResponse(await cache.fetch(INVENTORY, "all", call))

    async def unknown(request: Request) -> JSONResponse:
        who = request.headers["authorization"]

        async def call() -> dict[str, Any]:
            return {"products": [who]}

        return JSONResponse(await cache.fetch(INVENTORY, "other", call))

    seen: list[str | None] = []
    inner = Starlette(
        routes=[Route("/api/get_products", get_products, methods=["POST"]),
                Route("/api/unknown", unknown, methods=["POST"])]
    )  # fmt: skip
    if how == "mount":
        app: Any = Starlette(
            routes=[Mount("/seller", StaleAdvisoryMiddleware(inner, surfaces=surfaces))]
        )
        root = ""
    else:
        app, root = StaleAdvisoryMiddleware(inner, surfaces=surfaces), "/seller"
    transport = httpx.ASGITransport(app=app, root_path=root)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as client:
        for who in ("alice", "bob"):
            answer = await client.post("/seller/api/get_products", headers={"authorization": who})
            assert answer.json() == {"products": [who]}
            answer = await client.post("/seller/api/unknown", headers={"authorization": who})
            assert answer.json() == {"products": [who]}  # default is shared, but not identified
    assert seen == ["get_products", "get_products"]


# 4. Distinct keys collided: repr() masks secrets, and non-string dict keys were stringified.
class Principal(BaseModel):
    token: SecretStr


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Principal(token=SecretStr("alice")), Principal(token=SecretStr("bob"))),
        (httpx.Headers({"authorization": "alice"}), httpx.Headers({"authorization": "bob"})),
        ({1: "x"}, {"1": "x"}),
    ],
    ids=["secretstr", "httpx-headers", "int-vs-str-dict-key"],
)
async def test_distinct_keys_never_share_an_entry(first: Any, second: Any) -> None:
    cache = UpstreamCache()
    calls: list[Any] = []

    @cache.cached(INVENTORY)
    async def products(principal: Any) -> dict[str, Any]:
        calls.append(principal)
        return {"products": [len(calls)]}

    try:
        assert await products(first) == {"products": [1]}
    except TypeError as exc:  # refused, clearly: never guessed
        assert "exact cache key" in str(exc)
        return
    assert await products(second) == {"products": [2]}  # its own answer, not the first's
    assert await products(first) == {"products": [1]}  # and a real hit for the first


def test_unkeyable_values_are_refused_with_a_clear_error() -> None:

    for value in (object(), {1: "x"}, float("nan"), {"a": {2}}):
        with pytest.raises(TypeError, match="exact cache key"):
            digest([value])
    one, one_float, true, none = (digest([v]) for v in (1, 1.0, True, None))
    assert len({one, one_float, true, none, digest([[1]]), digest(["1"]), digest([b"1"])}) == 7


def test_repeated_credential_headers_are_keyed_with_every_value_kept_apart() -> None:
    from adcp_stale_cache.core.keys import caller_partition

    def scope(*values: bytes) -> dict[str, Any]:
        return {"headers": [(b"authorization", v) for v in values]}

    joined, twice, last = (caller_partition(scope(*v)) for v in
                           ([b"alice, bob"], [b"alice", b"bob"], [b"bob"]))  # fmt: skip
    assert len({joined, twice, last}) == 3
    transport = CachingTransport(UpstreamCache(), INVENTORY)
    one = httpx.Request("GET", "http://i/", headers=[("authorization", "alice, bob")])
    two = httpx.Request(
        "GET", "http://i/", headers=[("authorization", "alice"), ("authorization", "bob")]
    )
    assert transport._varying(one) != transport._varying(two)


# 5. A 2xx that is not JSON (a maintenance page) was cached over the good entry.
@respx.mock
async def test_non_json_2xx_is_an_invalid_payload_not_a_new_entry(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    client = httpx.AsyncClient(transport=CachingTransport(cache, INVENTORY, surface=POLICY))
    route = respx.get("http://inventory.internal/products")
    route.mock(return_value=httpx.Response(200, json={"products": [1]}))
    await client.get("http://inventory.internal/products")
    clock.advance(11)
    route.mock(return_value=httpx.Response(200, text="<html>down for maintenance</html>"))
    with collect_advisories() as advisories:
        answer = await client.get("http://inventory.internal/products")
    assert answer.json() == {"products": [1]}
    assert advisories.errors()[0]["details"]["original_error"]["code"] == "INVALID_PAYLOAD"
    # An upstream that answers other types says so, and its answers are kept.
    plain = httpx.AsyncClient(
        transport=CachingTransport(cache, Upstream(name="csv"), surface=POLICY, expect_json=False)
    )
    respx.get("http://csv.internal/").mock(return_value=httpx.Response(200, text="a,b"))
    assert (await plain.get("http://csv.internal/")).text == "a,b"
    assert (await plain.get("http://csv.internal/")).text == "a,b"
    assert respx.get("http://csv.internal/").call_count == 1


# 6. Over the peek limit, the call is unknown: never written beside "jsonrpc", and said loudly.
async def test_oversized_json_rpc_request_is_never_injected_at_the_envelope(caplog: Any) -> None:
    surfaces = Surfaces.of(POLICY)

    async def mcp(request: Request) -> JSONResponse:
        await request.body()
        record_stale()
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {}}})

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/mcp", mcp, methods=["POST"])]),
                                  surfaces=surfaces, max_peek_bytes=1024)  # fmt: skip
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "get_products", "arguments": {"pad": "x" * 4096}}}  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        answer = await c.post("/mcp", json=big)
    assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {}}}
    assert any(
        r.levelno == logging.WARNING and "too large" in r.getMessage() for r in caplog.records
    )


async def test_oversized_plain_request_still_gets_its_advisory() -> None:
    async def upload(request: Request) -> JSONResponse:
        await request.body()
        record_stale()
        return JSONResponse({"products": []})

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/upload", upload, methods=["POST"])]),
                                  surfaces=Surfaces.of(POLICY), max_peek_bytes=1024)  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        answer = await c.post("/upload", json={"pad": "x" * 4096})
    assert [e["code"] for e in answer.json()["errors"]] == ["STALE_RESPONSE"]


def record_stale(name: str = "inventory-service") -> None:
    from adcp_stale_cache import current_collector, stale_response

    collector = current_collector()
    assert collector is not None
    collector.record(name, stale_response(Upstream(name=name), POLICY, 12, None))


# 7 and the JSON rewrites: what no re-encoding keeps passes through; lone surrogates survive.
@pytest.mark.parametrize(
    ("body", "injected"),
    [
        (b'{"products": ["\\ud83d"], "errors": []}', True),  # a truncated emoji
        (b'{"products": [NaN], "errors": []}', False),
        (b'{"products": [1e400], "errors": []}', False),
        (b'{"products": [0.123456789012345678901], "errors": []}', False),
        ('{"products": [], "errors": []}'.encode("utf-16"), False),
        (b'{"products": [12345678901234567890123], "errors": []}', True),
        (b'{"products": [NaN]}', True),  # no errors member: spliced, every byte kept
    ],
)
async def test_json_rewrite_is_exact_or_untouched(body: bytes, injected: bool) -> None:
    from adcp_stale_cache.codecs import Untouched, inject_json

    errors = [{"code": "STALE_RESPONSE", "message": "m"}]
    try:
        out = inject_json(body, errors)
    except Untouched:
        assert not injected
        return
    assert injected
    value = json.loads(out)
    assert value["errors"][-1] == errors[0]
    value.pop("errors")
    original = json.loads(body)
    original.pop("errors", None)
    assert json.dumps(value) == json.dumps(original)  # NaN and long integers included


async def test_lone_surrogate_in_an_mcp_sse_answer_keeps_the_stream_whole() -> None:
    from adcp_stale_cache.codecs import RpcCall, RpcEventStream

    message = (b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"products":["\\ud83d"]},'
               b'"content":[{"type":"text","text":"{\\"products\\": [\\"\\\\ud83d\\"]}"}]}}')  # fmt: skip
    stream = RpcEventStream(
        RpcCall("mcp", 1, "get_products"),
        lambda: [{"code": "STALE_RESPONSE", "message": "m"}],
        lambda reason: pytest.fail(reason),
    )
    out = stream.feed(b"event: message\r\ndata: " + message + b"\r\n\r\n") + stream.close()
    result = json.loads(out.split(b"data: ")[1])["result"]
    assert result["structuredContent"]["products"] == ["\ud83d"]
    assert result["structuredContent"]["errors"][0]["code"] == "STALE_RESPONSE"
    assert json.loads(result["content"][0]["text"])["errors"][0]["code"] == "STALE_RESPONSE"


# 8. Retry-After: inf (or NaN, 1e999) made service_unavailable() raise.
@pytest.mark.parametrize("value", ["inf", "Infinity", "1e999", "nan", "-5", "30"])
async def test_odd_retry_after_never_breaks_the_failure_answer(value: str) -> None:
    from adcp_stale_cache import UpstreamUnavailable, service_unavailable
    from adcp_stale_cache.core.failures import UpstreamError

    cache = UpstreamCache(surfaces=Surfaces.of(POLICY))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"retry-after": value})

    client = httpx.AsyncClient(transport=CachingTransport(
        cache, INVENTORY, surface=POLICY, transport=httpx.MockTransport(handler)))  # fmt: skip
    with pytest.raises(UpstreamUnavailable) as raised:
        await client.get("http://inventory.internal/products")
    error = service_unavailable(raised.value).to_dict()
    assert error.get("retry_after") == (30 if value == "30" else None)
    for hint in (float("inf"), float("nan"), 1e999, -1.0):  # from an adopter's own exception
        failure = classify(UpstreamError("SERVICE_UNAVAILABLE", retry_after=hint))
        retry = service_unavailable(UpstreamUnavailable(INVENTORY, failure)).retry_after
        assert retry in (None, 3600)


# 9. Corrupt shared values: an unreadable entry is no entry.
@pytest.mark.parametrize("corrupt", ["truncated", "foreign", "nan-time", "inf-time", "future"])
async def test_unreadable_stored_entries_are_refreshed_not_served(corrupt: str) -> None:
    from adcp_stale_cache.stores.redis import decode, encode

    payload = b'{"products": [0]}'
    good = encode(Entry(payload, time.time()))
    stamps = {"nan-time": float("nan"), "inf-time": float("inf"), "future": time.time() + 86400}
    raw = {"truncated": good[:-3], "foreign": good[:1] + b"\x00" * 20 + b"hello"}
    if corrupt in raw:
        assert decode(raw[corrupt]) is None  # the Redis side: never decoded
        bad = Entry(payload[:-3], time.time())  # and if a store still handed one over
    else:
        assert corrupt == "future" or decode(encode(Entry(payload, stamps[corrupt]))) is None
        bad = Entry(payload, stamps[corrupt])
    store = MemoryStore(clock=time.time)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY))
    up = Inventory()
    await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    [store_key] = [key for key, _ in await store.scan()]
    await store.set(store_key, bad, 3600)
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    assert up.calls == 2  # refreshed from the upstream, not served from the bad value


async def test_a_value_the_codec_cannot_read_is_no_entry(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = UpstreamCache(store, surfaces=Surfaces.of(POLICY), clock=clock)
    up = Inventory()
    await cache.fetch(INVENTORY, "k", up, surface=POLICY)
    [key] = [key for key, _ in await store.scan()]
    await store.set(key, Entry(b'{"products": [', clock()), 3600)  # truncated JSON
    assert await cache.fetch(INVENTORY, "k", up, surface=POLICY) == {"products": [2]}
    await store.set(key, Entry(b'{"products": [', clock() - 20), 3600)
    up.down = True
    with pytest.raises(UpstreamUnavailable):  # unreadable: no stale fallback either
        await cache.fetch(INVENTORY, "k", up, surface=POLICY)


# 10. A value built on stale data was stored fresh, and joiners got it with no advisory.
async def test_advisories_follow_a_value_through_nested_flights(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock,
                          breaker=None)  # fmt: skip
    catalogue = Upstream(name="catalogue")
    inner, outer_calls = Inventory(), []
    gate = asyncio.Event()

    async def outer() -> dict[str, Any]:
        outer_calls.append(1)
        await gate.wait()
        products = await cache.fetch(INVENTORY, "inner", inner, surface=POLICY)
        return {"page": products["products"]}

    await cache.fetch(INVENTORY, "inner", inner, surface=POLICY)
    clock.advance(11)
    inner.down = True
    gate.set()

    async def request() -> tuple[Any, list[dict[str, Any]]]:
        with collect_advisories() as advisories:
            value = await cache.fetch(catalogue, "outer", outer, surface=POLICY)
        return value, advisories.errors()

    gate.clear()
    first = asyncio.ensure_future(request())
    await asyncio.sleep(0.01)
    joined = asyncio.ensure_future(request())  # joins the outer flight
    await asyncio.sleep(0.01)
    gate.set()
    for value, errors in (await first, await joined):
        assert value == {"page": [1]}
        assert [e["details"]["upstream"]["name"] for e in errors] == ["inventory-service"]
    clock.advance(1)  # later, within the outer target: not served as fresh without advisory
    value, errors = await request()
    assert value == {"page": [1]} and len(errors) == 1 and len(outer_calls) == 2


# 11. An advisory recorded after the response started was lost without a word.
async def test_advisory_recorded_after_the_response_started_is_reported(caplog: Any) -> None:
    from starlette.responses import StreamingResponse

    async def stream(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"products": ['
            record_stale()  # the generator fetches as it streams
            yield b"1]}"

        return StreamingResponse(body(), media_type="application/json")

    surfaces = Surfaces.of(POLICY.model_copy(update={"paths": ("/api/get_products",)}))
    app = StaleAdvisoryMiddleware(
        Starlette(routes=[Route("/api/get_products", stream, methods=["POST"])]), surfaces=surfaces
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        answer = await c.post("/api/get_products")
    assert answer.json() == {"products": [1]}
    assert any(
        r.levelno == logging.WARNING and "after the response started" in r.getMessage()
        for r in caplog.records
    )


# Low: what the codec refuses is served, not cached, and never turned into a failure.
@pytest.mark.parametrize(
    "value",
    [decimal.Decimal("1.10"), {"ids": {1, 2}}, 2**70, {1: "x"}, {"price": float("nan")}],
    ids=["decimal", "set", "int-over-64-bits", "int-dict-key", "nan"],
)
async def test_values_the_codec_refuses_are_served_not_cached(value: Any) -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(POLICY))
    calls = []

    async def call() -> Any:
        calls.append(1)
        return value

    assert await cache.fetch(INVENTORY, "k", call, surface=POLICY) is value
    assert await cache.fetch(INVENTORY, "k", call, surface=POLICY) is value
    assert len(calls) == 2  # not cached: each fetch calls


def test_sse_splitter_scans_each_byte_a_bounded_number_of_times(monkeypatch: Any) -> None:
    from adcp_stale_cache.codecs import sse

    scanned = [0]
    real = sse._next_break

    def counting(buffer: Any, start: int) -> int:
        found = real(buffer, start)
        scanned[0] += (found if found >= 0 else len(buffer)) - start
        return found

    monkeypatch.setattr(sse, "_next_break", counting)
    event = b"event: message\r\ndata: " + b"x" * 1_000_000 + b"\r\n\r\n"
    splitter, events = sse.EventSplitter(), []
    for i in range(0, len(event), 1024):
        events += splitter.feed(event[i : i + 1024])
    assert events == [event]
    assert scanned[0] <= 2 * len(event)  # was ~500x: the whole buffer rescanned per chunk


def test_error_codes_as_metric_labels_are_bounded() -> None:
    from prometheus_client import CollectorRegistry

    from adcp_stale_cache.ops.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for i in range(5000):
        metrics.upstream_failure("agent", f"CODE_{i}")
        metrics.stale_serve("get_products", "agent", f"CODE_{i}", True)
    codes = {
        sample.labels["code"]
        for family in registry.collect()
        for sample in family.samples
        if "code" in sample.labels
    }
    assert len(codes) == 65 and "OTHER" in codes


@pytest.mark.parametrize("field", ["upstream_timeout_seconds", "request_budget_seconds"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e300])
def test_deadlines_must_be_finite_and_bounded(field: str, value: float) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        SurfacePolicy(name="s", **{field: value})
    with pytest.raises(ValidationError):
        Upstream(name="u", timeout_seconds=value)


async def test_two_surfaces_sharing_a_key_keep_the_longer_max_stale(clock: FakeClock) -> None:
    long = POLICY.model_copy(update={"name": "long", "max_stale_seconds": 1000})
    short = POLICY.model_copy(update={"name": "short", "max_stale_seconds": 5})
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(long, short),
                          clock=clock, breaker=None)  # fmt: skip
    up = Inventory()
    await cache.fetch(INVENTORY, "k", up, surface="long")
    clock.advance(11)
    await cache.fetch(INVENTORY, "k", up, surface="short")  # refreshed last, by the short one
    clock.advance(100)  # past short's bound, well within long's
    up.down = True
    with collect_advisories() as advisories:
        assert await cache.fetch(INVENTORY, "k", up, surface="long") == {"products": [2]}
    assert advisories.errors()[0]["details"]["cache_age_seconds"] == 100


MCP_ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"products":[]}}}'


@pytest.mark.parametrize("ending", [b"\r\r", b"", b"\n"], ids=["cr-only", "unterminated", "lf"])
def test_last_sse_event_is_rewritten_however_it_ends(ending: bytes) -> None:
    from adcp_stale_cache.codecs import RpcCall, RpcEventStream

    stream = RpcEventStream(
        RpcCall("mcp", 1, "get_products"),
        lambda: [{"code": "STALE_RESPONSE", "message": "m"}],
        lambda reason: pytest.fail(reason),
    )
    out = stream.feed(b"event: message\rdata: " + MCP_ANSWER + ending) + stream.close()
    data = out.split(b"data: ")[1].strip()
    assert json.loads(data)["result"]["structuredContent"]["errors"][0]["code"] == "STALE_RESPONSE"


def test_held_a2a_artifact_keeps_its_place_before_later_status_events() -> None:
    from adcp_stale_cache.codecs import RpcCall, RpcEventStream

    def sse(result: dict[str, Any]) -> bytes:
        return (
            b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode() + b"\n\n"
        )

    artifact = {"artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a",
                "parts": [{"data": {"products": []}}]}}}  # fmt: skip
    working = {"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}}}
    done = {"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_COMPLETED"}}}
    stream = RpcEventStream(
        RpcCall("a2a", 1, "get_products"),
        lambda: [{"code": "STALE_RESPONSE", "message": "m"}],
        lambda reason: pytest.fail(reason),
    )
    out = b"".join(stream.feed(sse(r)) for r in (artifact, working, done)) + stream.close()
    results = [json.loads(e[6:])["result"] for e in out.strip().split(b"\n\n")]
    assert [next(iter(r)) for r in results] == ["artifactUpdate", "statusUpdate", "statusUpdate"]
    assert results[1] == working
    assert results[0]["artifactUpdate"]["artifact"]["parts"][0]["data"]["errors"]


async def test_pathsend_after_a_buffered_start_still_sends_the_start(tmp_path: Any) -> None:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        record_stale()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.pathsend", "path": str(tmp_path / "f.json")})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    middleware = StaleAdvisoryMiddleware(app, surfaces=Surfaces.of(
        POLICY.model_copy(update={"paths": ("/api/get_products",)})))  # fmt: skip
    scope = {"type": "http", "method": "POST", "path": "/api/get_products", "headers": []}
    await middleware(scope, receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.pathsend"]


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"ADCP_STALE_CACHE_DEFAULTS__STALE_ON": ""}, "empty"),
        ({"ADCP_STALE_CACHE_STORE__REDIS_URL": "rediss//cache.internal:6380"}, "redis://"),
        ({"ADCP_STALE_CACHE_SURFACES__GET_PRODUCTS__MAX_STALE_SECONDS": "60"}, "ambiguous"),
    ],
)
def test_config_slips_are_one_line_errors(
    environ: dict[str, str], says: str, tmp_path: Any
) -> None:
    from adcp_stale_cache.ops.config import ConfigError, load_config

    path = tmp_path / "c.toml"
    path.write_text('[surfaces.get-products]\nfield = "products"\n[surfaces.get_products]\n')
    with pytest.raises(ConfigError, match=says):
        load_config(path, environ=environ)


def test_upstream_url_loses_path_parameters() -> None:
    upstream = Upstream(
        name="agent", url="https://u:p@agent.example/mcp;jsessionid=SECRET/x;v=1?t=1"
    )
    assert upstream.url == "https://agent.example/mcp/x"
