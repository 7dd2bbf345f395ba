"""Buyers of a fastmcp agent: an MCP session over streamable HTTP (``mcp`` 1.x or 2.x), and
the agent started by the ``fastmcp run`` CLI in a process of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any

from mcp import ClientSession
from mcp.shared._httpx_utils import create_mcp_http_client

from adcp_stale_cache.demo.processes import wait_for_port

from .servers import START_SECONDS, reap

try:  # mcp 2.x (under fastmcp 4) and mcp 1.2x and later (fastmcp 3)
    from mcp.client.streamable_http import streamable_http_client
except ImportError:  # mcp 1.12, under fastmcp 2
    streamable_http_client = None  # type: ignore[assignment]
    from mcp.client.streamable_http import streamablehttp_client

#: How long a buyer waits for any one answer: never forever. mcp 1.x drops a response
#: stream that broke off without a word, and its session would wait for the answer for ever.
#: 20 cold answers of 100 formats, 4 worker threads, took up to 12 s at load 6 here.
ANSWER_SECONDS = 60.0
_V1 = version("mcp").startswith("1.")


@contextlib.asynccontextmanager
async def session_at(url: str, principal: str = "buyer-1") -> AsyncIterator[ClientSession]:
    """An MCP session with the agent at ``url`` (streamable HTTP), as ``principal``."""
    headers = {"authorization": f"Bearer {principal}"}
    async with contextlib.AsyncExitStack() as stack:
        if streamable_http_client is None:
            transport = streamablehttp_client(url, headers=headers)
        else:
            # mcp's own client (30 s, 300 s to read a stream), never httpx's 5 s default:
            # an answer slower than that to start was cut and, under mcp 1.x, lost.
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            transport = streamable_http_client(url, http_client=http)
        read, write, *_ = await stack.enter_async_context(transport)
        wait: Any = timedelta(seconds=ANSWER_SECONDS) if _V1 else ANSWER_SECONDS
        session = await stack.enter_async_context(ClientSession(read, write, wait))
        await session.initialize()
        yield session


async def call_tool(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any, str]:
    """``tool`` (within the session's :data:`ANSWER_SECONDS`): isError, ``structuredContent``,
    the text block."""
    result = await session.call_tool(tool, arguments)
    v2 = hasattr(result, "is_error")  # mcp 2.x renamed the members
    [block] = result.content
    structured = result.structured_content if v2 else result.structuredContent
    return (result.is_error if v2 else result.isError), structured, block.text


@contextlib.contextmanager
def fastmcp_run(spec: str | Path, port: int, env: dict[str, str], log: IO[bytes]) -> Iterator[None]:
    """``fastmcp run spec`` serving over HTTP on ``127.0.0.1:port``, listening within
    :data:`START_SECONDS`,
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
            wait_for_port(port, START_SECONDS, process=started)
        except (RuntimeError, TimeoutError) as exc:
            log.seek(0)
            raise RuntimeError(f"{exc}: {log.read().decode(errors='replace')[-2000:]}") from exc
        yield
    finally:
        reap(started)
        log.seek(0)
