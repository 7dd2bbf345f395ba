"""The partition hook reads the call: a principal passed as a tool argument (the reference
signals agent's ``get_signals(principal_id=...)``) keys its own entries, over MCP (the
``mcp`` client), A2A (the ``a2a-sdk`` client) and a plain JSON route, on one app served by
uvicorn on loopback. Two principals differing only in the argument never share an entry."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    ToolCall,
    Upstream,
    UpstreamCache,
)
from adcp_stale_cache.core.keys import caller_partition
from adcp_stale_cache.demo.processes import free_port

from ..servers import serve

pytest.importorskip("mcp")
pytest.importorskip("a2a")
from mcp import Client
from mcp.server import MCPServer

from adcp_stale_cache.demo.a2a_app import create_a2a_routes

pytestmark = pytest.mark.e2e

SIGNALS = SurfacePolicy(
    name="get_signals", field="signals", paths=("/api/get_signals",),
    freshness_target_seconds=300, max_stale_seconds=3600,
)  # fmt: skip
DATA_PLATFORM = Upstream(name="data-platform")


def principal_partition(call: ToolCall) -> str | None:
    """The principal the call names, else the caller's credentials (never shared)."""
    principal = (call.arguments or {}).get("principal_id")
    return f"principal:{principal}" if isinstance(principal, str) else caller_partition(call.scope)


@contextlib.contextmanager
def signals_agent(**middleware: Any) -> Iterator[tuple[str, list[str]]]:
    """A signals agent keying nothing by principal itself (the partition must): yields its
    URL and the principals its data platform was asked for."""
    cache = UpstreamCache(surfaces=Surfaces.of(SIGNALS))
    asked: list[str] = []

    async def get_signals(params: dict[str, Any]) -> dict[str, Any]:
        principal = params.get("principal_id")

        async def platform() -> dict[str, Any]:
            asked.append(principal)
            return {"signals": [{"signal_id": f"segment-of-{principal}"}]}

        return {"signals": (await cache.fetch(DATA_PLATFORM, "signals", platform))["signals"]}

    server = MCPServer(name="signals")

    @server.tool(name="get_signals")
    async def mcp_get_signals(principal_id: str) -> dict[str, Any]:
        return await get_signals({"principal_id": principal_id})

    async def rest(request: Request) -> JSONResponse:
        return JSONResponse(await get_signals(await request.json()))

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mcp_app = server.streamable_http_app(json_response=True, stateless_http=True)
    app = Starlette(
        routes=[
            Route("/api/get_signals", rest, methods=["POST"]),
            *create_a2a_routes({"get_signals": get_signals}, name="signals", url=f"{url}/a2a",
                               rpc_path="/a2a"),
            Mount("/", mcp_app),
        ],
        lifespan=lambda app: mcp_app.router.lifespan_context(app),
    )  # fmt: skip
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=cache.surfaces, **middleware)
    with serve(app, port):
        yield url, asked


async def over_mcp(url: str, principal: str) -> dict[str, Any]:
    async with Client(f"{url}/mcp", cache=None) as client:
        result = await client.call_tool("get_signals", {"principal_id": principal})
    assert not result.is_error
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def over_a2a(url: str, principal: str) -> dict[str, Any]:
    from a2a import types as pb
    from a2a.client import ClientConfig, create_client
    from google.protobuf.json_format import MessageToDict, ParseDict
    from google.protobuf.struct_pb2 import Value

    data = Value()
    ParseDict({"skill": "get_signals", "parameters": {"principal_id": principal}}, data)
    message = pb.Message(
        message_id=str(uuid4()), role=pb.Role.ROLE_USER, parts=[pb.Part(data=data)]
    )
    async with httpx.AsyncClient(timeout=10) as http:
        client = await create_client(
            url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
        events = [
            MessageToDict(e)
            async for e in client.send_message(pb.SendMessageRequest(message=message))
        ]
    [task] = [e["task"] for e in events if "task" in e]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    payload: dict[str, Any] = task["artifacts"][-1]["parts"][0]["data"]
    return payload


async def over_http(url: str, principal: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{url}/api/get_signals", json={"principal_id": principal})
    answer: dict[str, Any] = response.json()
    return answer


TRANSPORTS = {"mcp": over_mcp, "a2a": over_a2a, "http": over_http}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_principals_in_arguments_never_share_an_entry(transport: str) -> None:
    ask = TRANSPORTS[transport]
    with signals_agent(partition_from_call=principal_partition) as (url, asked):
        first = await ask(url, "principal-a")
        other = await ask(url, "principal-b")
        again = await ask(url, "principal-a")  # its own entry, served from the cache
    assert first["signals"] == again["signals"] == [{"signal_id": "segment-of-principal-a"}]
    assert other["signals"] == [{"signal_id": "segment-of-principal-b"}]
    assert asked == ["principal-a", "principal-b"]


async def test_the_scope_alone_cannot_tell_them_apart(caplog: pytest.LogCaptureFixture) -> None:
    """Why the hook: the default partition (headers) serves one principal another's data,
    and says so once, naming the argument."""
    with caplog.at_level("WARNING", logger="adcp_stale_cache"), signals_agent() as (url, asked):
        await over_mcp(url, "principal-a")
        other = await over_mcp(url, "principal-b")
    assert other["signals"] == [{"signal_id": "segment-of-principal-a"}]
    assert asked == ["principal-a"]
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("partition_ignores_credential")
    assert "tool argument principal_id" in warning


def test_one_partition_hook_only() -> None:
    with pytest.raises(ValueError, match="not both"):
        StaleAdvisoryMiddleware(
            Starlette(),
            partition=lambda scope: None,
            partition_from_call=principal_partition,
        )
