"""With ``partition_from_call``, the middleware reads the body ahead of the app: the hook
sees the call's arguments at the request's first fetch, however early, and a body it cannot
read (too large, a batch, not a JSON object) keys that request's entries apart, never shared."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    ToolCall,
    Upstream,
    UpstreamCache,
)

SIGNALS = SurfacePolicy(
    name="get_signals", field="signals", paths=("/api/get_signals",),
    freshness_target_seconds=300, max_stale_seconds=3600,
)  # fmt: skip
PLATFORM = Upstream(name="data-platform")


def _app(seen: list[ToolCall], asked: list[str]) -> Starlette:
    cache = UpstreamCache(surfaces=Surfaces.of(SIGNALS))

    def principal(call: ToolCall) -> str | None:  # None (shared) when no principal is named
        seen.append(call)
        named = (call.arguments or {}).get("principal_id")
        return None if named is None else f"principal:{named}"

    async def route(request: Request) -> JSONResponse:
        async def segments() -> dict[str, Any]:
            asked.append("asked")
            return {"signals": ["segment"]}

        answer = await cache.fetch(PLATFORM, "segments", segments)  # before the body is read
        return JSONResponse({**answer, "body_bytes": len(await request.body())})

    app = Starlette(routes=[Route("/api/get_signals", route, methods=["POST"])])
    app.add_middleware(
        StaleAdvisoryMiddleware,
        surfaces=Surfaces.of(SIGNALS),
        partition_from_call=principal,
        max_peek_bytes=1000,
    )
    return app


async def _post_twice(body: bytes) -> tuple[list[ToolCall], list[str], list[int]]:
    seen: list[ToolCall] = []
    asked: list[str] = []
    transport = httpx.ASGITransport(app=_app(seen, asked))
    sizes = []
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        for _ in range(2):
            answer = await http.post("/api/get_signals", content=body)
            sizes.append(answer.json()["body_bytes"])
    return seen, asked, sizes


@pytest.mark.timeout(30)
async def test_the_hook_sees_the_arguments_before_the_app_reads_them() -> None:
    body = b'{"principal_id": "A", "padding": "' + b"x" * 500 + b'"}'
    seen, asked, sizes = await _post_twice(body)
    assert [call.arguments and call.arguments["principal_id"] for call in seen] == ["A", "A"]
    assert asked == ["asked"]  # one principal, one entry
    assert sizes == [len(body)] * 2  # the app got its body, replayed whole


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "body",
    [
        b'{"principal_id": "A", "padding": "' + b"x" * 2000 + b'"}',  # past max_peek_bytes
        b'[{"principal_id": "A"}, {"principal_id": "B"}]',  # not one object
        b"principal_id=A",  # not JSON
    ],
    ids=["too-large", "not-an-object", "not-json"],
)
async def test_a_body_that_cannot_be_read_keys_its_entries_apart(body: bytes) -> None:
    seen, asked, sizes = await _post_twice(body)
    assert seen == []  # no principal can be told: the hook is not asked to guess
    assert asked == ["asked", "asked"], "two unreadable requests shared one entry"
    assert sizes == [len(body)] * 2
