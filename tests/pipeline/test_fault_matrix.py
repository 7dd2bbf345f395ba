"""The fault matrix: every upstream fault against every cache state, with its outcome.

The table below is the one published in docs/fault-matrix.md (a test keeps the two equal).
Faults are injected with respx under the httpx transport; tests/e2e/test_real_faults.py repeats
the socket-level ones (hang, reset mid-body, TLS) against real loopback servers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from adcp_stale_cache import (
    CachingTransport,
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
    service_unavailable,
)

from ..conftest import FakeClock

URL = "http://inventory.internal/products"
GOOD = {"products": [{"product_id": "p1"}]}
POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=100
)


def raises(exc: Exception) -> Any:
    return exc


FAULTS: dict[str, tuple[Any, str]] = {
    # name: (respx side effect, original_error.code or outcome marker)
    "connection refused": (
        httpx.ConnectError("[Errno 111] Connection refused"),
        "CONNECTION_REFUSED",
    ),
    "connect timeout": (httpx.ConnectTimeout("timed out"), "TIMEOUT"),
    "read timeout / hang": (httpx.ReadTimeout("timed out"), "TIMEOUT"),
    "reset mid-body": (
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
        "CONNECTION_RESET",
    ),
    "HTTP 500": (httpx.Response(500), "UPSTREAM_HTTP_500"),
    "HTTP 502": (httpx.Response(502), "UPSTREAM_HTTP_502"),
    "HTTP 503": (httpx.Response(503), "UPSTREAM_HTTP_503"),
    "HTTP 504": (httpx.Response(504), "UPSTREAM_HTTP_504"),
    "HTTP 429 + Retry-After": (
        httpx.Response(429, headers={"Retry-After": "7"}),
        "UPSTREAM_HTTP_429",
    ),
    "200, body not JSON": (
        httpx.Response(200, text="<html>", headers={"content-type": "application/json"}),
        "INVALID_PAYLOAD",
    ),
    "200, not a valid payload": (httpx.Response(200, json={"items": []}), "INVALID_PAYLOAD"),
    "DNS failure": (httpx.ConnectError("[Errno -2] Name or service not known"), "DNS_FAILURE"),
    "TLS error": (
        httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
        "TLS_ERROR",
    ),
    "upstream adcp_error": (
        httpx.Response(200, json={"adcp_error": {"code": "SERVICE_UNAVAILABLE", "message": "m"}}),
        "SERVICE_UNAVAILABLE",
    ),
    "HTTP 404 (caller's problem)": (httpx.Response(404, json={"errors": []}), "4xx"),
    "caller cancellation": ("cancel", "cancel"),
}

STATES = {"none": None, "fresh": 5, "past target": 30, "past max-stale": 111}


def expected(fault: str, state: str) -> str:
    code = FAULTS[fault][1]
    if state == "fresh":
        return "fresh, no call"
    if code == "cancel":
        return "caller cancelled, call goes on"
    if code == "4xx":
        return "4xx passed through"
    if state == "past target":
        return f"stale + advisory {code}"
    return f"UpstreamUnavailable {code}"


def validate(response: httpx.Response) -> None:
    from adcp_stale_cache import InvalidPayload

    if response.is_success and "products" not in response.json():
        raise InvalidPayload("no products")


async def observe(fault: str, state: str, clock: FakeClock) -> str:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    transport = CachingTransport(
        cache, Upstream(name="inventory-service"), surface="get_products", validate=validate
    )
    client = httpx.AsyncClient(transport=transport)
    route = respx.get(URL)
    age = STATES[state]
    if age is not None:
        route.mock(return_value=httpx.Response(200, json=GOOD))
        await client.get(URL)
        clock.advance(age)
    effect = FAULTS[fault][0]
    calls_before = route.call_count
    finished: list[bool] = []
    if effect == "cancel":

        async def slow(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(0.1)
            finished.append(True)
            return httpx.Response(200, json=GOOD)

        route.mock(side_effect=slow)
    elif isinstance(effect, Exception):
        route.mock(side_effect=effect)
    else:
        route.mock(return_value=effect)
    with collect_advisories() as advisories:
        try:
            if effect == "cancel":
                task = asyncio.ensure_future(client.get(URL))
                await asyncio.sleep(0.02)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    await asyncio.sleep(0.15)  # the shared call finishes for the others
                    return "caller cancelled, call goes on" if finished else "?"
                return "fresh, no call" if route.call_count == calls_before else "?"
            response = await client.get(URL)
        except UpstreamUnavailable as exc:
            assert not advisories
            error = service_unavailable(exc).to_dict()
            if fault.startswith("HTTP 429"):
                assert error["retry_after"] == 7
            return f"UpstreamUnavailable {exc.failure.code}"
    if route.call_count == calls_before:
        assert not advisories and response.json() == GOOD
        return "fresh, no call"
    if response.status_code == 404:
        assert not advisories
        return "4xx passed through"
    [advisory] = advisories.errors()
    assert response.status_code == 200 and response.json() == GOOD
    assert advisory["details"]["cache_age_seconds"] == age
    return f"stale + advisory {advisory['details']['original_error']['code']}"


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("fault", list(FAULTS))
@respx.mock
async def test_fault_matrix(fault: str, state: str, clock: FakeClock) -> None:
    assert await observe(fault, state, clock) == expected(fault, state)


def render() -> str:
    """The matrix as the Markdown table published in the docs."""
    lines = [
        "| fault | " + " | ".join(f"entry {s}" for s in STATES) + " |",
        "| --- |" + " --- |" * len(STATES),
    ]
    for fault in FAULTS:
        lines.append(f"| {fault} | " + " | ".join(expected(fault, s) for s in STATES) + " |")
    return "\n".join(lines)


def test_docs_publish_this_matrix() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "fault-matrix.md").read_text()
    assert render() in doc, (
        "regenerate docs/fault-matrix.md from tests/pipeline/test_fault_matrix.py::render"
    )
