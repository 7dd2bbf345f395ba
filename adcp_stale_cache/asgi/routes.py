"""Which declared surface paths an app serves, read off its Starlette router at start-up.

Below a ``Host`` or a mount that is not a Starlette app or router, anything may be served:
paths there are "unknown", never "not served".
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route, Router, WebSocketRoute

from ..core.policy import SurfacePolicy, Surfaces


class Served(Enum):
    """Whether an app serves a path."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


def routes_of(app: object) -> Sequence[BaseRoute] | None:
    """The routes of a Starlette app or router; None for any other ASGI app."""
    return app.routes if isinstance(app, (Starlette, Router)) else None


def serves(routes: Sequence[BaseRoute], path: str) -> Served:
    """Whether a route among ``routes`` answers ``path`` (any method)."""
    unknown = False
    for route in routes:
        if isinstance(route, Route):
            if route.path_regex.match(path):
                return Served.YES
        elif isinstance(route, Mount):
            match = route.path_regex.match(path)
            inner = route.routes or routes_of(route.app)  # (routes: through its middleware)
            if match is None:
                continue
            if inner is None:
                unknown = True  # an opaque app below the prefix may answer it
                continue
            found = serves(inner, "/" + match.group("path"))
            if found is Served.YES:
                return found
            unknown = unknown or found is Served.UNKNOWN
        elif not isinstance(route, WebSocketRoute):  # a Host, or a route of its own kind
            unknown = True
    return Served.UNKNOWN if unknown else Served.NO


def unserved(
    routes: Sequence[BaseRoute], surfaces: Surfaces
) -> tuple[list[SurfacePolicy], list[SurfacePolicy]]:
    """The surfaces none of whose paths a route serves, and those whose paths cannot be told."""
    missing: list[SurfacePolicy] = []
    unknown: list[SurfacePolicy] = []
    for policy in surfaces.policies:
        # Requests match a path with or without its trailing slash (middleware._surface_at).
        found = {
            serves(routes, either)
            for path in policy.paths
            for either in {path, path.rstrip("/") or "/"}
        }
        if not found or Served.YES in found:
            continue
        (unknown if Served.UNKNOWN in found else missing).append(policy)
    return missing, unknown
