"""The benchmark suite: ``python -m bench [--quick] [--json PATH]`` from a checkout.

Every figure is a ratio of two things measured side by side in the same run (interleaved
rounds, median per-operation time), so drift on a shared machine cancels out. Needs the
``bench`` extra (hishel, cashews, aiocache) and, for the Redis figure, a ``redis-server``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime
import gc
import json
import logging
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import httpx
import orjson

from adcp_stale_cache import (
    CachingTransport,
    MemoryStore,
    SharedJsonCodec,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)
from adcp_stale_cache.asgi.middleware import route_path
from adcp_stale_cache.asgi.peek import MAX_PEEK_BYTES
from adcp_stale_cache.codecs import inject_json
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.keys import caller_partition
from adcp_stale_cache.demo.data import products
from adcp_stale_cache.integrations.httpx_transport import DEFAULT_VARY_HEADERS
from adcp_stale_cache.pipeline.collector import (
    STATE_KEY,
    AdvisoryCollector,
    enter_request,
    leave_request,
)
from adcp_stale_cache.pipeline.context import UNREAD, RequestContext
from adcp_stale_cache.pipeline.singleflight import call_with_deadline

Op = Callable[[], Awaitable[Any]]
POLICY = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",),
                       freshness_target_seconds=3600, max_stale_seconds=3600)  # fmt: skip
SURFACES = Surfaces.of(POLICY)
ADVISORY = [{"code": "STALE_RESPONSE", "message": "m", "field": "products",
             "details": {"served_from_cache": True, "cache_age_seconds": 12}}]  # fmt: skip


async def per_op(op: Op, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await op()
    return (time.perf_counter() - started) / n


async def side_by_side(a: Op, b: Op, n: int, rounds: int) -> tuple[float, float]:
    """Seconds per operation of ``a`` and of ``b``, measured in interleaved pairs.

    ``rounds * 5`` pairs of ``n / 5`` operations each, in ABBA order. A pair runs both sides
    within a few milliseconds of each other, so the median of the per-pair ratios is the
    figure: a shared machine's slow spells hit both sides of a pair alike. ``a`` is reported
    as its median time; ``b`` as that divided by the median ratio, so ``a / b`` is exactly
    the paired estimate.
    """
    size = max(1, n // 5)
    await per_op(a, max(1, n // 10))
    await per_op(b, max(1, n // 10))
    times_a, ratios = [], []
    for pair in range(rounds * 5):
        if pair % 2:
            time_b = await per_op(b, size)
            time_a = await per_op(a, size)
        else:
            time_a = await per_op(a, size)
            time_b = await per_op(b, size)
        times_a.append(time_a)
        ratios.append(time_a / time_b)
    median_a = statistics.median(times_a)
    return median_a, median_a / statistics.median(ratios)


def asgi_caller(app: Any, body: bytes = b"{}") -> Op:
    """One in-process POST /api/get_products through ``app`` (no sockets)."""
    scope = {"type": "http", "method": "POST", "path": "/api/get_products", "headers": [(b"content-type", b"application/json")],
             "query_string": b"", "http_version": "1.1", "scheme": "http", "server": ("b", 80), "root_path": ""}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    async def call() -> None:
        await app(dict(scope), receive, send)

    return call


def json_app() -> Any:
    """A plain JSON seller route (Starlette), answering 10 products from memory."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    items = products(10)

    async def get_products(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"products": items})

    return Starlette(routes=[Route("/api/get_products", get_products, methods=["POST"])])


def passthrough_ops() -> tuple[Op, Op]:
    """One request to the bare JSON app, and to the same app behind the middleware (no
    advisory: the pass-through path)."""
    bare = json_app()
    wrapped = StaleAdvisoryMiddleware(bare, surfaces=SURFACES)
    return asgi_caller(bare), asgi_caller(wrapped)


_LEAST_REQUEST: ContextVar[tuple[Any, ...] | None] = ContextVar("least_request", default=None)


class LeastLayer:
    """The least any layer doing the middleware's job does per request, for the pass-through's
    floor: the route's surface found (one dict look), the request's own advisories reachable
    through a ContextVar and the scope's state (as an ``mcp`` 1.x tool finds them), the request
    body kept as it passes (its ``context`` and release pins), ``send`` wrapped to see the
    answer start."""

    def __init__(self, app: Any, surfaces: Any) -> None:
        self.app = app
        self.by_path = {path: policy for policy in surfaces.policies for path in policy.paths}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        surface = self.by_path.get(scope["path"])
        advisories: list[Any] = []
        body: list[bytes] = []
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        state["advisories"] = request = (surface, advisories, body)
        token = _LEAST_REQUEST.set(request)

        async def kept() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
            return message

        async def watched(message: Any) -> None:
            if message["type"] == "http.response.start" and advisories:
                raise NotImplementedError("the floor never has advisories to add")
            await send(message)

        try:
            await self.app(scope, kept, watched)
        finally:
            _LEAST_REQUEST.reset(token)


class JobFloorLayer:
    """The least a layer doing the middleware's whole documented job does per request: the
    least layer's work, and what the library and its users are promised besides.

    - Other scopes passed through; a route's surface found without the app's ``root_path``.
    - The collector the cache's API reads (an ``AdvisoryCollector``), at ``request.state``
      and in the ContextVar, still at ``request.state`` once the request ends.
    - Its context (a ``RequestContext``): the route's surface, the request's fields read off
      the body kept as it passes (up to a bound; parsed once it has all passed, ``UNREAD``
      before that or if it is not JSON),
      the caller's partition asked of the live scope on first use.
    - The answer's start checked for advisories and for a served ``context``, and the end for
      a ``context`` served after the start.
    - The collector closed as the request ends: what is recorded later counts as lost.
    - The request's objects freed as it ends, not by the garbage collector, while a partition
      asked late still reads the scope: a copy of it, less the collector.

    Closures where the middleware makes objects (its body reader and its answer); ``send``
    handed the downstream's own awaitable, as the middleware's is. Not done: JSON-RPC calls
    read off the body, the responders that write advisories, the 503 of an outage, the
    ``partition_from_call`` hook: none runs on a declared route with nothing to add."""

    def __init__(self, app: Any, surfaces: Any, limit: int = MAX_PEEK_BYTES) -> None:
        self.app = app
        self.limit = limit
        self.by_path = {path: policy for policy in surfaces.policies for path in policy.paths}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        root = scope.get("root_path")
        surface = self.by_path.get(route_path(scope) if root else scope["path"])
        body: list[Any] = [0]  # its size, then its messages' bodies as they pass
        whole = [False]  # its last message passed
        live = [scope]  # the scope a partition is asked of: a copy once the request ends
        context = RequestContext(
            surface,
            None,
            lambda: caller_partition(live[0]),
            lambda name: _field(body, name, self.limit) if whole[0] else UNREAD,
        )
        collector = AdvisoryCollector(None, None, None, True, context)
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        state[STATE_KEY] = collector
        token = enter_request(collector)

        async def kept() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                body[0] += len(chunk)
                if body[0] <= self.limit:
                    body.append(chunk)
                whole[0] = not message.get("more_body", False)
            return message

        def watched(message: Any) -> Any:
            if message["type"] == "http.response.start" and (
                collector.unsettled or collector.trace.served_context
            ):
                raise NotImplementedError("the floor never has advisories to add")
            return send(message)

        try:
            await self.app(scope, kept, watched)
        finally:
            leave_request(token)
            collector.close()
            late = dict(scope)
            late["state"] = (
                {k: v for k, v in state.items() if k != STATE_KEY} if len(state) > 1 else {}
            )
            live[0] = late
        if collector.trace.served_context:
            raise NotImplementedError("the floor never serves a context")


def _field(body: list[Any], name: str, limit: int) -> Any:
    """A field of the request's body, parsed once (kept as ``body[1]`` in place of its parts)."""
    if body[0] >= 0:  # not parsed yet
        try:
            request = orjson.loads(b"".join(body[1:]) or b"{}") if body[0] <= limit else None
        except orjson.JSONDecodeError:
            request = None
        body[:] = [-1, request]
    request = body[1]
    return request.get(name) if isinstance(request, dict) else UNREAD


async def passthrough(n: int, rounds: int) -> dict[str, float]:
    bare, wrapped = passthrough_ops()
    t_bare, t_wrapped = await side_by_side(bare, wrapped, n, rounds)
    t_bare2, t_least = await side_by_side(
        bare, asgi_caller(LeastLayer(json_app(), SURFACES)), n, rounds
    )
    t_bare3, t_job = await side_by_side(
        bare, asgi_caller(JobFloorLayer(json_app(), SURFACES)), n, rounds
    )
    return {"passthrough_ratio": t_bare / t_wrapped,  # requests/s with / without
            "least_layer_passthrough_ratio": t_bare2 / t_least,
            "job_floor_passthrough_ratio": t_bare3 / t_job}  # fmt: skip


def uvicorn_passthrough(requests: int, rounds: int) -> dict[str, float]:
    """The same over real uvicorn servers on loopback, each in its own process."""
    from adcp_stale_cache.demo.processes import free_port, wait_for_port

    code = ("import sys, orjson, uvicorn; sys.path.insert(0, '.'); from bench.__main__ import json_app, SURFACES;"
            "from adcp_stale_cache import StaleAdvisoryMiddleware;"
            "app = json_app();"
            "app = StaleAdvisoryMiddleware(app, surfaces=SURFACES) if sys.argv[2] == '1' else app;"
            "uvicorn.run(app, host='127.0.0.1', port=int(sys.argv[1]), log_level='error', access_log=False)")  # fmt: skip
    ports, procs = [], []
    for wrapped in ("0", "1"):
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-c", code, str(port), wrapped]))
        ports.append(port)
    try:
        for port in ports:
            wait_for_port(port)

        async def load(port: int) -> float:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", limits=httpx.Limits(max_connections=16)
            ) as client:

                async def worker(count: int) -> None:
                    for _ in range(count):
                        (await client.post("/api/get_products", content=b"{}")).raise_for_status()

                started = time.perf_counter()
                await asyncio.gather(*(worker(requests // 16) for _ in range(16)))
                return (time.perf_counter() - started) / requests

        async def rounds_of() -> tuple[float, float]:
            bare, wrapped = [], []
            for _ in range(rounds):
                bare.append(await load(ports[0]))
                wrapped.append(await load(ports[1]))
            return statistics.median(bare), statistics.median(wrapped)

        t_bare, t_wrapped = asyncio.run(rounds_of())
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
    return {"passthrough_ratio_uvicorn": t_bare / t_wrapped}


def validator_app() -> Any:
    """An upstream answering about 79 KB of products as a Starlette service does, building
    its JSON per answer: ``/etag`` tags answers with the data's version (and answers 304 to
    a matching If-None-Match without building the body), ``/plain`` has no validators
    (every refresh is a full 200)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    data = {"products": products(95)}  # 79 KB as JSON
    tag = '"v1"'  # the data's version, as a service stamps its rows

    async def etag(request: Request) -> Response:
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"ETag": tag})
        return JSONResponse(data, headers={"ETag": tag})

    async def plain(request: Request) -> Response:
        return JSONResponse(data)

    return Starlette(routes=[Route("/etag", etag), Route("/plain", plain)])


def revalidate_304(requests: int, rounds: int) -> dict[str, float]:
    """A refresh answered 304 against a full 200 refresh of the same 79 KB entry, through
    CachingTransport to a real uvicorn upstream on loopback (its own process). Target 0: each
    request refreshes."""
    from adcp_stale_cache.demo.processes import free_port, wait_for_port

    code = ("import sys, uvicorn; sys.path.insert(0, '.'); from bench.__main__ import validator_app;"
            "uvicorn.run(validator_app(), host='127.0.0.1', port=int(sys.argv[1]),"
            " log_level='error', access_log=False)")  # fmt: skip
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)])
    try:
        wait_for_port(port)
        always = SurfacePolicy(name="get_products", freshness_target_seconds=0)
        cache = UpstreamCache(surfaces=Surfaces.of(always), breaker=None)
        transport = CachingTransport(cache, Upstream(name="inv"), surface="get_products")

        async def measure() -> tuple[float, float, float, float]:
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, transport=transport) as client, \
                    httpx.AsyncClient(base_url=base) as bare:  # fmt: skip
                await client.get("/etag")
                await client.get("/plain")
                t_304, t_full = await side_by_side(
                    lambda: client.get("/etag"), lambda: client.get("/plain"), requests, rounds
                )
                # The floor: the same 304 with no cache at all (a bare conditional GET), so
                # what is left of the ratio past it is the network's, not ours.
                tag = {"If-None-Match": '"v1"'}
                t_bare, t_full2 = await side_by_side(
                    lambda: bare.get("/etag", headers=tag), lambda: client.get("/plain"),
                    requests, rounds,
                )  # fmt: skip
                # The job's floor: the least cache that does a 304 refresh's whole job.
                least = JobFloor304Transport(httpx.AsyncHTTPTransport())
                async with httpx.AsyncClient(base_url=base, transport=least) as job_floor:
                    await job_floor.get("/etag")
                    t_job, t_full3 = await side_by_side(
                        lambda: job_floor.get("/etag"), lambda: client.get("/plain"),
                        requests, rounds,
                    )  # fmt: skip
                return t_304 / t_full, t_bare / t_full2, t_bare * 1e6, t_job / t_full3

        ratio, floor, bare_us, job_floor = asyncio.run(measure())
    finally:
        proc.terminate()
        proc.wait()
    return {"revalidate_304_vs_full_refresh": ratio, "bare_304_vs_full_refresh": floor,
            "job_floor_304_vs_full_refresh": job_floor, "bare_304_us": bare_us}  # fmt: skip


async def inject(n: int, rounds: int) -> dict[str, float]:
    out = {}
    # Product counts giving bodies of about 1 KB, 100 KB and 1 MB (875 B, 100 KB, 1.0 MB).
    for label, count in (("1k", 1), ("100k", 120), ("1m", 1200)):
        body = orjson.dumps({"products": products(count), "context": {"correlation_id": "c"}})

        async def ours(body: bytes = body) -> None:
            inject_json(body, ADVISORY)

        async def floor(body: bytes = body) -> None:
            orjson.dumps(orjson.loads(body))

        t_ours, t_floor = await side_by_side(ours, floor, max(5, n // (count * 5)), rounds)
        out[f"inject_ratio_{label}"] = t_ours / t_floor
    from adcp_stale_cache.codecs import RpcCall, RpcEventStream

    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "structuredContent": {"products": products(120)},  # 100 KB
            "content": [],
            "isError": False,
        },
    }
    event = b"event: message\r\ndata: " + orjson.dumps(message) + b"\r\n\r\n"

    async def sse() -> None:
        stream = RpcEventStream(RpcCall("mcp", 1, "get_products"), lambda: ADVISORY, lambda _: None)
        stream.feed(event)

    async def sse_floor() -> None:
        orjson.dumps(orjson.loads(event[22:-4]))

    t_ours, t_floor = await side_by_side(sse, sse_floor, max(5, n // 200), rounds)
    out["inject_ratio_mcp_sse_100k"] = t_ours / t_floor
    return out


TRANSPORT_URL = "http://inventory.internal/products"


def upstream_handler(request: httpx.Request) -> httpx.Response:
    """The in-memory upstream of the transport figures: three products as JSON."""
    return httpx.Response(200, content=_UPSTREAM_BODY, headers={"content-type": "application/json"})


_UPSTREAM_BODY = orjson.dumps({"products": products(3)})


VALIDATED_URL = "http://inventory.internal/validated"
_VALIDATED_BODY = orjson.dumps({"products": products(95)})  # 79 KB, as validator_app's


def validated_handler(request: httpx.Request) -> httpx.Response:
    """The in-memory upstream of the counted 304: 79 KB of products tagged "v1", a 304
    (no body) to a request naming the tag."""
    if request.headers.get("if-none-match") == '"v1"':
        return httpx.Response(304, headers={"etag": '"v1"'})
    return httpx.Response(200, content=_VALIDATED_BODY,
                          headers={"content-type": "application/json", "etag": '"v1"'})  # fmt: skip


async def revalidate_ops() -> tuple[Op, Op]:
    """A refresh answered 304 through ``CachingTransport`` (target 0: each call revalidates
    its held 79 KB answer), and the floor: the same conditional GET, no cache, to the same
    in-memory upstream."""
    always = SurfacePolicy(name="get_products", freshness_target_seconds=0)
    cache = UpstreamCache(surfaces=Surfaces.of(always), breaker=None)
    upstream = httpx.MockTransport(validated_handler)
    ours = httpx.AsyncClient(transport=CachingTransport(
        cache, Upstream(name="inv"), transport=upstream, surface="get_products"))  # fmt: skip
    floor = httpx.AsyncClient(transport=upstream)
    await ours.get(VALIDATED_URL)
    tag = {"If-None-Match": '"v1"'}
    return lambda: ours.get(VALIDATED_URL), lambda: floor.get(VALIDATED_URL, headers=tag)


class DictCachingTransport(httpx.AsyncBaseTransport):
    """A caching transport of a few lines, beside the transport hit: a dict looked up by
    method and URL, each hit's response built by httpx from the stored bytes."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport
        self.stored: dict[tuple[str, str], tuple[int, list[tuple[bytes, bytes]], bytes]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = (request.method, str(request.url))
        held = self.stored.get(key)
        if held is None:
            response = await self.transport.handle_async_request(request)
            held = (response.status_code, response.headers.raw, await response.aread())
            self.stored[key] = held
        status, headers, body = held
        return httpx.Response(status, headers=headers, content=body)


class JobFloor304Transport(httpx.AsyncBaseTransport):
    """The least caching transport that does a 304 refresh's whole job, beside ours.

    - GET and POST answers kept as bytes (as a store shared by processes keeps them) under a
      key of method, URL, body and each credential header by name (principals apart), their
      transfer headers and cookies left out; each stamped, and a fresh one answered as held.
    - One flight per key, outliving a caller's cancellation; its call in a task of its own
      under a deadline.
    - A held 2xx asked again with its validators in place of the caller's own; a 304 naming
      it (its ETag, weakly) renews it, its headers merged; one naming another is asked again
      whole.
    - An outage (5xx, 429, a transport error, the deadline) served from the held answer
      within a max-stale bound, which an error never replaces; a no-store answer never kept;
      a cookie handed to the request whose call received it alone; every answer read
      already.

    Nothing else: no breaker, purges, labels, metrics, advisories, Vary learning,
    Cache-Control's other directives or negative caching.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        timeout: float = 10.0,
        fresh_for: float = 0,
        max_stale: float = 3600,
    ) -> None:
        self.transport, self.timeout, self.fresh_for = transport, timeout, fresh_for
        self.max_stale = max_stale
        self.stored: dict[tuple[Any, ...], tuple[float, bytes]] = {}
        self.flights: dict[tuple[Any, ...], asyncio.Future[_Flown]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method not in ("GET", "POST"):
            return await self.transport.handle_async_request(request)
        credentials = dict.fromkeys(_CREDENTIALS, b"")
        for name, value in request.headers.raw:
            name = name.lower()
            if name in credentials:
                credentials[name] = credentials[name] + b"\n" + value
        key = (request.method, str(request.url), await request.aread(), *credentials.values())
        held = self.stored.get(key)
        if held is not None and time.monotonic() - held[0] < self.fresh_for:
            return _handed(*_parsed(held[1]))
        flight = self.flights.get(key)
        if flight is None:
            flight = self.flights[key] = asyncio.ensure_future(self._refresh(request, key))
            flight.add_done_callback(lambda _: self.flights.pop(key, None))
        status, headers, body, maker, cookies = await asyncio.shield(flight)
        return _handed(status, [*headers, *cookies] if maker is request else headers, body)

    async def _refresh(self, request: httpx.Request, key: tuple[Any, ...]) -> _Flown:
        stored = self.stored.get(key)
        held = _parsed(stored[1]) if stored is not None else None
        since = stored[0] if stored is not None else 0.0
        outgoing = request
        if held is not None and 200 <= held[0] < 300:
            validators = [(_ASKS[k.lower()], v) for k, v in held[1] if k.lower() in _ASKS]
            if validators:  # on the request's own stream, read already: the least httpx builds
                mine = [(k, v) for k, v in request.headers.raw if k.lower() not in _ASKED]
                outgoing = httpx.Request(request.method, request.url, headers=mine + validators,
                                         stream=request.stream, extensions=request.extensions)  # fmt: skip
                outgoing.read()
        try:
            response = await call_with_deadline(lambda: self._call(outgoing), self.timeout)
            if held is not None and outgoing is not request and response.status_code == 304:
                if _etag_of(response.headers.raw) in (None, _etag_of(held[1])):
                    updates = [(k, v) for k, v in response.headers.raw if k.lower() not in _KEPT]
                    names = {k.lower() for k, _ in updates}
                    merged = [(k, v) for k, v in held[1] if k.lower() not in names] + updates
                    return self._write(key, request, held[0], merged, held[2])
                response = await call_with_deadline(lambda: self._call(request), self.timeout)
            if response.status_code >= 500 or response.status_code == 429:
                raise ConnectionError(response.status_code)
        except (httpx.TransportError, OSError, TimeoutError):  # an outage
            if held is None or time.monotonic() - since > self.max_stale:
                raise
            return held[0], held[1], held[2], request, []  # stale, the held answer kept
        raw = response.headers.raw
        if (
            not response.is_success
            or response.status_code == 206
            or any(k.lower() == b"cache-control" and b"no-store" in v.lower() for k, v in raw)
        ):  # passed through, never stored
            return response.status_code, raw, response.content, request, []
        return self._write(key, request, response.status_code, raw, response.content)

    def _write(
        self, key: tuple[Any, ...], request: httpx.Request, status: int,
        headers: list[tuple[bytes, bytes]], body: bytes,
    ) -> _Flown:  # fmt: skip
        kept = [(k, v) for k, v in headers if k.lower() not in _NOT_KEPT]
        cookies = [(k, v) for k, v in headers if k.lower() in _COOKIES]  # its maker's
        head = orjson.dumps([status, [[k.decode("latin-1"), v.decode("latin-1")] for k, v in kept]])
        self.stored[key] = (time.monotonic(), b"".join((struct.pack(">I", len(head)), head, body)))
        return status, kept, body, request, cookies

    async def _call(self, request: httpx.Request) -> httpx.Response:
        response = await self.transport.handle_async_request(request)
        await response.aread()
        await response.aclose()
        return response


# A flight's answer: status, headers, body, the request that made the call, its cookies.
_Flown = tuple[int, list[tuple[bytes, bytes]], bytes, httpx.Request, list[tuple[bytes, bytes]]]
_ASKS = {b"etag": b"if-none-match", b"last-modified": b"if-modified-since"}
_ASKED = frozenset(_ASKS.values())
_COOKIES = frozenset((b"set-cookie", b"set-cookie2"))
_TRANSFER = frozenset((b"content-length", b"content-encoding", b"transfer-encoding", b"connection"))
_NOT_KEPT = _TRANSFER | _COOKIES
_KEPT = _TRANSFER | {b"content-type"}  # as stored, never taken from a 304
_CREDENTIALS = frozenset(name.encode() for name in DEFAULT_VARY_HEADERS)


def _etag_of(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    values = [v for k, v in headers if k.lower() == b"etag"]
    return b", ".join(values).strip().removeprefix(b"W/") if values else None


def _parsed(data: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    (size,) = struct.unpack_from(">I", data)
    status, named = orjson.loads(data[4 : 4 + size])
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in named]
    return status, headers, data[4 + size :]


def _handed(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
    if body and not any(k.lower() == b"content-length" for k, _ in headers):
        headers = [*headers, (b"Content-Length", b"%d" % len(body))]
    response = httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))
    response._content = body  # read already, as the library's own responses are
    response.elapsed = datetime.timedelta(0)
    response.is_stream_consumed = response.is_closed = True
    return response


async def transport_ops() -> tuple[Op, Op]:
    """A fresh hit through ``CachingTransport`` (its entry stored), and the floor: the same
    httpx call to an in-memory ``MockTransport``."""
    floor = httpx.AsyncClient(transport=httpx.MockTransport(upstream_handler))
    cache = UpstreamCache(surfaces=SURFACES)
    ours = httpx.AsyncClient(transport=CachingTransport(
        cache, Upstream(name="inv"), transport=httpx.MockTransport(upstream_handler),
        surface="get_products"))  # fmt: skip
    await ours.get(TRANSPORT_URL)
    return lambda: ours.get(TRANSPORT_URL), lambda: floor.get(TRANSPORT_URL)


async def transport_hit(n: int, rounds: int) -> dict[str, float]:
    hit, floor = await transport_ops()
    t_ours, t_floor = await side_by_side(hit, floor, n, rounds)
    out = {"transport_hit_vs_floor": t_ours / t_floor}
    in_dict = httpx.AsyncClient(
        transport=DictCachingTransport(httpx.MockTransport(upstream_handler))
    )
    await in_dict.get(TRANSPORT_URL)
    t_dict, t_floor2 = await side_by_side(lambda: in_dict.get(TRANSPORT_URL), floor, n, rounds)
    out["dict_cache_hit_vs_floor"] = t_dict / t_floor2
    handler, url = upstream_handler, TRANSPORT_URL

    from hishel.httpx import AsyncCacheTransport

    storage = await _hishel_storage()
    client = httpx.AsyncClient(
        transport=AsyncCacheTransport(httpx.MockTransport(handler), storage=storage)
    )
    await client.get(url)
    t_hishel, t_ours2 = await side_by_side(lambda: client.get(url), hit, max(50, n // 10), rounds)
    out["hishel_vs_transport_hit"] = t_hishel / t_ours2
    return out


async def _hishel_storage() -> Any:
    """hishel 2.0's SQLite storage on an in-memory database, its fastest. (Its
    ``database_path=":memory:"`` would be a file of that name under .cache/hishel.)"""
    import anysqlite
    import hishel

    connection = await anysqlite.connect(":memory:", isolation_level=None)
    return hishel.AsyncSqliteStorage(connection=connection)


async def wrapper_ops() -> dict[str, Op]:
    """Fresh hits (each warmed): ``ours`` through ``cache.fetch`` (default codec: a fresh
    copy per caller), ``ours_shared`` with ``SharedJsonCodec``, ``cashews`` 7's ``@cache``
    (mem://) and ``aiocache``'s ``@cached`` (memory), all of one small value."""
    from cashews import Cache

    cache = UpstreamCache(surfaces=SURFACES)
    upstream = Upstream(name="inv")
    value = {"products": products(3)}

    async def call() -> dict[str, Any]:
        return value

    cashews = Cache()
    cashews.setup("mem://")

    @cashews(ttl="1h")
    async def cashews_call() -> dict[str, Any]:
        return value

    from aiocache import Cache as AioCache
    from aiocache import cached

    @cached(ttl=3600, cache=AioCache.MEMORY)  # type: ignore[misc]
    async def aiocache_call() -> dict[str, Any]:
        return value

    async def ours() -> None:
        await cache.fetch(upstream, "k", call, surface="get_products")

    shared_codec: SharedJsonCodec[Any] = SharedJsonCodec()

    async def ours_shared() -> None:  # read-only callers: no copy per hit
        await cache.fetch(upstream, "k", call, surface="get_products", codec=shared_codec)

    ops: dict[str, Op] = {"ours": ours, "ours_shared": ours_shared, "cashews": cashews_call,
                          "aiocache": aiocache_call}  # fmt: skip
    for op in ops.values():
        await op()
    return ops


async def wrapper_hit(n: int, rounds: int) -> dict[str, float]:
    ops = await wrapper_ops()
    ours, ours_shared, cashews_call, aiocache_call = (
        ops["ours"], ops["ours_shared"], ops["cashews"], ops["aiocache"])  # fmt: skip
    t_ours, t_cashews = await side_by_side(ours, cashews_call, n, rounds)
    t_shared, t_cashews2 = await side_by_side(ours_shared, cashews_call, n, rounds)
    t_ours2, t_aio = await side_by_side(ours, aiocache_call, n, rounds)
    from adcp_stale_cache.core.values import JSON

    stored = JSON.dumps({"products": products(3)})  # the value every side hands out

    async def decode_alone() -> None:  # the default codec's floor: a fresh copy per caller
        JSON.loads(stored)

    t_decode, t_cashews3 = await side_by_side(decode_alone, cashews_call, n, rounds)
    return {
        "wrapper_hit_us": t_ours * 1e6,
        "cashews_vs_wrapper_hit": t_cashews / t_ours,
        "cashews_vs_decode_alone": t_cashews3 / t_decode,
        "wrapper_hit_shared_us": t_shared * 1e6,
        "cashews_vs_wrapper_hit_shared": t_cashews2 / t_shared,
        "aiocache_vs_wrapper_hit": t_aio / t_ours2,
    }


async def outage(n: int, rounds: int) -> dict[str, float]:
    """A seller whose upstream hangs, breaker open, against the same seller answering hits."""

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    logging.getLogger("adcp_stale_cache").setLevel(logging.ERROR)

    def seller(target: int) -> tuple[Any, UpstreamCache, dict[str, bool]]:
        policy = POLICY.model_copy(
            update={"freshness_target_seconds": target, "upstream_timeout_seconds": 0.05}
        )
        cache = UpstreamCache(surfaces=Surfaces.of(policy))
        state = {"hung": False}

        async def call() -> dict[str, Any]:
            if state["hung"]:
                await asyncio.sleep(10)
            return {"products": products(3)}

        async def get_products(request: Any) -> JSONResponse:
            return JSONResponse(await cache.fetch(Upstream(name="inv"), "k", call))

        routes = [Route("/api/get_products", get_products, methods=["POST"])]
        return (
            StaleAdvisoryMiddleware(Starlette(routes=routes), surfaces=Surfaces.of(policy)),
            cache,
            state,
        )

    healthy, _, _ = seller(3600)
    hung, hung_cache, state = seller(0)
    await asgi_caller(healthy)()
    await asgi_caller(hung)()  # warm
    state["hung"] = True
    for _ in range(3):  # three timeouts open the breaker
        await asgi_caller(hung)()
    assert hung_cache.breaker_open("inv")
    t_stale, t_hit = await side_by_side(asgi_caller(hung), asgi_caller(healthy), n, rounds)
    return {"outage_vs_hit_p50": t_stale / t_hit}


async def stampede(callers: int) -> dict[str, float]:
    """Upstream calls made when ``callers`` ask at once for a key whose entry just expired."""
    from cashews import Cache

    calls = {"ours": 0, "cashews": 0, "hishel": 0}
    skew = [0.0]  # moved past the entry's target below: the store's own clock stays
    cache = UpstreamCache(
        MemoryStore(), surfaces=SURFACES, clock=lambda: time.monotonic() + skew[0]
    )

    async def ours_call() -> dict[str, Any]:
        calls["ours"] += 1
        await asyncio.sleep(0.05)
        return {"products": []}

    def fetch() -> Awaitable[Any]:
        return cache.fetch(Upstream(name="inv"), "k", ours_call, surface="get_products")

    await fetch()  # the entry, then past its target: every caller needs a refresh
    skew[0] = POLICY.freshness_target_seconds + 1
    calls["ours"] = 0
    await asyncio.gather(*(fetch() for _ in range(callers)))

    cashews = Cache()
    cashews.setup("mem://")

    @cashews(ttl=0.05)
    async def cashews_call() -> dict[str, Any]:
        calls["cashews"] += 1
        await asyncio.sleep(0.05)
        return {"products": []}

    await cashews_call()
    await asyncio.sleep(0.1)  # expired
    calls["cashews"] = 0
    await asyncio.gather(*(cashews_call() for _ in range(callers)))

    from hishel.httpx import AsyncCacheTransport

    # hishel kept serving its entry past max-age here (it reported from_cache after expiry),
    # so it is measured on a cold key instead: the same 1,000 callers, nothing cached yet.
    async def handler(request: httpx.Request) -> httpx.Response:
        calls["hishel"] += 1
        await asyncio.sleep(0.05)
        headers = {"content-type": "application/json", "cache-control": "max-age=3600"}
        return httpx.Response(200, content=b'{"products": []}', headers=headers)

    storage = await _hishel_storage()
    async with httpx.AsyncClient(
        transport=AsyncCacheTransport(httpx.MockTransport(handler), storage=storage)
    ) as client:
        url = "http://inventory.internal/products"
        await asyncio.gather(*(client.get(url) for _ in range(callers)))
    return {
        "stampede_upstream_calls": calls["ours"],
        "stampede_cashews_calls": calls["cashews"],
        "stampede_hishel_cold_calls": calls["hishel"],
    }


async def memory(entries: int) -> dict[str, float]:
    payload = b"x" * 2048
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = MemoryStore(max_entries=entries * 2, max_bytes=entries * 4096)
    for i in range(entries):
        data = bytes(bytearray(payload))  # a distinct object per entry, as real answers are
        await store.set(f"adcp-stale-cache:inv:{i:032x}", Entry(data, 0.0), 3600)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    small = MemoryStore(max_bytes=100 * (2048 + 200))
    for i in range(1000):
        await small.set(str(i), Entry(payload, 0.0), 3600)
    assert small.bytes <= small.max_bytes
    return {"memory_per_entry_ratio": used / entries / len(payload)}


async def redis_hit(n: int, rounds: int) -> dict[str, float]:
    if shutil.which("redis-server") is None:
        return {}
    from adcp_stale_cache.stores.redis import RedisStore

    from .redis_curves import redis_server

    with redis_server() as url:
        ratio = await hit_vs_memory_hit(RedisStore(url=url), n, rounds)
    return {"redis_hit_vs_memory_hit": ratio}


async def hit_vs_memory_hit(store: Any, n: int, rounds: int) -> float:
    """A ``cache.fetch`` hit from ``store`` / the same hit from the memory store."""
    caches = UpstreamCache(store, surfaces=SURFACES), UpstreamCache(surfaces=SURFACES)
    value = {"products": products(3)}

    async def call() -> dict[str, Any]:
        return value

    up = Upstream(name="inv")
    for cache in caches:
        await cache.fetch(up, "k", call, surface="get_products")
        await cache.fetch(up, "k", call, surface="get_products")  # warm (a reader opened)
    t_store, t_memory = await side_by_side(
        *(lambda c=cache: c.fetch(up, "k", call, surface="get_products") for cache in caches),
        n, rounds)  # fmt: skip
    return t_store / t_memory


async def thread_hop_floor(n: int, rounds: int) -> float:
    """The floor of any read in a store's thread: a memory hit plus one bare hop to a
    one-thread pool and back (what ``SqliteStore(read_on_loop=False)`` adds before SQLite
    reads) / the same memory hit."""
    cache = UpstreamCache(surfaces=SURFACES)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    value = {"products": products(3)}

    async def call() -> dict[str, Any]:
        return value

    up = Upstream(name="inv")
    await cache.fetch(up, "k", call, surface="get_products")

    async def hit() -> object:
        return await cache.fetch(up, "k", call, surface="get_products")

    async def hop_and_hit() -> object:
        await loop.run_in_executor(pool, int)
        return await hit()

    t_hop, t_hit = await side_by_side(hop_and_hit, hit, n, rounds)
    pool.shutdown()
    return t_hop / t_hit


async def file_hit(n: int, rounds: int) -> dict[str, float]:
    """The file store (SQLite, no memory tier in front) against memory, and against hishel on
    a SQLite file, each a transport hit; and how long a restarted process takes to answer
    stale from the file (open the file, one stale serve)."""
    import tempfile

    import anysqlite
    import hishel
    from hishel.httpx import AsyncCacheTransport

    from adcp_stale_cache.stores.sqlite import SqliteStore

    logging.getLogger("adcp_stale_cache").setLevel(logging.ERROR)  # the restarts serve stale
    out: dict[str, float] = {}
    body = orjson.dumps({"products": products(3)})

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(f"{folder}/ours.db", read_on_loop=False)  # the thread's hop
        out["file_hit_vs_memory_hit"] = await hit_vs_memory_hit(store, n, rounds)
        out["thread_hop_vs_memory_hit"] = await thread_hop_floor(n, rounds)
        on_loop = SqliteStore(f"{folder}/ours.db", read_on_loop=True)
        out["file_hit_on_loop_vs_memory_hit"] = await hit_vs_memory_hit(on_loop, n, rounds)
        on_loop.close()
        up = Upstream(name="inv")
        file_cache = UpstreamCache(store, surfaces=SURFACES)
        ours = httpx.AsyncClient(transport=CachingTransport(
            file_cache, up, transport=httpx.MockTransport(handler), surface="get_products"))  # fmt: skip
        connection = await anysqlite.connect(f"{folder}/hishel.db", isolation_level=None)
        theirs = httpx.AsyncClient(transport=AsyncCacheTransport(
            httpx.MockTransport(handler), storage=hishel.AsyncSqliteStorage(connection=connection)))  # fmt: skip
        url = "http://inventory.internal/products"
        await ours.get(url)
        await theirs.get(url)
        t_hishel, t_ours = await side_by_side(
            lambda: theirs.get(url), lambda: ours.get(url), max(50, n // 10), rounds)  # fmt: skip
        out["hishel_vs_file_hit"] = t_hishel / t_ours
        await connection.close()

        policy = POLICY.model_copy(update={"freshness_target_seconds": 0})

        async def down() -> dict[str, Any]:
            raise ConnectionRefusedError

        restarts = []
        for _ in range(max(3, rounds)):
            started = time.perf_counter()
            restarted = UpstreamCache(
                SqliteStore(f"{folder}/ours.db"), surfaces=Surfaces.of(policy)
            )
            await restarted.fetch(up, "k", down, surface=policy)
            restarts.append(time.perf_counter() - started)
            restarted.store.close()  # type: ignore[attr-defined]
        out["restart_to_first_stale_ms"] = statistics.median(restarts) * 1000
        store.close()
    return out


async def wholesale_probe(n: int, rounds: int) -> dict[str, float]:
    """A matching ``if_wholesale_feed_version`` probe against the full wholesale answer of
    100 products, through the example seller in process (its REST route; the inventory
    service in process too, both answered from the cache)."""
    from adcp_stale_cache.demo.inventory_service import create_inventory_app
    from adcp_stale_cache.demo.seller import create_seller_app

    inventory = httpx.ASGITransport(app=create_inventory_app(count=100))
    seller = create_seller_app(creative_agents={}, inventory_url="http://inventory",
                               freshness_target=3600, inventory_transport=inventory)  # fmt: skip
    # The seller's MCPServer configures the root logger at INFO (mcp's own basicConfig): the
    # figures after this one would log a line per request of httpx's, a cost on both sides.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    account = {"brand": {"domain": "acmeoutdoor.example"}, "operator": "o.example"}
    request = {"buying_mode": "wholesale", "account": account,
               "context": {"correlation_id": "bench"}}  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=seller),
                                 base_url="http://seller") as http:  # fmt: skip
        bootstrap = (await http.post("/api/get_products", json=request)).json()
    assert len(bootstrap["products"]) == 100
    probe = {**request, "if_wholesale_feed_version": bootstrap["wholesale_feed_version"]}
    full = asgi_caller(seller, json.dumps(request).encode())
    unchanged = asgi_caller(seller, json.dumps(probe).encode())
    probe_s, full_s = await side_by_side(unchanged, full, n, rounds)
    return {"unchanged_probe_vs_full_answer": probe_s / full_s,
            "wholesale_full_answer_us": full_s * 1e6}  # fmt: skip


TARGETS = {
    "passthrough_ratio": ">= 0.97", "passthrough_ratio_uvicorn": ">= 0.97",
    "inject_ratio_1k": "<= 1.5", "inject_ratio_100k": "<= 1.5", "inject_ratio_1m": "<= 1.5", "inject_ratio_mcp_sse_100k": "<= 1.5",
    "least_layer_passthrough_ratio": "(floor)", "job_floor_passthrough_ratio": "(floor)",
    "transport_hit_vs_floor": "<= 1.15", "dict_cache_hit_vs_floor": "(info)", "hishel_vs_transport_hit": ">= 4",
    "revalidate_304_vs_full_refresh": "<= 0.3", "bare_304_vs_full_refresh": "(floor)",
    "job_floor_304_vs_full_refresh": "(floor)", "bare_304_us": "(us)",
    "wrapper_hit_us": "(us)", "cashews_vs_wrapper_hit": ">= 10", "cashews_vs_decode_alone": "(floor)", "wrapper_hit_shared_us": "(us)",
    "cashews_vs_wrapper_hit_shared": ">= 10", "aiocache_vs_wrapper_hit": "(info)",
    "outage_vs_hit_p50": "<= 1.5", "stampede_upstream_calls": "1", "stampede_cashews_calls": "(info)", "stampede_hishel_cold_calls": "(info)",
    "memory_per_entry_ratio": "<= 1.3", "redis_hit_vs_memory_hit": "(info)",
    "file_hit_vs_memory_hit": "<= 3", "thread_hop_vs_memory_hit": "(floor)", "file_hit_on_loop_vs_memory_hit": "<= 3", "hishel_vs_file_hit": ">= 2",
    "restart_to_first_stale_ms": "(ms)",
    "unchanged_probe_vs_full_answer": "<= 0.2", "wholesale_full_answer_us": "(us)",
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small counts: proves the suite runs")
    parser.add_argument("--json", metavar="PATH", help="write the figures as one JSON object")
    parser.add_argument("--curves", action="store_true",
                        help="also how cost grows with the cache's size (bench/curves.py)")  # fmt: skip
    parser.add_argument("--instructions", action="store_true",
                        help="also the hot paths' instruction counts under valgrind (bench/instructions.py)")  # fmt: skip
    parser.add_argument("--check", metavar="BASELINE",
                        help="with --instructions: only the counts, failing on a regression past 3%% "
                             "against BASELINE (bench/instructions-baseline.json)")  # fmt: skip
    parser.add_argument("--write-baseline", metavar="PATH",
                        help="with --instructions: only the counts, recorded as a baseline")  # fmt: skip
    parser.add_argument("--allow-rise", metavar="REASON",
                        help="with --write-baseline: record the counts as measured, for REASON")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.check or args.write_baseline) and not args.instructions:
        parser.error("--check and --write-baseline go with --instructions")
    if args.check or args.write_baseline:  # the guard: the counts alone, no wall clock
        from . import instructions

        return instructions.run(args.check, args.write_baseline, args.json, args.allow_rise)
    n, rounds = (200, 3) if args.quick else (5000, 7)
    figures: dict[str, float] = {}

    async def measure() -> None:
        figures.update(await passthrough(n, rounds))
        figures.update(await inject(n, rounds))
        figures.update(await transport_hit(n, rounds))
        figures.update(await wrapper_hit(n * 4, rounds))
        figures.update(await outage(n, rounds))
        figures.update(await stampede(1000))
        figures.update(await memory(2000 if args.quick else 100_000))
        figures.update(await redis_hit(n, rounds))
        figures.update(await file_hit(n, rounds))
        figures.update(await wholesale_probe(n // 5, rounds))

    asyncio.run(measure())
    figures.update(uvicorn_passthrough(400 if args.quick else 4000, rounds))
    figures.update(revalidate_304(100 if args.quick else 1000, rounds))
    print(f"adcp-stale-cache benchmarks ({'quick' if args.quick else 'full'}) on {platform.machine()}, "
          f"Python {platform.python_version()}, {platform.processor() or 'cpu'}")  # fmt: skip
    print(f"{'figure':32} {'measured':>12}  target")
    for name, value in figures.items():
        print(f"{name:32} {value:12.3f}  {TARGETS.get(name, '')}")
    written: dict[str, Any] = dict(figures)
    if args.curves:
        from .curves import curves

        written["curves"] = measured = curves(args.quick)
        print(f"\n{'curve point':32} {'measured':>12}")
        for name, value in measured.items():
            print(f"{name:32} {value:12.3f}")
    if args.instructions:
        from . import instructions

        written["instructions"] = counted = instructions.measure(args.quick)
        instructions.report(counted)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(written, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
