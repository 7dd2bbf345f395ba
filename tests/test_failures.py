"""failures.classify: every shape an upstream failure arrives in, one sanitised code."""

from __future__ import annotations

import asyncio
import socket
import ssl

import httpx
import pytest

from adcp_stale_cache import FailureKind, InvalidPayload, UpstreamError, UpstreamHTTPError, classify


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


class ConnectError(Exception):
    """Stands in for httpx2.ConnectError: same name, another class (as the mcp client has)."""


CASES = [
    (
        ConnectionRefusedError(111, "Connection refused"),
        "CONNECTION_REFUSED",
        FailureKind.CONNECTION,
    ),
    (
        # What the mcp 2.x client raises for a refused connection.
        ExceptionGroup(  # noqa: F821 (3.11+, as the mcp client)
            "unhandled errors in a TaskGroup",
            [
                chained(
                    ConnectError("All connection attempts failed"),
                    ConnectionRefusedError(111, "refused"),
                )
            ],
        ),
        "CONNECTION_REFUSED",
        FailureKind.CONNECTION,
    ),
    (TimeoutError(), "TIMEOUT", FailureKind.TIMEOUT),
    (httpx.ReadTimeout("read"), "TIMEOUT", FailureKind.TIMEOUT),
    (
        chained(httpx.ConnectError("x"), socket.gaierror(-2, "Name or service not known")),
        "DNS_FAILURE",
        FailureKind.CONNECTION,
    ),
    (
        chained(httpx.ConnectError("x"), ssl.SSLCertVerificationError("certificate verify failed")),
        "TLS_ERROR",
        FailureKind.CONNECTION,
    ),
    (ConnectionResetError(104, "reset"), "CONNECTION_RESET", FailureKind.CONNECTION),
    (httpx.RemoteProtocolError("peer closed"), "CONNECTION_RESET", FailureKind.CONNECTION),
    (OSError(113, "No route to host"), "CONNECTION_ERROR", FailureKind.CONNECTION),
    (asyncio.CancelledError(), "CONNECTION_ERROR", FailureKind.CONNECTION),
    (UpstreamHTTPError(503), "UPSTREAM_HTTP_503", FailureKind.HTTP_5XX),
    (UpstreamHTTPError(429, retry_after=3), "UPSTREAM_HTTP_429", FailureKind.RATE_LIMITED),
    (
        httpx.HTTPStatusError(
            "x", request=httpx.Request("GET", "http://u"), response=httpx.Response(502)
        ),
        "UPSTREAM_HTTP_502",
        FailureKind.HTTP_5XX,
    ),
    (
        UpstreamError("SERVICE_UNAVAILABLE", "node db-7.internal down"),
        "SERVICE_UNAVAILABLE",
        FailureKind.UPSTREAM_ERROR,
    ),
    (UpstreamError("not a code; DROP TABLE"), "UPSTREAM_ERROR", FailureKind.UPSTREAM_ERROR),
    (InvalidPayload("x"), "INVALID_PAYLOAD", FailureKind.INVALID_PAYLOAD),
    (ValueError("bug"), "UPSTREAM_ERROR", FailureKind.UNEXPECTED),
]


@pytest.mark.parametrize(("exc", "code", "kind"), CASES)
def test_classify(exc: BaseException, code: str, kind: FailureKind) -> None:
    failure = classify(exc)
    assert (failure.code, failure.kind) == (code, kind)


@pytest.mark.parametrize(("exc", "code", "kind"), CASES)
def test_messages_never_carry_exception_text(
    exc: BaseException, code: str, kind: FailureKind
) -> None:
    message = classify(exc).message
    for secret in ("db-7.internal", "DROP TABLE", "Errno", "refused:", "attempts"):
        assert secret not in message


def test_4xx_status_error_is_not_an_outage() -> None:
    exc = httpx.HTTPStatusError(
        "x", request=httpx.Request("GET", "http://u"), response=httpx.Response(404)
    )
    assert classify(exc).kind is FailureKind.UNEXPECTED


def test_timeout_message_names_the_deadline() -> None:
    assert classify(TimeoutError(), 2.5).message == "Upstream did not answer within 2.5s"


def test_cyclic_chains_terminate() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert classify(a).kind is FailureKind.UNEXPECTED


def test_a_code_is_an_adcp_code_whole_or_not_at_all() -> None:
    from adcp_stale_cache.failures import UpstreamError, is_adcp_code

    assert is_adcp_code("SERVICE_UNAVAILABLE") and not is_adcp_code("SERVICE_UNAVAILABLE\n")
    assert not is_adcp_code("refused by db-01.internal") and not is_adcp_code(5)
    assert UpstreamError("RATE_LIMITED\n").code == "UPSTREAM_ERROR"  # a newline is not a code
