"""Just enough MCP (streamable HTTP) and A2A (JSON-RPC ``message/send``) to call a seller's
tools and see its answers as they travel: transport status, payload, envelope."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import uuid4

import httpx

from ..codecs.json import loads

MCP_PROTOCOL_VERSION = "2025-06-18"


@dataclass
class Reply:
    """One tool call's answer: the transport's verdict and what it said, and the AdCP payload."""

    transport_ok: bool
    transport: str
    payload: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Wire(Protocol):
    """A transport to one seller."""

    async def tools(self) -> list[str]:
        """The tools (MCP) or skills (A2A) the seller lists."""
        ...

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        """Call ``tool``."""
        ...


class McpWire:
    """A minimal MCP client: initialize, ``tools/list``, ``tools/call`` (JSON or SSE)."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.session: str | None = None
        self.version = MCP_PROTOCOL_VERSION
        self._ids = itertools.count(1)

    async def open(self) -> None:
        """Initialize the session."""
        result, _ = await self._rpc(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "adcp-stale-cache check", "version": "1"},
            },
        )
        self.version = str(_obj(result).get("protocolVersion", MCP_PROTOCOL_VERSION))
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def tools(self) -> list[str]:
        """The names of the tools the seller lists."""
        result, _ = await self._rpc("tools/list", {})
        return [str(_obj(tool).get("name")) for tool in _list(_obj(result).get("tools"))]

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        """``tools/call``; transport success is HTTP 200, no JSON-RPC error, ``isError`` false."""
        result, response = await self._rpc("tools/call", {"name": tool, "arguments": arguments})
        if not isinstance(result, dict):
            seen = "no result" if result is None else f"a result that is {type(result).__name__}"
            return Reply(False, f"HTTP {response.status_code}, JSON-RPC error or {seen}")
        payload = _mcp_payload(result)
        is_error = result.get("isError", False)
        return Reply(
            response.status_code == 200 and is_error is False,
            f"HTTP {response.status_code}, isError: {json.dumps(is_error)}",
            payload,
            {"result": result},
        )

    async def _rpc(self, method: str, params: dict[str, Any]) -> tuple[Any, httpx.Response]:
        ident = next(self._ids)
        response = await self._post(
            {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        )
        for message in _messages(response):
            if _obj(message).get("id") == ident:
                return _obj(message).get("result"), response
        return None, response

    async def _post(self, body: dict[str, Any]) -> httpx.Response:
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": self.version,
        }
        if self.session:
            headers["mcp-session-id"] = self.session
        response = await self.http.post(self.url, json=body, headers=headers)
        self.session = response.headers.get("mcp-session-id", self.session)
        return response


class A2aWire:
    """A minimal A2A client: the agent card's skills and ``message/send`` (A2A 0.3) with
    AdCP's ``{"skill": name, "parameters": {...}}``."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url

    async def open(self) -> None:
        """Nothing to open: A2A is one request per call."""

    async def tools(self) -> list[str]:
        """The skills of the agent card (``/.well-known/agent-card.json``)."""
        base = self.url.rstrip("/")
        response = await self.http.get(f"{base}/.well-known/agent-card.json")
        if response.status_code != 200:
            return []
        try:
            card = loads(response.content)
        except ValueError:
            return []
        return [str(_obj(skill).get("id")) for skill in _list(_obj(card).get("skills"))]

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        """``message/send``; transport success is HTTP 200 and a task ``completed``."""
        call = {"skill": tool, "parameters": arguments}
        message = {
            "kind": "message",
            "messageId": str(uuid4()),
            "role": "user",
            "parts": [{"kind": "data", "data": call}],
        }
        body = {
            "jsonrpc": "2.0",
            "id": str(uuid4()),
            "method": "message/send",
            "params": {"message": message},
        }
        response = await self.http.post(self.url, json=body)
        try:
            task = _obj(_obj(loads(response.content)).get("result"))
        except ValueError:
            task = {}
        status = task.get("status")
        state = str(_obj(status).get("state", "none") if isinstance(status, dict) else status)
        payload = None
        for artifact in _list(task.get("artifacts")):
            for part in _list(_obj(artifact).get("parts")):
                if isinstance(_obj(part).get("data"), dict):
                    payload = part["data"]
        ok = response.status_code == 200 and state == "completed"
        return Reply(ok, f"HTTP {response.status_code}, task {state}", payload, {"task": task})


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if a JSON object, else an empty one: an odd answer is seen, never a crash."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mcp_payload(result: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(result.get("structuredContent"), dict):
        return dict(result["structuredContent"])
    for item in _list(result.get("content")):
        if _obj(item).get("type") == "text" and isinstance(item.get("text"), str):
            with contextlib.suppress(ValueError):
                text = loads(item["text"])
                if isinstance(text, dict):
                    return text
    return None


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an MCP reply: one JSON body, or SSE ``data:`` events."""
    kind = response.headers.get("content-type", "")
    try:
        if kind.startswith("text/event-stream"):
            found = []
            for line in response.text.splitlines():
                if line.startswith("data:"):
                    found.append(loads(line[5:].strip()))
            return found
        if response.content:
            body = loads(response.content)
            return body if isinstance(body, list) else [body]
    except ValueError:  # not JSON, or nested past what is read (NotJson)
        pass
    return []


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Run an ASGI app's lifespan around a block (httpx's ASGITransport runs none, and MCP
    apps start their session manager there)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.ensure_future(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {started.get('message', started['type'])}")
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        with contextlib.suppress(Exception):
            await asyncio.wait_for(outbox.get(), 10)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
