"""Buyers of a fastmcp agent: an MCP session over streamable HTTP (``mcp`` 1.x or 2.x), and
the agent started by the ``fastmcp run`` CLI in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
from mcp import ClientSession

from adcp_stale_cache.demo.processes import wait_for_port

try:  # mcp 2.x, under fastmcp 4
    from mcp.client.streamable_http import streamable_http_client
except ImportError:  # mcp 1.x, under fastmcp 2 and 3
    streamable_http_client = None  # type: ignore[assignment]
    from mcp.client.streamable_http import streamablehttp_client


@contextlib.asynccontextmanager
async def session_at(url: str, principal: str = "buyer-1") -> AsyncIterator[ClientSession]:
    """An MCP session with the agent at ``url`` (streamable HTTP), as ``principal``."""
    headers = {"authorization": f"Bearer {principal}"}
    async with contextlib.AsyncExitStack() as stack:
        if streamable_http_client is None:
            transport = streamablehttp_client(url, headers=headers)
        else:
            http = await stack.enter_async_context(httpx.AsyncClient(headers=headers))
            transport = streamable_http_client(url, http_client=http)
        read, write, *_ = await stack.enter_async_context(transport)
        session = await stack.enter_async_context(ClientSession(read, write))
        await asyncio.wait_for(session.initialize(), 30)
        yield session


async def call_tool(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any, str]:
    """``tool`` within 20 s: isError, ``structuredContent``, the text block."""
    result = await asyncio.wait_for(session.call_tool(tool, arguments), 20)
    v2 = hasattr(result, "is_error")  # mcp 2.x renamed the members
    [block] = result.content
    structured = result.structured_content if v2 else result.structuredContent
    return (result.is_error if v2 else result.isError), structured, block.text


@contextlib.contextmanager
def fastmcp_run(spec: str | Path, port: int, env: dict[str, str], log: IO[bytes]) -> Iterator[None]:
    """``fastmcp run spec`` serving over HTTP on ``127.0.0.1:port``, listening within 60 s,
    its stdout and stderr in ``log``. Reaped on the way out, whatever happened."""
    cli = Path(sys.executable).with_name("fastmcp")
    command = [
        str(cli), "run", str(spec), "--transport", "http", "--host", "127.0.0.1",
        "--port", str(port), "--no-banner",
    ]  # fmt: skip
    started = subprocess.Popen(
        command, env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        try:
            wait_for_port(port, 60, process=started)
        except (RuntimeError, TimeoutError) as exc:
            log.seek(0)
            raise RuntimeError(f"{exc}: {log.read().decode(errors='replace')[-2000:]}") from exc
        yield
    finally:
        started.terminate()
        try:
            started.wait(10)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait(10)
        log.seek(0)
