"""The benchmark suite runs (quick mode) and writes every figure. No timing is asserted here:
speed is judged by the ratios the suite prints (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cashews", reason="the bench extra is needed")
pytest.importorskip("hishel", reason="the bench extra is needed")

ROOT = Path(__file__).resolve().parents[2]
FIGURES = [
    "passthrough_ratio", "passthrough_ratio_uvicorn", "inject_ratio_1k", "inject_ratio_100k", "inject_ratio_1m",
    "transport_hit_vs_floor", "hishel_vs_transport_hit", "wrapper_hit_us", "cashews_vs_wrapper_hit",
    "outage_vs_hit_p50", "stampede_upstream_calls", "memory_per_entry_ratio",
    "file_hit_vs_memory_hit", "thread_hop_vs_memory_hit", "hishel_vs_file_hit", "restart_to_first_stale_ms",
    "least_layer_passthrough_ratio", "job_floor_passthrough_ratio", "dict_cache_hit_vs_floor",
    "cashews_vs_decode_alone", "revalidate_304_vs_full_refresh", "bare_304_vs_full_refresh",
    "job_floor_304_vs_full_refresh",  # floors beside
]  # fmt: skip


def test_quick_bench_prints_the_table_and_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, "-m", "bench", "--quick", "--curves", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())
    for name in FIGURES:
        assert name in figures and figures[name] > 0, name
        assert name in run.stdout
    assert figures["stampede_upstream_calls"] == 1  # single-flight: 1,000 callers, one call
    curves = figures["curves"]  # how cost grows with size (quick: 1,000 and 10,000 entries)
    for n in (1000, 10000):
        assert curves[f"hit_us.memory.{n}"] > 0 and curves[f"memory_bytes_per_entry.{n}"] > 100
        assert f"hit_us.memory.{n}" in run.stdout
    stores = ["memory", "file", *(["redis"] if shutil.which("redis-server") else [])]
    for store in stores:
        for n in (1000, 10000):
            assert store == "memory" or curves[f"hit_us.{store}.{n}"] > 0, (store, n)
        # Purges by tag (quick: of 10,000 entries), and the 1% count in a cache 10x smaller.
        for point in ("0.01", "0.1", "100_of_1000", "100_of_10000"):
            assert curves[f"purge_tag_ms.{store}.{point}"] > 0, (store, point)
        assert curves[f"purge_tag_growth.{store}"] > 0
        assert f"purge_tag_ms.{store}.0.01" in run.stdout


def test_curve_entries_own_their_bytes_and_labels_as_fetched_entries_do() -> None:
    """The bytes-per-entry curve fills a store with copies of a model entry: each must own
    what a fetched entry owns (a fetch builds its labels anew), else the curve leaves out
    what every real entry costs besides its value."""
    import asyncio

    from bench import curves

    async def copies() -> tuple[object, list[object]]:
        cache, _ = await curves.filled(1)
        model = await curves.models(cache, tagged=False)
        made = [entry for _, entry in curves.entries(cache, 2, model, iter(range(2)))]
        return model[()], made

    model, made = asyncio.run(copies())
    for entry in made:
        assert entry.labels == model.labels and entry.data == model.data  # type: ignore[attr-defined]
        assert entry.data is not model.data  # type: ignore[attr-defined]
        assert entry.labels is not model.labels  # type: ignore[attr-defined]
        assert not any(a is b for a, b in zip(entry.labels, model.labels, strict=True))  # type: ignore[attr-defined]


def test_the_pass_through_job_floor_does_the_job_it_stands_for() -> None:
    """``job_floor_passthrough_ratio`` is a floor only while its layer does the middleware's
    documented job: one doing less would set the figure beside the target too high."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from adcp_stale_cache import Upstream, current_collector
    from adcp_stale_cache.core.advisory import stale_response
    from adcp_stale_cache.core.keys import caller_partition
    from adcp_stale_cache.pipeline.collector import STATE_KEY
    from adcp_stale_cache.pipeline.context import UNREAD
    from bench.__main__ import POLICY, SURFACES, JobFloorLayer

    from ..asgi.test_request_lifetime import cyclic_garbage

    seen: dict[str, Any] = {}

    async def route(request: Request) -> JSONResponse:
        await request.body()
        collector = current_collector()
        assert collector is not None and request.state.adcp_stale_cache is collector
        if request.query_params.get("keep"):  # (else the garbage check would see them held)
            seen["collector"], seen["scope"] = collector, request.scope
        seen["surface"] = collector.context.surface
        seen["brief"] = collector.context.request_field("brief")
        if request.query_params.get("stale"):
            collector.record(
                "inventory", stale_response(Upstream(name="inventory"), POLICY, 9, None)
            )
        return JSONResponse({"products": []})

    app = JobFloorLayer(Starlette(routes=[Route("/api/get_products", route, methods=["POST"])]),
                        SURFACES)  # fmt: skip

    async def ask(query: bytes = b"", root: str = "", body: bytes = b'{"brief": "b"}') -> None:
        scope = {"type": "http", "method": "POST", "path": f"{root}/api/get_products",
                 "root_path": root, "query_string": query,
                 "headers": [(b"host", b"seller.example")]}  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Any) -> None:
            pass

        await app(scope, receive, send)

    assert cyclic_garbage(ask) == []  # freed as it ends
    asyncio.run(ask(b"keep=1"))
    collector, scope = seen["collector"], seen["scope"]
    assert seen["surface"] is POLICY and seen["brief"] == "b"
    assert collector.closed and scope["state"][STATE_KEY] is collector
    assert collector.context.partition == caller_partition(scope)  # asked late, of a copy
    with pytest.raises(NotImplementedError):  # an advisory seen at the answer's start
        asyncio.run(ask(b"stale=1"))
    asyncio.run(ask(b"keep=1", root="/seller", body=b"not json"))  # mounted under a prefix
    assert seen["surface"] is POLICY and seen["brief"] is UNREAD
    passed: list[str] = []

    async def raw(scope: Any, receive: Any, send: Any) -> None:
        passed.append(scope["type"])

    asyncio.run(JobFloorLayer(raw, SURFACES)({"type": "lifespan"}, None, None))
    assert passed == ["lifespan"]


def test_the_304_job_floor_does_the_job_it_stands_for() -> None:
    """``job_floor_304_vs_full_refresh`` is a floor only while its transport does a 304
    refresh's whole job: one doing less would set the figure beside the target too low."""
    import httpx

    from bench.__main__ import JobFloor304Transport

    asked: list[str | None] = []
    hang, state = asyncio.Event(), {"etag": '"v1"', "down": False, "cookie": ""}

    async def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("if-none-match"))
        if request.url.path == "/hang":
            try:
                await hang.wait()
            except asyncio.CancelledError:
                await hang.wait()  # a client whose cleanup hangs: the call is abandoned
                raise
        await asyncio.sleep(0.01)  # long enough for callers to join the flight
        if state["down"]:
            return httpx.Response(503)
        if request.url.path == "/echo":
            named = [k for k in ("authorization", "x-api-key") if k in request.headers]
            return httpx.Response(200, content=request.content or ",".join(named).encode())
        cookie = [("Set-Cookie", state["cookie"])] if state["cookie"] else []
        etag = state["etag"]
        if request.headers.get("if-none-match") in ('"v1"', '"v2"'):
            return httpx.Response(304, headers=[("ETag", etag), ("X-Seen", str(len(asked))),
                                                *cookie])  # fmt: skip
        return httpx.Response(200, content=b'{"a": %d}' % len(asked), headers=[
            ("ETag", etag), ("Content-Type", "application/json"), ("X-Seen", "1"),
            ("Set-Cookie", "session=s"), ("Connection", "close")])  # fmt: skip

    async def gather(client: httpx.AsyncClient, n: int) -> list[httpx.Response]:
        return list(await asyncio.gather(*(client.get("/etag") for _ in range(n))))

    async def scenario() -> None:
        least = JobFloor304Transport(httpx.MockTransport(handler), timeout=0.2)
        async with httpx.AsyncClient(transport=least, base_url="http://up") as client:
            first = await client.get("/etag")
            assert first.json() == {"a": 1} and first.headers["set-cookie"] == "session=s"
            assert first.is_closed and first.elapsed.total_seconds() == 0  # read already
            client.cookies.clear()  # (sent back, it would key another principal's entry)
            ((_, held),) = least.stored.values()
            assert b"session" not in held and b"close" not in held  # never stored
            leaver = asyncio.ensure_future(client.get("/etag"))
            await asyncio.sleep(0)
            joined = [asyncio.ensure_future(client.get("/etag")) for _ in range(3)]
            await asyncio.sleep(0)
            leaver.cancel()  # the flight goes on for the others
            answers = await asyncio.gather(*joined)
            assert asked == [None, '"v1"']  # one conditional call for four callers
            for answer in answers:
                assert answer.json() == {"a": 1} and answer.headers["x-seen"] == "2"  # merged
            assert b'"2"' in next(iter(least.stored.values()))[1]  # and written back
            state["cookie"] = "rotated=r"  # a 304 setting a cookie: its call's maker's alone
            cookied = [a.headers.get("set-cookie") for a in await gather(client, 3)]
            assert cookied.count("rotated=r") == 1 and cookied.count(None) == 2
            client.cookies.clear()
            state["cookie"], state["etag"] = "", '"v2"'  # a 304 naming another: asked whole
            assert [a.json() for a in await gather(client, 1)] == [{"a": 5}]
            assert asked[-2:] == ['"v1"', None]
            client.cookies.clear()
            state["down"] = True  # an outage: served as held, the entry kept
            assert [a.json() for a in await gather(client, 1)] == [{"a": 5}]
            state["down"] = False
            started = asyncio.get_running_loop().time()
            with pytest.raises(TimeoutError):  # under its deadline, its cleanup left hanging
                await asyncio.wait_for(client.get("/hang"), 5)
            assert asyncio.get_running_loop().time() - started < 2
            hang.set()
        fresh = JobFloor304Transport(httpx.MockTransport(handler), fresh_for=60)
        async with httpx.AsyncClient(transport=fresh, base_url="http://up") as client:
            calls = len(asked)
            for _ in range(2):
                assert (await client.get("/etag")).status_code == 200
                client.cookies.clear()
            assert len(asked) == calls + 1  # fresh: answered from the bytes held
            bodies = [await client.post("/echo", content=b) for b in (b"alice", b"bob")]
            assert [b.text for b in bodies] == ["alice", "bob"]  # the body keys
            same = [await client.get("/echo", headers={name: "tok"})  # named, not by value
                    for name in ("Authorization", "X-Api-Key")]  # fmt: skip
            assert [a.text for a in same] == ["authorization", "x-api-key"]

    asyncio.run(scenario())


def test_the_304_job_floor_keeps_the_http_rules_it_claims() -> None:
    """The rest of the floor's job, each rule with a case that fails without it."""
    import httpx

    from bench.__main__ import JobFloor304Transport

    seen: list[httpx.Request] = []
    script: list[Any] = []  # what the upstream does next: a response, or an exception

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        step = script.pop(0) if script else httpx.Response(200, json={"n": len(seen)})
        if isinstance(step, Exception):
            raise step
        return step

    def ok(**headers: str) -> httpx.Response:
        return httpx.Response(200, json={"n": len(seen)}, headers=headers)

    async def scenario() -> None:
        least = JobFloor304Transport(httpx.MockTransport(handler), fresh_for=60)
        async with httpx.AsyncClient(transport=least, base_url="http://up") as client:
            # Principals: each credential's values, repeats and empty ones too.
            tokens = ([("Authorization", "alice")], [("Authorization", "bob")],
                      [("Authorization", ""), ("Authorization", "bob")])  # fmt: skip
            answers = [(await client.get("/p", headers=t)).json()["n"] for t in tokens]
            assert answers == [1, 2, 3]
        least = JobFloor304Transport(httpx.MockTransport(handler), max_stale=60)
        async with httpx.AsyncClient(transport=least, base_url="http://up") as client:
            script[:] = [ok(ETag='"v1"'), httpx.Response(304, headers={"ETag": 'W/"v1"'}),
                         httpx.Response(304)]  # fmt: skip
            first = (await client.get("/e")).json()
            caller = {"If-None-Match": '"mine"'}  # the held validator in place of the caller's
            assert (await client.get("/e", headers=caller)).json() == first  # weak: renewed
            assert seen[-1].headers.get_list("if-none-match") == ['"v1"']
            assert (await client.get("/e")).json() == first  # no ETag: renewed
            script[:] = [ok(**{"Last-Modified": "Wed, 21 Oct 2026 07:28:00 GMT"}),
                         httpx.Response(304)]  # fmt: skip
            dated = (await client.get("/d")).json()
            assert (await client.get("/d")).json() == dated
            assert seen[-1].headers["if-modified-since"] == "Wed, 21 Oct 2026 07:28:00 GMT"
            script[:] = [httpx.Response(404), httpx.Response(503),
                         httpx.ConnectError("refused"), httpx.Response(429)]  # fmt: skip
            assert (await client.get("/e")).status_code == 404  # passed through, not stored
            for _ in range(3):  # an outage of each kind: the held answer, kept
                assert (await client.get("/e")).json() == first
            script[:] = [ValueError("not an outage")]
            with pytest.raises(ValueError):
                await client.get("/e")
            script[:] = [ok(**{"Cache-Control": "No-Store"}), httpx.Response(503)]
            await client.get("/n")
            with pytest.raises(ConnectionError):  # never kept: nothing held to serve
                await client.get("/n")
            least.stored = {k: (t - 61, d) for k, (t, d) in least.stored.items()}
            script[:] = [httpx.Response(503)]
            with pytest.raises(ConnectionError):  # past max-stale: the outage stands
                await client.get("/e")

    asyncio.run(scenario())
