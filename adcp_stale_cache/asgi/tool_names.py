"""Which tool names an app's fastmcp servers serve, read at start-up through fastmcp's API.

Nothing else names tools readably (a plain ``mcp`` app, A2A, an undeclared POST route, an
opaque mount): names there are "unknown", never "not served". Start-up never fails on it.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from ..core.policy import SurfacePolicy, Surfaces
from .routes import routes_of

logger = logging.getLogger("adcp_stale_cache.tool_names")

#: difflib ratio of a misspelt surface name to a served one: a slip or two, never a task
#: sharing its stem (list_creatives is 0.8 of list_creative_formats).
MISSPELT_SIMILARITY = 0.9

#: How long one server's listing may take at start-up (a proxy server asks its remote).
LISTING_TIMEOUT_SECONDS = 5.0


class _Named(Protocol):
    name: str


@runtime_checkable
class ListsTools(Protocol):
    """A fastmcp 3.x or 4 server."""

    def list_tools(self, *, run_middleware: bool = True) -> Awaitable[Sequence[_Named]]: ...


@runtime_checkable
class GetsTools(Protocol):
    """A fastmcp 2.x server: its tools by the name they are served under."""

    def get_tools(self) -> Awaitable[Mapping[str, Any]]: ...


async def tool_names(server: object) -> frozenset[str] | None:
    """The names of the tools ``server`` (a fastmcp server) serves; None if unreadable."""
    try:
        with anyio.fail_after(LISTING_TIMEOUT_SECONDS):
            if isinstance(server, ListsTools):  # first: 3.x may keep a get_tools of its own
                listed = await server.list_tools(run_middleware=False)
                return frozenset(tool.name for tool in listed)
            if isinstance(server, GetsTools):
                return frozenset(await server.get_tools())
    except Exception:  # anything a listing raises, timeouts included: start-up goes on
        logger.debug("tool_listing_unread server=%s", type(server).__name__, exc_info=True)
        return None
    logger.debug("tool_listing_unread server=%s: no known listing", type(server).__name__)
    return None


@dataclass
class ToolSpace:
    """An app's fastmcp servers, and whether another part may dispatch by name (``opaque``)."""

    servers: list[object] = field(default_factory=list)
    opaque: bool = False


def tool_space(app: object, surfaces: Surfaces) -> ToolSpace:
    """The fastmcp servers of ``app`` (on its state or a mounted app's), and its opacity."""
    space = ToolSpace()
    declared = [path.rstrip("/") or "/" for policy in surfaces.policies for path in policy.paths]
    _visit(app, declared, space)
    return space


def _visit(app: object, declared: list[str], space: ToolSpace) -> None:
    server = getattr(app.state, "fastmcp_server", None) if isinstance(app, Starlette) else None
    if server is not None:  # its routes are the server's: MCP and its own custom routes
        space.servers.append(server)
        return
    routes = routes_of(app)
    if routes is None:
        space.opaque = True
        return
    for route in routes:
        _visit_route(route, declared, space)


def _visit_route(route: BaseRoute, declared: list[str], space: ToolSpace) -> None:
    if isinstance(route, Route):
        # A POST-able route no surface declares may dispatch by name (A2A JSON-RPC).
        if route.methods is None or "POST" in route.methods:
            space.opaque |= not any(route.path_regex.match(path) for path in declared)
    elif isinstance(route, Mount):
        matches = [route.path_regex.match(path) for path in declared]
        _visit(route.app, ["/" + match.group("path") for match in matches if match], space)
    elif not isinstance(route, WebSocketRoute):  # a Host, or a route of its own kind
        space.opaque = True


async def served_names(space: ToolSpace) -> frozenset[str] | None:
    """Every tool name the servers of ``space`` serve; None without servers or when unreadable."""
    names: set[str] = set()
    for server in space.servers:
        listed = await tool_names(server)
        if listed is None:
            return None
        names |= listed
    return frozenset(names) if space.servers else None


def report_untooled(
    surfaces: Sequence[SurfacePolicy], names: frozenset[str], *, complete: bool
) -> None:
    """Log each of ``surfaces`` that no tool of ``names`` is named after: a WARNING when a
    served name is close (misspelt), else an INFO (a surface named in code has no tool)."""
    served = ", ".join(sorted(names)) or "none"
    for policy in surfaces:
        if policy.name in names:
            continue
        close = difflib.get_close_matches(policy.name, names, n=1, cutoff=MISSPELT_SIMILARITY)
        if complete and close:
            logger.warning(
                "surface_unserved surface=%s tools=%s: no tool the app serves has that name "
                "(did you mean %s? it serves: %s): no request selects it",
                policy.name,
                [policy.name],
                close[0],
                served,
            )
        else:
            logger.info(
                "surface_tools_unknown surface=%s: no tool the app serves has that name (it "
                "serves: %s): only fetches naming it (surface=) select it, unless another "
                "part of the app serves the name (A2A, a route that cannot be read)",
                policy.name,
                served,
            )
