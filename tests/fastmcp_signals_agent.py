"""A signals agent on fastmcp, in the style of the AdCP reference signals agent (issue 31): its
``get_signals`` tool reads a signals service over HTTP through the cache, and the agent is
started by ``fastmcp run`` or ``server.run()``, so no ASGI middleware is in its path.

``tests/integrations/test_fastmcp_middleware.py`` builds it in process (:func:`build_server`) and starts it
in processes of its own, configured by the environment::

    ADCP_TEST_SIGNALS_URL=http://127.0.0.1:9001/signals \\
        fastmcp run tests/fastmcp_signals_agent.py:server --transport http --port 8000
    ADCP_TEST_SIGNALS_URL=... python tests/fastmcp_signals_agent.py      # server.run(): stdio

``ADCP_TEST_ADVISORIES=0`` leaves :class:`AdvisoryMiddleware` out (the agent as issue 31
found it); ``ADCP_TEST_MISSPELT=1`` declares a surface no tool is named after.
"""

# No "from __future__ import annotations": fastmcp 2.10 cannot read a tool's string annotations.

import os
from typing import Any

import httpx
from fastmcp import FastMCP

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.integrations.fastmcp import AdvisoryMiddleware
from adcp_stale_cache.ops.metrics import CacheMetrics

SURFACES = Surfaces.of(
    SurfacePolicy(
        name="get_signals", field="signals", freshness_target_seconds=1,
        max_stale_seconds=3600, upstream_timeout_seconds=5,
    )
)  # fmt: skip


def build_server(
    signals_url: str,
    *,
    advisories: bool = True,
    metrics: CacheMetrics | None = None,
    surfaces: Surfaces = SURFACES,
) -> FastMCP:
    """The agent: ``get_signals`` answers ``{"signals": [...], "context": ...}`` from the
    signals service at ``signals_url``, cached (its entries per caller: the default).
    ``surfaces`` must name ``get_signals``."""
    cache = UpstreamCache(surfaces=surfaces, metrics=metrics)
    service = Upstream(name="signals-service", url=signals_url)
    server = FastMCP("signals-agent")
    if advisories:
        server.add_middleware(AdvisoryMiddleware(cache=cache))

    async def load() -> list[dict[str, Any]]:
        async with httpx.AsyncClient() as client:
            response = await client.get(signals_url)
            response.raise_for_status()
            signals: list[dict[str, Any]] = response.json()["signals"]
            return signals

    @server.tool
    async def get_signals(
        signal_spec: str = "", context: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Signals matching ``signal_spec``."""
        signals = await cache.fetch(service, "all", load, surface="get_signals")
        found = [s for s in signals if signal_spec.lower() in s["name"].lower()]
        return {"signals": found, **({"context": context} if context is not None else {})}

    return server


#: ``ADCP_TEST_MISSPELT=1`` adds a surface named after no tool (``get_signal``).
MISSPELT = Surfaces.of(*SURFACES.policies, SurfacePolicy(name="get_signal"))

if "ADCP_TEST_SIGNALS_URL" in os.environ:  # started by fastmcp run, or as a script
    server = build_server(
        os.environ["ADCP_TEST_SIGNALS_URL"],
        advisories=os.environ.get("ADCP_TEST_ADVISORIES", "1") == "1",
        surfaces=MISSPELT if os.environ.get("ADCP_TEST_MISSPELT") == "1" else SURFACES,
    )

if __name__ == "__main__":
    server.run()  # stdio
