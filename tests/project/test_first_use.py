"""First use is quiet and clear: the README's FastAPI quick start, run as written on uvicorn
(lifespan on) against a real inventory service on loopback, logs no WARNING; with the
inventory down and nothing cached the buyer reads an AdCP ``SERVICE_UNAVAILABLE`` (503 and
a JSON body), never a traceback; a surface whose paths match no route is said at start-up."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from adcp_stale_cache import (
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamUnavailable,
)
from adcp_stale_cache.asgi import tool_names
from adcp_stale_cache.core.failures import Failure
from adcp_stale_cache.core.policy import FailureKind
from adcp_stale_cache.demo.processes import App, free_port

from ..project.test_examples import load, readme_quickstart
from ..servers import inventory_service, serve

QUICK_STARTS = {"readme": readme_quickstart, "example": lambda: load("fastapi_seller")}


@pytest.fixture
def inventory() -> Iterator[App]:
    with inventory_service() as app:
        yield app


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture(autouse=True)
def _earlier_garbage_freed() -> None:
    """Free what earlier tests in this worker left before a test's own capture begins: a task
    of theirs still pending when its loop closed logs "Task was destroyed" when it is freed,
    and that must not land among the warnings these tests count."""
    gc.collect()


@pytest.mark.e2e
@pytest.mark.parametrize("source", QUICK_STARTS)
def test_the_quick_start_is_quiet(
    source: str, inventory: App, caplog: pytest.LogCaptureFixture
) -> None:
    quickstart: ModuleType = QUICK_STARTS[source]()
    quickstart.inventory.base_url = inventory.url
    with caplog.at_level(logging.INFO), serve(quickstart.app) as url:
        answers = [httpx.post(f"{url}/api/get_products", timeout=10) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json()["products"]
    assert warnings(caplog) == []


@pytest.mark.e2e
@pytest.mark.parametrize("source", QUICK_STARTS)
def test_a_cold_outage_is_an_adcp_service_unavailable(
    source: str, caplog: pytest.LogCaptureFixture
) -> None:
    quickstart: ModuleType = QUICK_STARTS[source]()
    quickstart.inventory.base_url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    with caplog.at_level(logging.INFO), serve(quickstart.app) as url:
        request = {"brief": "b", "context": {"correlation_id": "c1"}}
        answer = httpx.post(f"{url}/api/get_products", json=request, timeout=10)
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    [error] = body["errors"]
    assert body["adcp_error"] == error
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert error["recovery"] == "transient"
    assert error["field"] == "products"
    assert error["details"]["upstream"] == {"name": "inventory-service"}
    assert error["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
    assert body["context"] == {"correlation_id": "c1"}
    for secret in ("Traceback", "127.0.0.1", "inventory.internal", 'File "'):
        assert secret not in answer.text
    # The outage is logged for the operator (serving's WARNING); no traceback (uvicorn's
    # "Exception in ASGI application" ERROR) and nothing else.
    assert [m.split()[0] for m in warnings(caplog)] == ["upstream_unavailable"]


UNAVAILABLE = UpstreamUnavailable(
    Upstream(name="inventory-service", url="https://inventory.example"),
    Failure(FailureKind.TIMEOUT, "TIMEOUT", "Upstream timed out", retry_after=2.5),
)
PRODUCTS = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))


def raising(error: Exception) -> Any:
    async def route(request: Request) -> JSONResponse:
        await request.body()
        raise error

    app = FastAPI()
    app.add_api_route("/api/get_products", route, methods=["POST"])
    app.add_api_route("/mcp", route, methods=["POST"])
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=Surfaces.of(PRODUCTS))
    return app


async def test_one_mcp_call_gets_an_is_error_tool_result() -> None:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "get_products", "arguments": {"context": {"k": 1}}}}  # fmt: skip
    transport = httpx.ASGITransport(app=raising(UNAVAILABLE))
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        answer = await http.post("/mcp", json=call)
    assert answer.status_code == 200
    reply = answer.json()
    assert reply["id"] == 7
    result = reply["result"]
    assert result["isError"] is True
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    [error] = result["structuredContent"]["errors"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and error["field"] == "products"
    assert error["retry_after"] == 3
    assert result["structuredContent"]["context"] == {"k": 1}
    assert answer.headers["retry-after"] == "3"


async def test_other_exceptions_propagate_unchanged() -> None:
    transport = httpx.ASGITransport(app=raising(RuntimeError("boom")))
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as http:
        with pytest.raises(RuntimeError, match="boom"):
            await http.post("/api/get_products", json={})


async def opaque(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app whose routes cannot be read."""


def starts(app: Any) -> None:
    with TestClient(app):  # lifespan startup, then shutdown
        pass


def test_a_surface_no_route_serves_is_said_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    misspelt = SurfacePolicy(name="list_creative_formats", paths=("/api/list_formats",))
    surfaces = Surfaces.of(PRODUCTS, misspelt)

    async def route(request: Request) -> JSONResponse:
        return JSONResponse({})

    app = FastAPI()
    app.add_api_route("/api/{tool}/v2", route, methods=["POST"])
    app.add_api_route("/api/get_products", route, methods=["POST"])
    app.add_middleware(StaleAdvisoryMiddleware, surfaces=surfaces)
    outer = StaleAdvisoryMiddleware(  # wrapping the router from outside, a Mount on the way
        Starlette(routes=[Mount("/api", routes=[Route("/get_products", route)])]),
        surfaces=surfaces,
    )
    for each in (app, outer):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="adcp_stale_cache"):
            starts(each)
        assert warnings(caplog) == [
            "surface_unserved surface=list_creative_formats paths=['/api/list_formats']: the "
            "app serves no route there (paths are matched without the app's root_path): its "
            "requests would fall to the default policy"
        ]


def test_paths_below_an_opaque_app_are_unknown_not_unserved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = StaleAdvisoryMiddleware(
        Starlette(routes=[Mount("/api", app=opaque)]), surfaces=Surfaces.of(PRODUCTS)
    )
    with caplog.at_level(logging.INFO, logger="adcp_stale_cache"):
        starts(app)
    assert warnings(caplog) == []
    assert "surface_routes_unknown surface=get_products" in caplog.text


class Listing:
    """Stands for a fastmcp server on the app's state (``app.state.fastmcp_server``): its
    listing answers ``tools``, raises ``error``, or never answers (``hang``)."""

    def __init__(self, *tools: str, error: Exception | None = None, hang: bool = False) -> None:
        self.tools, self.error, self.hang = tools, error, hang

    async def list_tools(self, *, run_middleware: bool = True) -> list[Any]:
        if self.hang:
            await anyio.sleep_forever()
        if self.error is not None:
            raise self.error
        return [SimpleNamespace(name=tool) for tool in self.tools]


def serving(server: object, surfaces: Surfaces) -> Any:
    app = Starlette(routes=[Route("/mcp", opaque)])
    app.state.fastmcp_server = server
    return StaleAdvisoryMiddleware(app, surfaces=surfaces)


BY_TOOL = Surfaces.of(SurfacePolicy(name="get_signals"), SurfacePolicy(name="get_signal"))


def test_tool_names_are_read_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="adcp_stale_cache"):
        starts(serving(Listing("get_signals"), BY_TOOL))
    [warning] = warnings(caplog)
    assert warning.startswith("surface_unserved surface=get_signal tools=['get_signal']: ")


@pytest.mark.parametrize(
    "listing", [Listing(error=RuntimeError("no listing")), Listing(hang=True), object()],
    ids=["raises", "hangs", "no_listing"],
)  # fmt: skip
@pytest.mark.timeout(30)
def test_an_unreadable_listing_never_fails_start_up(
    listing: object, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_names, "LISTING_TIMEOUT_SECONDS", 0.2)
    with caplog.at_level(logging.DEBUG, logger="adcp_stale_cache"):
        starts(serving(listing, BY_TOOL))
    assert warnings(caplog) == []
    assert "tool_listing_unread" in caplog.text
