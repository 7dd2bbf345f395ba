"""docs/adopting.md, run as written: its code blocks, in order, as one module, against real
creative agents (fastmcp servers in processes of their own), one of them then killed.

Runs in CI's fastmcp environment (``fastmcp>=3.2,<3.3``, ``mcp`` 1.x, ``adcp`` 6.6: the stack
the guide is for); elsewhere it is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("fastmcp") is None or not version("fastmcp").startswith("3."):
    pytest.skip("fastmcp 3.x only: CI runs it in its fastmcp environment", allow_module_level=True)

from adcp_stale_cache import classify, collect_advisories

from ..fastmcp_agent import agents

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adopting.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def guide_blocks() -> list[str]:
    """The guide's Python blocks, in order (the included example file left out: its own
    test runs it)."""
    return [b for b in BLOCK.findall(GUIDE.read_text()) if not b.lstrip().startswith("--8<--")]


def run_guide() -> types.ModuleType:
    module = types.ModuleType("adopting_guide")
    sys.modules[module.__name__] = module  # as an imported module is (dataclasses look)
    for block in guide_blocks():
        exec(compile(block, str(GUIDE), "exec"), module.__dict__)
    return module


def test_the_guide_has_its_steps() -> None:
    assert len(guide_blocks()) == 6  # before, then steps 1 to 5


def test_the_guide_runs_as_written() -> None:
    guide = run_guide()
    with agents("public-agent", "private-agent", formats="16:28") as running:
        public = guide.CreativeAgent("public-agent", running["public-agent"].url)
        private_a = guide.CreativeAgent("private-agent", running["private-agent"].url, "tok-a")
        private_b = guide.CreativeAgent("private-agent", running["private-agent"].url, "tok-b")

        # Step 4's implementation, from a request (the collector the middleware would open).
        with collect_advisories() as healthy:
            response = guide.list_creative_formats_impl([public, private_a])
        assert len(response.formats) == 24 and response.errors is None and not healthy

        # Step 2: tenants calling the private agent with their own tokens keep apart.
        registry = guide.REGISTRY
        names_b = asyncio.run(registry.get_formats_for_agent(private_b))
        names_a = asyncio.run(registry.get_formats_for_agent(private_a))
        assert {f.name.rsplit("/", 1)[1] for f in names_a} == {"tok-a]"}
        assert {f.name.rsplit("/", 1)[1] for f in names_b} == {"tok-b]"}

        running["private-agent"].kill()

        # A filter reads the cached catalogue: a fresh hit, no call, no advisory.
        with collect_advisories() as filtered:
            narrowed = guide.list_creative_formats_impl([public, private_a], "video")
        assert narrowed.formats and not filtered
        assert all("video" in f.name.lower() for f in narrowed.formats)

        # The old registry's forced refresh of a dead agent: nothing served.
        old = guide.OldRegistry()
        with pytest.raises(Exception):  # noqa: B017 - whatever the dead agent raised
            asyncio.run(old.get_formats_for_agent(private_a, force_refresh=True))

        # The new one: a soft purge, then the purged entry as the outage fallback.
        async def forced() -> tuple[list[Any], list[dict[str, Any]]]:
            async with collect_advisories() as advisories:
                formats = await registry.get_formats_for_agent(private_a, force_refresh=True)
            return formats, advisories.errors()

        formats, errors = asyncio.run(forced())
        assert len(formats) == 12
        [advisory] = errors
        assert advisory["code"] == "STALE_RESPONSE"
        assert advisory["details"]["upstream"]["name"] == "private-agent"
        assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
        assert "tok-a" not in str(errors)

        # A tenant with nothing cached for a dead agent: the failure stays a failure.
        newcomer = guide.CreativeAgent("private-agent", running["private-agent"].url, "tok-c")
        with collect_advisories():
            answer = guide.list_creative_formats_impl([public, newcomer])
        assert len(answer.formats) == 12
        [error] = answer.errors
        assert error.code == "SERVICE_UNAVAILABLE"

    # Step 3's mapping, as the cache applies it.
    failure_types = guide.CACHE.failure_types
    assert classify(guide.AdCPServiceUnavailableError("down"), None, failure_types).code == (
        "SERVICE_UNAVAILABLE"
    )
    transient = guide.AdCPAdapterError("GAM down")
    assert classify(transient, None, failure_types).code == "SERVICE_UNAVAILABLE"
    terminal = guide.AdCPAdapterError("bad targeting", recovery="terminal")
    assert classify(terminal, None, failure_types).code == "UPSTREAM_ERROR"
    segments = guide.SegmentsError("Failed to fetch segments: 503 Service Unavailable")
    assert classify(segments, None, failure_types).code == "UPSTREAM_HTTP_503"
    bare = Exception("Failed to fetch segments: 500 db-7.internal down")
    assert classify(bare, None, failure_types).code == "UPSTREAM_HTTP_500"  # no mapping needed
    # Step 5: the middleware, with the cache's own surfaces.
    assert guide.wrap(object()).surfaces is guide.SURFACES
