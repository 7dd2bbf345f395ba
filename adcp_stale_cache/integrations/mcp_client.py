"""Call a tool on an MCP server (a creative agent, a sub-agent) and get its AdCP payload.

Pair it with :meth:`UpstreamCache.fetch`, which bounds the call with the upstream's deadline
and abandons the client's cleanup when the server is frozen (the call's own ``timeout`` is
the last bound, for a caller without one)::

    formats = await cache.fetch(
        agent, ("list_creative_formats", args),
        lambda: call_mcp_tool(agent.url, "list_creative_formats", args),
    )

Needs the ``mcp`` extra: ``mcp`` 2.x (its ``Client``) or 1.x (``ClientSession`` over
``streamablehttp_client``, what fastmcp 2/3 sellers have installed).
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
    """One ``tools/call`` over streamable HTTP; returns the payload as a dict.

    Never waits longer than about ``timeout`` seconds (connecting, each HTTP read, the whole
    call): an answer that never comes, or that mcp 1.x loses with a broken-off stream,
    raises :class:`TimeoutError`, an outage (``TIMEOUT``) the cache serves stale over; one
    that mcp 2.x sees break off raises :class:`ConnectionResetError` (``CONNECTION_RESET``).
    Raises :class:`~adcp_stale_cache.UpstreamError` for a tool error (``isError: true``,
    with the payload's ``adcp_error`` code when it has one),
    :class:`~adcp_stale_cache.InvalidPayload` when the result holds no JSON object and
    :class:`~adcp_stale_cache.core.failures.UpstreamHTTPError` when the server answered a 5xx or
    a 429 (an outage, served stale). Raises :class:`ValueError` for a ``timeout`` that
    bounds nothing (not a finite number above 0).
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
        # mcp 2.x turns an HTTP error into a JSON-RPC "Server returned an error response"
        # (-32603) and drops the status: a 503 would read as the caller's own bug, never as
        # an outage. The responses are watched here so the status stays what fails.
        outage: list[httpx2.Response] = []

        async def watch(response: httpx2.Response) -> None:
            if response.status_code >= 500 or response.status_code == 429:
                outage.append(response)

        # timeout: httpx's own default (5 s) cut an answer slower than that to start.
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
                # mcp 2.x's "SSE stream ended without a response": the answer broke off,
                # an outage (never the caller's bug).
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
    """mcp 2.x's own error for a connection or response stream that closed unanswered."""
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
    """A result's member under mcp 2.x's ``name``, else under mcp 1.x's ``v1_name``.

    The 1.x spelling is read only where the 2.x one does not exist: a ``False`` or ``None``
    there is the answer (results that keep both spell the old one as a deprecated alias).
    """
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
