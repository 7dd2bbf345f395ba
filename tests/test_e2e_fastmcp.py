"""A fastmcp 3.2 seller shaped like the reference seller (examples/fastmcp_seller.py), end to end.

Sync tool implementations run their async work on a new event loop per call in a pool of 4
worker threads, with one cache per process; creative agents are real fastmcp servers on
loopback, called with ``call_mcp_tool`` on ``mcp`` 1.x; the buyer is the ``mcp`` 1.x client.
This file runs in CI's fastmcp environment (``fastmcp>=3.2,<3.3``, ``mcp`` 1.x, ``adcp``
6.6); elsewhere it is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from .servers import serve

if importlib.util.find_spec("fastmcp") is None or not version("fastmcp").startswith("3."):
    pytest.skip("fastmcp 3.x only: CI runs it in its fastmcp environment", allow_module_level=True)

from fastmcp import FastMCP
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from adcp_stale_cache import SurfacePolicy, Surfaces

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fastmcp_seller.py"
SURFACES = Surfaces.of(
    SurfacePolicy(
        name="list_creative_formats", field="formats", freshness_target_seconds=1,
        max_stale_seconds=3600, upstream_timeout_seconds=3, shared_across_callers=True,
    )
)  # fmt: skip


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("fastmcp_seller", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def creative_agent(name: str) -> Any:
    agent = FastMCP(name)

    @agent.tool
    def list_creative_formats() -> dict[str, Any]:
        return {"formats": [{"format_id": {"id": f"{name}-display", "agent_url": name}}]}

    return agent.http_app(path="/mcp")


async def call(url: str, principal: str, calls: int) -> list[dict[str, Any]]:
    """``calls`` concurrent tools/call on one stateful session of ``principal``."""
    headers = {"authorization": f"Bearer {principal}"}
    async with (
        streamablehttp_client(url, headers=headers) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        results = await asyncio.gather(
            *(session.call_tool("list_creative_formats", {}) for _ in range(calls))
        )
    answers = []
    for result in results:
        assert result.isError is False
        assert "creative formats" in result.content[0].text  # the summary, left alone
        answers.append(result.structuredContent)
    return answers


async def round_of(url: str) -> list[dict[str, Any]]:
    rounds = [call(url, f"principal-{i}", 5) for i in range(4)]
    return [answer for answers in await asyncio.gather(*rounds) for answer in answers]


def test_threaded_fastmcp_seller_keeps_every_advisory_on_its_own_answer() -> None:
    seller_module = load_example()
    with contextlib.ExitStack() as running, contextlib.ExitStack() as agent_b:
        a = running.enter_context(serve(creative_agent("agent-a")))
        b = agent_b.enter_context(serve(creative_agent("agent-b")))
        agent_urls = {"agent-a": f"{a}/mcp", "agent-b": f"{b}/mcp"}
        seller = running.enter_context(serve(seller_module.build_app(agent_urls, SURFACES)))
        cold = asyncio.run(round_of(f"{seller}/mcp"))  # 20 calls on a cold cache
        time.sleep(1.2)  # past the 1 s freshness target
        agent_b.close()  # agent-b's server stops: its connections are refused
        stale = asyncio.run(round_of(f"{seller}/mcp"))
    assert len(cold) == 20
    for answer in cold:
        agents = sorted(f["format_id"]["agent_url"] for f in answer["formats"])
        assert agents == ["agent-a", "agent-b"] and "errors" not in answer
    assert len(stale) == 20
    for answer in stale:
        assert len(answer["formats"]) == 2  # agent-b's formats, from cache
        [advisory] = answer["errors"]  # exactly one, this answer's own
        assert advisory["code"] == "STALE_RESPONSE" and advisory["recovery"] == "transient"
        details = advisory["details"]
        assert details["upstream"] == {"name": "agent-b", "url": agent_urls["agent-b"]}
        assert details["cache_age_seconds"] >= 1
        assert json.dumps(answer).count("STALE_RESPONSE") == 1
