"""Call a tool on an MCP server (a creative agent, a sub-agent) and get its AdCP payload;
pair it with :meth:`UpstreamCache.fetch`. Needs the ``mcp`` extra (``mcp`` 2.x or 1.x).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..codecs import present
from ..codecs.json import loads
from ..core.failures import (
    InvalidPayload,
    UpstreamError,
    UpstreamHTTPError,
    causes_of,
    retry_after_of,
)
from .deadline import checked_timeout, within

try:  # mcp 2.x
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    MCP_V1 = False
except ImportError:  # mcp 1.x (typed here against 2.x: the names below exist only in 1.x)
    from mcp import ClientSession
    from mcp.client.streamable_http import (  # type: ignore[attr-defined]
        streamablehttp_client,
    )

    MCP_V1 = True


async def call_mcp_tool(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """One ``tools/call`` over streamable HTTP, within about ``timeout`` seconds; the payload.

    Raises outages (:class:`TimeoutError`, :class:`ConnectionResetError`, ``UpstreamHTTPError``
    on a 5xx or 429), ``UpstreamError`` for a tool error, ``InvalidPayload`` for no JSON object,
    :class:`ValueError` for a ``timeout`` that is not finite and above 0.
    """
    timeout = checked_timeout(timeout)
    call = _call(url, tool, arguments, headers, timeout)
    return await within(call, timeout, f"MCP tool {tool!r}")


async def _call(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None,
    timeout: float,
) -> dict[str, Any]:
    if not MCP_V1:
        # mcp 2.x turns an HTTP 5xx into a JSON-RPC -32603 and drops the status: keep it here.
        outage: list[httpx2.Response] = []

        async def watch(response: httpx2.Response) -> None:
            if response.status_code >= 500 or response.status_code == 429:
                outage.append(response)

        # timeout: httpx's default (5 s) cut slower answers.
        http = httpx2.AsyncClient(
            headers=dict(headers or {}), timeout=timeout, event_hooks={"response": [watch]}
        )
        # cache=None: the MCP client must not answer from a cache of its own behind ours.
        transport = streamable_http_client(url, http_client=http)
        try:
            async with http, Client(transport, cache=None) as client:
                result = await client.call_tool(tool, dict(arguments or {}))
        except Exception as exc:
            if not outage and _broke_off(exc):
                # mcp 2.x's "SSE stream ended without a response": an outage.
                raise ConnectionResetError("the MCP server's answer broke off") from exc
            if not outage:
                raise
            failed = outage[0]
            raise UpstreamHTTPError(
                failed.status_code, retry_after=retry_after_of(failed.headers)
            ) from exc
    else:
        async with (
            streamablehttp_client(
                url, headers=dict(headers or {}), timeout=timeout, sse_read_timeout=timeout
            ) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, dict(arguments or {}))
    return _answer_of(result, tool)


def _broke_off(exc: BaseException) -> bool:
    """mcp 2.x's error for a stream that closed unanswered."""
    return any(isinstance(e, MCPError) and e.code == CONNECTION_CLOSED for e in causes_of(exc))


def _answer_of(result: Any, tool: str) -> dict[str, Any]:
    """The payload of a ``CallToolResult`` (mcp 1.x or 2.x), or the failure it says."""
    payload = _payload(result)
    is_error = _member(result, "is_error", "isError")
    if is_error or present(payload, "adcp_error"):  # "adcp_error": null is a success
        failed = payload.get("adcp_error") if isinstance(payload, dict) else None
        code = failed.get("code") if isinstance(failed, dict) else None
        raise UpstreamError(code if isinstance(code, str) else "UPSTREAM_ERROR")
    if not isinstance(payload, dict):
        raise InvalidPayload(f"tool {tool!r} returned no JSON object")
    return payload


def _member(result: Any, name: str, v1_name: str) -> Any:
    """A result's member under mcp 2.x's ``name``, else (only when absent, not falsy) under
    mcp 1.x's ``v1_name``."""
    if hasattr(result, name):
        return getattr(result, name)
    return getattr(result, v1_name, None)


def _payload(result: Any) -> dict[str, Any] | None:
    structured = _member(result, "structured_content", "structuredContent")
    if isinstance(structured, dict):
        return structured
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            try:
                value = loads(text)
            except ValueError:  # not JSON, or nested past what is read (NotJson)
                continue
            if isinstance(value, dict):
                return value
    return None
