"""``AdvisoryMiddleware`` (integrations/fastmcp.py): advisories however a fastmcp server starts.

Issue 31: ``fastmcp run`` (and ``server.run()``) serve the bare server, not an ASGI app
wrapped in ``StaleAdvisoryMiddleware``, so stale data went out with no advisory. Here the
signals agent of ``tests/fastmcp_signals_agent.py`` reads a signals service on loopback
through the cache; each test warms it, stops the service (connections refused), waits past
the 1 s freshness target and calls ``get_signals`` with the ``mcp`` client: started by the
``fastmcp run`` CLI, by ``server.run()`` over stdio, and as ``http_app()`` with and without
the ASGI middleware around it. CI runs this file on fastmcp 2.x (``mcp`` 1.12), 3.2 and 4.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("fastmcp") is None:
    pytest.skip(
        "needs fastmcp (2.10+, 3.x or 4.x): CI runs it in its fastmcp environments",
        allow_module_level=True,
    )

from fastmcp import Client
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from adcp_stale_cache import StaleAdvisoryMiddleware, SurfacePolicy, Surfaces, UpstreamCache
from adcp_stale_cache.demo.processes import free_port
from adcp_stale_cache.integrations.fastmcp import AdvisoryMiddleware
from adcp_stale_cache.ops.metrics import CacheMetrics

from ..conftest import CountingMetrics
from ..fastmcp_run import call_tool, fastmcp_run, session_at
from ..fastmcp_signals_agent import SURFACES, build_server
from ..servers import serve

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).resolve().parents[1] / "fastmcp_signals_agent.py"
SIGNALS = [{"signal_agent_segment_id": "auto-intenders", "name": "Auto intenders"}]
PAST_TARGET = 1.2  # seconds: the surface's freshness target is 1 s


@contextlib.contextmanager
def signals_service() -> Iterator[tuple[str, contextlib.ExitStack]]:
    """The upstream, ``GET /signals`` on loopback: its URL, and the stack that stops it
    (connections refused from then on)."""

    async def signals(request: Any) -> JSONResponse:
        return JSONResponse({"signals": SIGNALS})

    with contextlib.ExitStack() as running:
        base = running.enter_context(serve(Starlette(routes=[Route("/signals", signals)])))
        yield f"{base}/signals", running


async def call(session: ClientSession, **arguments: Any) -> tuple[bool, Any, str]:
    """``get_signals`` within 20 s: isError, ``structuredContent``, the text block."""
    return await call_tool(session, "get_signals", **arguments)


async def get_signals(session: ClientSession, **arguments: Any) -> tuple[dict[str, Any], str]:
    """A successful answer: its ``structuredContent`` and its text block."""
    is_error, structured, text = await call(session, **arguments)
    assert is_error is False, text
    return structured, text


async def warm_then_stale(
    session: ClientSession, service: contextlib.ExitStack, **arguments: Any
) -> tuple[dict[str, Any], str]:
    """Warm the cache, stop the signals service, wait past the target: the stale answer."""
    warm, _ = await get_signals(session)
    assert warm == {"signals": SIGNALS}  # a fresh answer has no errors member
    await asyncio.to_thread(service.close)
    await asyncio.sleep(PAST_TARGET)
    return await get_signals(session, **arguments)


def assert_one_advisory(answer: tuple[dict[str, Any], str], assert_valid_advisory: Any) -> None:
    """Exactly one valid ``STALE_RESPONSE``, in ``structuredContent`` and in the text JSON."""
    structured, text = answer
    assert structured["signals"] == SIGNALS  # the stale entry, served
    assert json.loads(text) == structured
    [advisory] = structured["errors"]
    assert_valid_advisory(advisory)
    assert advisory["details"]["upstream"]["name"] == "signals-service"
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
    assert advisory["details"]["cache_age_seconds"] >= 1


@pytest.mark.parametrize("advisories", [True, False], ids=["with_middleware", "bare"])
def test_fastmcp_run_cli(advisories: bool, assert_valid_advisory: Any) -> None:
    """Started by the ``fastmcp run`` CLI: with the middleware, one advisory; without it (what
    issue 31 found), none, and the agent logs ``advisory_lost`` (no URL in it)."""
    port = free_port()
    with signals_service() as (url, service), tempfile.TemporaryFile() as log:
        env = {"ADCP_TEST_SIGNALS_URL": url, "ADCP_TEST_ADVISORIES": "1" if advisories else "0"}
        with fastmcp_run(f"{AGENT}:server", port, env, log):

            async def stale() -> tuple[dict[str, Any], str]:
                async with session_at(f"http://127.0.0.1:{port}/mcp") as session:
                    return await warm_then_stale(session, service)

            answer = asyncio.run(stale())
        said = log.read().decode(errors="replace")
    lost = [line for line in said.splitlines() if "advisory_lost" in line]
    assert "surface_unserved" not in said  # its one surface is its one tool's
    if advisories:
        assert_one_advisory(answer, assert_valid_advisory)
        assert not lost
    else:
        assert answer[0] == {"signals": SIGNALS}  # stale, unannounced
        [line] = lost
        assert "upstream=signals-service surface=get_signals" in line
        assert "code=CONNECTION_REFUSED" in line and "127.0.0.1" not in line


def test_server_run_over_stdio(assert_valid_advisory: Any) -> None:
    """``server.run()`` (stdio, its default transport) in a process the client starts."""
    with signals_service() as (url, service), tempfile.TemporaryFile("w+") as errors:
        parameters = StdioServerParameters(
            command=sys.executable, args=[str(AGENT)], env={"ADCP_TEST_SIGNALS_URL": url}
        )

        async def stale() -> tuple[dict[str, Any], str]:
            async with (
                stdio_client(parameters, errlog=errors) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await asyncio.wait_for(session.initialize(), 30)
                return await warm_then_stale(session, service)

        answer = asyncio.run(asyncio.wait_for(stale(), 60))
    assert_one_advisory(answer, assert_valid_advisory)


class LostAdvisories(CacheMetrics):
    def __init__(self) -> None:
        self.lost: list[tuple[str, str]] = []

    def advisory_lost(self, surface: str, upstream: str) -> None:
        self.lost.append((surface, upstream))


@pytest.mark.parametrize("outer", [False, True], ids=["alone", "inside_asgi_middleware"])
def test_http_app(outer: bool, assert_valid_advisory: Any) -> None:
    """Mounted ``http_app()``: the fastmcp middleware delivers, its entries kept per caller (by
    the request's credentials). With ``StaleAdvisoryMiddleware`` around the app too, that one
    delivers and keys (here: every caller alike, so a second buyer is served the first one's
    entry) and this one stands down: one advisory, not two."""
    lost = LostAdvisories()
    with signals_service() as (url, service):
        app = build_server(url, metrics=lost).http_app(path="/mcp")
        if outer:
            app = StaleAdvisoryMiddleware(app, surfaces=SURFACES, partition=lambda scope: "all")
        with serve(app) as agent:

            async def stale() -> tuple[tuple[dict[str, Any], str], tuple[bool, Any, str]]:
                async with session_at(f"{agent}/mcp") as session:
                    context = {"correlation_id": "c-1"}
                    answer = await warm_then_stale(session, service, context=context)
                    assert answer[0]["context"] == context
                async with session_at(f"{agent}/mcp", "buyer-2") as other:
                    return answer, await call(other)

            answer, (is_error, structured, text) = asyncio.run(stale())
    assert_one_advisory(answer, assert_valid_advisory)
    if outer:  # the outer partition: buyer-1's entry, stale
        assert is_error is False
        assert_one_advisory((structured, text), assert_valid_advisory)
    else:  # its own partition: nothing cached for this caller
        assert is_error is True and "STALE_RESPONSE" not in text
    assert lost.lost == []


def test_http_app_without_any_middleware_counts_the_advisory_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = LostAdvisories()
    with signals_service() as (url, service):
        app = build_server(url, advisories=False, metrics=lost).http_app(path="/mcp")
        with serve(app) as agent, caplog.at_level("WARNING", logger="adcp_stale_cache"):

            async def stale() -> tuple[dict[str, Any], str]:
                async with session_at(f"{agent}/mcp") as session:
                    return await warm_then_stale(session, service)

            answer = asyncio.run(stale())
    assert answer[0] == {"signals": SIGNALS}
    assert lost.lost == [("get_signals", "signals-service")]
    [record] = [r for r in caplog.records if r.message.startswith("advisory_lost")]
    assert record.levelname == "WARNING" and "127.0.0.1" not in record.message
    assert not [r for r in caplog.records if r.message.startswith("stale_serve")]


def test_surfaces_given_twice_must_be_the_cache_s() -> None:
    # The same rule as StaleAdvisoryMiddleware's: one error for one mistake on every transport.
    cache = UpstreamCache(surfaces=SURFACES)
    assert AdvisoryMiddleware(surfaces=SURFACES, cache=cache).surfaces is SURFACES
    with pytest.raises(ValueError, match="pass cache= alone"):
        AdvisoryMiddleware(surfaces=Surfaces.of(*SURFACES.policies), cache=cache)


# Issue 31, "first use is quiet and clear": a surface named by tool alone whose name no tool
# has is said when the app starts (the ASGI middleware's lifespan) or, for a server started on
# its own, at its first message; one named after a served tool, or whose paths a route
# serves, is not. ``get_signal`` is the misspelt one.
TOOL_SURFACES = Surfaces.of(
    SurfacePolicy(name="get_signals", paths=("/api/get_signals",)),  # no route: its tool serves
    SurfacePolicy(name="get_signal"),
    SurfacePolicy(name="list_products", paths=("/api/list_products",)),
)
MISSPELT = (
    "surface_unserved surface=get_signal tools=['get_signal']: no tool the app serves has "
    "that name (did you mean get_signals? it serves: get_signals): no request selects it"
)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the library logged at WARNING and above."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("adcp_stale_cache")
    ]


def test_a_tool_no_server_serves_is_said_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    """``StaleAdvisoryMiddleware`` around ``http_app()`` on uvicorn: the WARNING is out once
    uvicorn has started, before any request, and names only the misspelt surface."""
    surfaces = Surfaces.of(*TOOL_SURFACES.policies[:2])
    server = build_server("http://127.0.0.1:9/signals", advisories=False, surfaces=surfaces)
    app = StaleAdvisoryMiddleware(server.http_app(path="/mcp"), surfaces=surfaces)
    with caplog.at_level(logging.DEBUG, logger="adcp_stale_cache"), serve(app):
        assert said(caplog) == [MISSPELT]  # started, and no request made


async def plain_route(request: Any) -> JSONResponse:
    return JSONResponse({"products": []})


def test_a_surface_served_another_way_is_not_said(caplog: pytest.LogCaptureFixture) -> None:
    """One app serving a plain route and fastmcp's ``http_app()`` mounted: a surface whose
    path a route serves, or named after a served tool, is not said; with a POST route no
    surface declares (A2A JSON-RPC, say: it dispatches by a name that cannot be read), the
    misspelt one is an INFO, not a WARNING."""
    server = build_server("http://127.0.0.1:9/signals", advisories=False, surfaces=TOOL_SURFACES)

    def seller(*more: Route) -> Starlette:
        mcp_app = server.http_app(path="/mcp")  # a session manager runs once: one per app
        products = Route("/api/list_products", plain_route, methods=["POST"])
        routes = [products, Mount("/agent", app=mcp_app), *more]
        return Starlette(routes=routes, lifespan=mcp_app.lifespan)

    without_misspelt = Surfaces.of(TOOL_SURFACES.policies[0], TOOL_SURFACES.policies[2])
    a2a = Route("/", plain_route, methods=["POST"])  # where A2A JSON-RPC is served
    with caplog.at_level(logging.INFO, logger="adcp_stale_cache"):
        with serve(StaleAdvisoryMiddleware(seller(), surfaces=without_misspelt)):
            assert said(caplog) == []
        with serve(StaleAdvisoryMiddleware(seller(a2a), surfaces=TOOL_SURFACES)):
            assert said(caplog) == []
    assert "surface_tools_unknown surface=get_signal:" in caplog.text


def test_a_surface_named_only_in_code_is_an_info(caplog: pytest.LogCaptureFixture) -> None:
    """A surface no tool is named after and no served name is close to (``rate_card``, only
    ever fetched with ``surface=``) is an INFO at start-up: a quick start stays quiet."""
    surfaces = Surfaces.of(TOOL_SURFACES.policies[0], SurfacePolicy(name="rate_card"))
    server = build_server("http://127.0.0.1:9/signals", advisories=False, surfaces=surfaces)
    app = StaleAdvisoryMiddleware(server.http_app(path="/mcp"), surfaces=surfaces)
    with caplog.at_level(logging.DEBUG, logger="adcp_stale_cache"), serve(app):
        assert said(caplog) == []
    assert "surface_tools_unknown surface=rate_card:" in caplog.text


def test_a_server_started_alone_says_it_at_its_first_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``AdvisoryMiddleware`` on a server no ASGI middleware wraps (here fastmcp's in-memory
    client; ``fastmcp run`` and stdio alike): said once, at the first message, before any
    call; a surface with paths is the ASGI middleware's to check, not this one's."""
    server = build_server("http://127.0.0.1:9/signals", surfaces=TOOL_SURFACES)

    async def list_twice() -> None:
        async with Client(server) as client:
            await asyncio.wait_for(client.list_tools(), 20)
            await asyncio.wait_for(client.list_tools(), 20)

    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"):
        asyncio.run(list_twice())
    assert said(caplog) == [MISSPELT]


def test_fastmcp_run_says_it_at_the_first_listing() -> None:
    """Started by the ``fastmcp run`` CLI with a misspelt surface: nothing said at start (no
    lifespan of ours runs), the WARNING at the client's first listing, before any call."""
    port = free_port()
    env = {"ADCP_TEST_SIGNALS_URL": "http://127.0.0.1:9/signals", "ADCP_TEST_MISSPELT": "1"}
    with tempfile.TemporaryFile() as log:
        with fastmcp_run(f"{AGENT}:server", port, env, log):
            log.seek(0)
            assert b"surface_unserved" not in log.read()  # listening, and not said yet

            async def listing() -> None:
                async with session_at(f"http://127.0.0.1:{port}/mcp") as session:
                    await asyncio.wait_for(session.list_tools(), 20)

            asyncio.run(listing())
        log.seek(0)
        lines = log.read().decode(errors="replace").splitlines()
    # (Python's last-resort handler: WARNING and above, the message alone.)
    assert [line for line in lines if "surface_unserved" in line] == [MISSPELT]


def test_under_the_asgi_middleware_it_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """``AdvisoryMiddleware`` inside ``StaleAdvisoryMiddleware``: the start-up WARNING, and
    not a second one at the first message."""
    server = build_server("http://127.0.0.1:9/signals", surfaces=TOOL_SURFACES)
    app = StaleAdvisoryMiddleware(server.http_app(path="/mcp"), surfaces=TOOL_SURFACES)
    with caplog.at_level(logging.WARNING, logger="adcp_stale_cache"), serve(app) as agent:
        [unrouted, misspelt] = said(caplog)
        assert unrouted.startswith("surface_unserved surface=list_products paths=")
        assert misspelt == MISSPELT

        async def listing() -> None:
            async with session_at(f"{agent}/mcp") as session:
                await asyncio.wait_for(session.list_tools(), 20)

        asyncio.run(listing())
        assert len(said(caplog)) == 2


try:  # fastmcp 3 and 4
    from fastmcp.tools import ToolResult
except ImportError:  # fastmcp 2.x
    from fastmcp.tools.tool import ToolResult


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("answer", "reason"),
    [("json", None), ("text", "not_json"), ("raises", "is_error")],
    ids=["delivered", "text_result", "tool_raised"],
)
def test_an_advisory_the_tool_answer_drops_counts_as_lost(
    answer: str, reason: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """In process (fastmcp's in-memory client, the server's own ``AdvisoryMiddleware``): a
    stale serve whose tool answer cannot carry its advisory (a text result, a tool that
    raised) counts as lost, with its reason, never as delivered."""
    from fastmcp import Client, FastMCP

    from adcp_stale_cache import Upstream, UpstreamCache

    metrics = CountingMetrics()
    cache = UpstreamCache(surfaces=SURFACES, metrics=metrics)
    upstream, state = Upstream(name="signals-service"), {"up": True}

    async def load() -> Any:
        if not state["up"]:
            raise ConnectionRefusedError
        return SIGNALS

    server = FastMCP("signals-agent")
    server.add_middleware(AdvisoryMiddleware(cache=cache))

    # No annotations: fastmcp 2.10 cannot read string ones (this module's future import).
    async def get_signals():
        signals = await cache.fetch(upstream, "all", load, surface="get_signals")
        if not state["up"] and answer == "raises":
            raise ValueError("the decisioning platform failed after the signals were read")
        if answer == "text":
            return ToolResult(content=", ".join(s["name"] for s in signals))
        payload = {"signals": signals}
        return ToolResult(content=json.dumps(payload), structured_content=payload)

    server.tool(get_signals)

    async def stale() -> Any:
        async with Client(server) as client:
            await client.call_tool("get_signals", {})
            state["up"] = False
            await asyncio.sleep(PAST_TARGET)
            metrics.delivered = metrics.lost = 0
            return await client.call_tool("get_signals", {}, raise_on_error=False)

    with caplog.at_level("WARNING", logger="adcp_stale_cache"):
        result = asyncio.run(asyncio.wait_for(stale(), 30))
    texts = " ".join(getattr(block, "text", "") for block in result.content)
    lost = [r.getMessage() for r in caplog.records if r.getMessage().startswith("advisory_lost")]
    if reason is None:
        assert "STALE_RESPONSE" in texts
        assert (metrics.delivered, metrics.lost) == (1, 0) and not lost
    else:
        assert "STALE_RESPONSE" not in texts
        assert (metrics.delivered, metrics.lost) == (0, 1)
        [line] = lost
        assert f"reason={reason}:" in line and "upstream=signals-service" in line
