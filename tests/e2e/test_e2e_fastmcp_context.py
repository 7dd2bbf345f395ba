"""fastmcp writes a response model's unset ``context`` as null: the middleware neither takes
it for another buyer's context (no ``answer_context_replaced``) nor drops it, on a fresh
answer (byte for byte) or a stale one (rewritten). Runs in CI's fastmcp environments (fastmcp
3.2 on ``mcp`` 1.x, fastmcp 4 on ``mcp`` 2.x); elsewhere it is skipped, saying so."""

from __future__ import annotations

import importlib.util
import json
import logging
from typing import Any

import pytest
from pydantic import BaseModel

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

from ..servers import serve

if importlib.util.find_spec("fastmcp") is None:
    pytest.skip("fastmcp: CI runs it in its fastmcp environments", allow_module_level=True)

from fastmcp import Client, FastMCP

pytestmark = pytest.mark.e2e

SIGNALS = SurfacePolicy(
    name="get_signals", field="signals", freshness_target_seconds=0, max_stale_seconds=600
)
PLATFORM = Upstream(name="data-platform")


class Signals(BaseModel):
    """A response model as sellers write them: unset members go out as null."""

    signals: list[dict[str, Any]]
    context: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None


async def test_a_null_context_is_kept_and_never_foreign(caplog: pytest.LogCaptureFixture) -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(SIGNALS))
    up = {"platform": True}

    async def platform() -> dict[str, Any]:  # its answer holds a context: checked on the way out
        if not up["platform"]:
            raise ConnectionRefusedError(111, "refused")
        return {"signals": [{"signal_id": "s1"}], "context": None}

    server = FastMCP("signals")

    @server.tool(name="get_signals")
    async def get_signals(brief: str = "") -> Signals:
        return Signals(signals=(await cache.fetch(PLATFORM, "all", platform))["signals"])

    middleware = StaleAdvisoryMiddleware(server.http_app(), surfaces=cache.surfaces)
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"), serve(middleware) as url:
        async with Client(f"{url}/mcp") as client:
            fresh = await client.call_tool("get_signals", {})
            up["platform"] = False
            stale = await client.call_tool("get_signals", {})
    for result in (fresh, stale):
        assert not result.is_error
        [block] = result.content
        assert json.loads(block.text) == result.structured_content  # type: ignore[union-attr]
    healthy = {"signals": [{"signal_id": "s1"}], "context": None, "errors": None}
    assert fresh.structured_content == healthy
    payload = stale.structured_content
    assert payload is not None and "context" in payload and payload["context"] is None
    assert [e["code"] for e in payload["errors"]] == ["STALE_RESPONSE"]
    assert middleware.contexts_replaced == 0
    assert not [r for r in caplog.records if "answer_context" in r.getMessage()]
