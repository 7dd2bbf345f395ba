"""REVIEW 33: reproductions of defects found attacking issue 33's work (the bounded clients,
the release, the suite's bounds) as a hostile user.

Each test asserts what a seller (or the suite) should get; each FAILED on the library as
reviewed (h-rev33 at main's tip, 8c6b608); each is fixed on h-rev33, and its test passes.
A defect found later is marked ``OPEN`` (``xfail(strict=True)``: the suite stays green until
its fix lands, and a fixed defect's test then XPASSes and fails the run, so that its marker
goes with the fix).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.core.failures import FailureKind, classify
from adcp_stale_cache.integrations.adcp_agent import AdcpAgent

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

OPEN = pytest.mark.xfail(strict=True, reason="review 33: reproduces an open defect")

ROOT = Path(__file__).resolve().parents[2]
# A surface whose own deadline is far past the agent's: the agent's timeout is what ends a call.
PATIENT = SurfacePolicy(name="sub_products", field="products", upstream_timeout_seconds=120)
UPSTREAM = Upstream(name="sub", url="http://127.0.0.1:9/mcp")


async def _answer(tool: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"products": []}


@pytest.mark.timeout(60)
async def test_review33_an_agent_call_whose_cleanup_stalls_ends_at_the_agents_timeout() -> None:
    """REVIEW 33 defect: ``AdcpAgent`` ("no call to the agent waits longer than
    ``timeout``") and ``call_mcp_tool`` ("never waits longer than about ``timeout``") bound
    their calls with ``deadline.within``, an ``asyncio.wait_for``, which waits for the
    cancelled call to finish its cleanup. A client's cleanup talks to the frozen server (the
    MCP session's closing DELETE, bounded only by the transport's own timeout): measured on
    a server that stalls every request, the ``adcp`` client behind ``AdcpAgent(timeout=2)``
    answered after 4.0 s, ``call_mcp_tool(timeout=2)`` on mcp 1.x after 4.0 s (60 s at the
    default 30). ``singleflight.call_with_deadline`` abandons such a cleanup already."""

    async def frozen(tool: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.Event().wait()
        finally:  # the closing request to the frozen server: the transport's timeout
            await asyncio.sleep(10)
        raise AssertionError("unreachable")

    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PATIENT))
    agent = AdcpAgent(cache, UPSTREAM, surface="sub_products", call=frozen, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        await agent.get_products({"brief": "x"})
    took = time.monotonic() - started
    assert classify(raised.value).code == "TIMEOUT", raised.value
    assert took < 0.5 + 3, f"answered after {took:.1f}s"  # the bound, a busy machine's margin


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, None])
def test_review33_an_agent_refuses_a_timeout_that_bounds_nothing(timeout: Any) -> None:
    """REVIEW 33 defect: ``AdcpAgent(timeout=...)`` takes any value. 0 or a negative one makes
    every call a TIMEOUT outage at once (the upstream is never asked; the cache serves stale
    until max-stale, then fails), NaN is a TIMEOUT or a CONNECTION_ERROR depending on where
    it lands, inf and None wait for ever, what the bound exists to prevent. A setting fixed
    at construction is checked there: a ValueError."""
    cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(PATIENT))
    with pytest.raises(ValueError, match="timeout"):
        AdcpAgent(cache, UPSTREAM, surface="sub_products", call=_answer, timeout=timeout)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, None])
async def test_review33_call_mcp_tool_refuses_a_timeout_that_bounds_nothing(timeout: Any) -> None:
    """REVIEW 33 defect: ``call_mcp_tool(timeout=0)`` (or -1) raises TimeoutError without
    calling, an outage served stale over a caller's mistake; NaN raised TimeoutError on
    mcp 2.x and, on mcp 1.x, an ExceptionGroup of ``ValueError: deadline must not be NaN``
    classified CONNECTION_ERROR (served stale too); inf and None wait for ever."""
    pytest.importorskip("mcp", reason="the mcp extra is needed")
    from adcp_stale_cache.integrations.mcp_client import call_mcp_tool

    with pytest.raises(ValueError, match="timeout"):
        await asyncio.wait_for(call_mcp_tool(UPSTREAM.url or "", "x", timeout=timeout), 30)


def test_review33_an_error_raised_while_a_cancellation_unwound_is_not_a_lost_connection() -> None:
    """REVIEW 33 defect: ``classify`` calls any chain holding a ``CancelledError`` a
    ``CONNECTION_ERROR`` (the rule meant for a kept-open MCP session whose server died,
    which surfaces as a bare CancelledError). Under mcp 1.x's anyio task groups, every error
    of the call is raised while the group's cancellation unwinds and carries that
    CancelledError as its context: a caller's ValueError (``timeout=nan``: "deadline must not
    be NaN") and a redirect loop (``TooManyRedirects``) were CONNECTION_ERROR outages, served
    stale, where mcp 2.x says UNEXPECTED for the same redirect loop (never served stale)."""
    try:
        try:
            raise asyncio.CancelledError()  # the task group cancelling its other tasks
        except asyncio.CancelledError:
            raise ValueError("deadline must not be NaN") from None  # the caller's own bug
    except ValueError as bug:
        group = ExceptionGroup("unhandled errors in a TaskGroup", [bug])
    # "from None" hides the context from tracebacks, not from __context__ (as anyio's are).
    assert isinstance(group.exceptions[0].__context__, asyncio.CancelledError)
    assert classify(group).kind is FailureKind.UNEXPECTED, classify(group)


@pytest.mark.timeout(60)
def test_review33_a_redis_server_that_fails_to_start_is_reaped(monkeypatch: Any) -> None:
    """REVIEW 33 defect: ``tests/redis_server.RedisServer.start`` starts redis-server, then
    waits 20 s for its port (not START_SECONDS, and without ``process=``, so a port taken
    by another worker's server reads as ours); when the wait fails, ``start`` raises with
    the process running, and no caller (``server = RedisServer().start()``) can stop it: a
    redis-server outlives the suite for each failed start."""
    from .. import redis_server

    def nothing_listens(*args: Any, **kwargs: Any) -> None:
        raise TimeoutError("nothing listens")

    monkeypatch.setattr(redis_server, "wait_for_port", nothing_listens)
    server = redis_server.RedisServer()
    try:
        with pytest.raises(TimeoutError):
            server.start()
        assert server.process is not None
        assert server.process.poll() is not None, "redis-server left running"
    finally:
        server.kill()


@pytest.mark.timeout(120)
def test_review33_the_demo_without_its_extra_says_so_once(tmp_path: Path) -> None:
    """REVIEW 33 defect: ``adcp-stale-cache demo`` installed without the ``examples`` extra
    (the wheel alone, as PyPI gives it) starts five app processes that each print "the
    example apps need the 'examples' extra", then dies on a RuntimeError traceback ("the app
    exited (2)"). It should say so once, before starting anything, and exit non-zero."""
    # No uvicorn, as in a venv without the extra (in this process and the apps' alike).
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['uvicorn'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "adcp_stale_cache", "demo"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "Traceback" not in said, said
    assert said.count("pip install 'adcp-stale-cache[examples]'") == 1, said


HANGS_IN_CLEANUP = """
import asyncio, pytest

@pytest.mark.timeout(1)
def test_cleanup_hangs():
    async def main():
        try:
            await asyncio.sleep(100)
        finally:
            await asyncio.sleep(100)  # a cleanup that outlives the timeout

    asyncio.run(main())
"""


@pytest.mark.timeout(120)
def test_review33_a_test_whose_cleanup_hangs_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    """REVIEW 33 defect: pytest-timeout interrupts a test once; a cleanup that then hangs held
    the run forever. The suite's conftest stops the process past the timeout and a margin."""
    (tmp_path / "test_hangs.py").write_text(HANGS_IN_CLEANUP)
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-n", "0", "-q", str(tmp_path / "test_hangs.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
        env={**os.environ, "TESTS_HARD_STOP_MARGIN_SECONDS": "3"},
    )  # fmt: skip
    assert run.returncode != 0
    assert time.monotonic() - started < 60
    assert "test_cleanup_hangs" in run.stdout + run.stderr  # the stack dump names the test
