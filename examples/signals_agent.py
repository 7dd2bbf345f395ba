"""A signals agent shaped like the public AdCP signals agent: fastmcp (2.10 and later), sync
tools, a blocking ``requests`` client to its decisioning platform that raises a bare
``Exception`` on a bad status, the principal passed as a tool argument, started by
``fastmcp run``. What the cache needs from it: ``fetch_blocking`` for the blocking client
(fastmcp 2.x runs sync tools on the server's event loop, where ``asyncio.run`` cannot run),
``AdvisoryMiddleware`` on the server (``fastmcp run`` serves the bare server: there is no ASGI
app to wrap), and the principal from the call as the cache partition. Run::

    pip install 'adcp-stale-cache[fastmcp]' requests
    DECISIONING_PLATFORM_URL=http://127.0.0.1:9100 TAXONOMY_URL=http://127.0.0.1:9101 \\
        fastmcp run examples/signals_agent.py:server --transport http --port 8000
"""

# No "from __future__ import annotations": fastmcp 2.10 cannot read a tool's string annotations.

import os
from typing import Any

import requests
from fastmcp import FastMCP

from adcp_stale_cache import SurfacePolicy, Surfaces, ToolCall, Upstream, UpstreamCache
from adcp_stale_cache.integrations.fastmcp import AdvisoryMiddleware

PLATFORM_URL = os.environ.get("DECISIONING_PLATFORM_URL", "http://127.0.0.1:9100")
TAXONOMY_URL = os.environ.get("TAXONOMY_URL", "http://127.0.0.1:9101")
# The client's own timeout matches the cache's deadline: a call abandoned at the deadline
# would otherwise hold its lane thread until the client gave up (blocking.Lane).
TIMEOUT_SECONDS = float(os.environ.get("SIGNALS_TIMEOUT_SECONDS", "5"))
SURFACES = Surfaces.of(
    *(
        SurfacePolicy(
            name=name,
            field=field,
            freshness_target_seconds=int(os.environ.get("SIGNALS_FRESHNESS_SECONDS", "60")),
            max_stale_seconds=3600,
            upstream_timeout_seconds=TIMEOUT_SECONDS,
            request_budget_seconds=float(os.environ.get("SIGNALS_BUDGET_SECONDS", "4")),
        )
        for name, field in (("get_signals", "signals"), ("get_taxonomy", "categories"))
    )
)
CACHE = UpstreamCache(surfaces=SURFACES)
PLATFORM = Upstream(name="decisioning-platform")  # internal: no URL in advisories
TAXONOMY = Upstream(name="taxonomy-service")


def principal(call: ToolCall) -> str | None:
    """The principal the buyer's call names: each one's segments are its own."""
    named = (call.arguments or {}).get("principal_id")
    return None if named is None else f"principal:{named}"


server = FastMCP("signals-agent")
server.add_middleware(AdvisoryMiddleware(cache=CACHE, partition_from_call=principal))


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The agent's own client, as it was: a bare ``Exception`` on a bad status (the cache
    reads the status in its text: an outage, served stale)."""
    response = requests.post(url, json=body, timeout=TIMEOUT_SECONDS)
    if response.status_code != 200:
        raise Exception(f"Failed to fetch segments: {response.status_code} {response.reason}")
    answer: dict[str, Any] = response.json()
    return answer


@server.tool
def get_signals(signal_spec: str, principal_id: str = "") -> dict[str, Any]:
    """Signals matching ``signal_spec``, as ``principal_id`` may see them."""
    asked = {"spec": signal_spec, "principal_id": principal_id or None}
    answer = CACHE.fetch_blocking(
        PLATFORM, ("segments", signal_spec), lambda: post(f"{PLATFORM_URL}/segments", asked)
    )
    signals = [{"signal_agent_segment_id": s["id"], "name": s["id"]} for s in answer["segments"]]
    return {"signals": signals, "call": answer["segments"][0]["call"]}


@server.tool
def get_taxonomy(principal_id: str = "") -> dict[str, Any]:
    """The platform's categories, from the taxonomy service."""
    answer = CACHE.fetch_blocking(
        TAXONOMY, "categories", lambda: post(f"{TAXONOMY_URL}/segments", {"spec": "taxonomy"})
    )
    return {"categories": [s["id"] for s in answer["segments"]]}
