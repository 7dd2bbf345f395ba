"""failures.classify: every shape an upstream failure arrives in, one sanitised code."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import requests
import urllib3
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from adcp_stale_cache import (
    Failure,
    FailureKind,
    InvalidPayload,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamError,
    UpstreamHTTPError,
    classify,
    collect_advisories,
    http_status_failure,
)
from adcp_stale_cache.core.status_text import status_in_text
from adcp_stale_cache.demo.processes import free_port

from ..servers import serve

if sys.version_info < (3, 11):  # the backport's group, as anyio raises there
    from exceptiongroup import ExceptionGroup


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
        ExceptionGroup(
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
    from adcp_stale_cache.core.failures import UpstreamError, is_adcp_code

    assert is_adcp_code("SERVICE_UNAVAILABLE") and not is_adcp_code("SERVICE_UNAVAILABLE\n")
    assert not is_adcp_code("refused by db-01.internal") and not is_adcp_code(5)
    assert UpstreamError("RATE_LIMITED\n").code == "UPSTREAM_ERROR"  # a newline is not a code


# --- The HTTP clients sellers call with (requests, urllib3, aiohttp), raising for real ------


class Loopback:
    """Upstreams on 127.0.0.1, by what they do: ``"500"`` answers that status (any status),
    ``"refused"`` is a closed port, ``"silent"`` accepts and never answers, ``"reset"`` resets
    every connection, ``"closing"`` closes every connection before answering."""

    def __init__(self, http: str, urls: dict[str, str]) -> None:
        self.http, self.urls = http, urls

    def url(self, where: str) -> str:
        return f"{self.http}/{where}" if where.isdigit() else self.urls[where]


SEGMENTS = SurfacePolicy(name="get_signals", field="signals", freshness_target_seconds=0)
SIGNALS_AGENT = Upstream(name="signals-agent", url="https://signals.example/mcp")
# Short enough for a test, long enough for a loaded machine's loopback answer.
READ_TIMEOUT = 1.0

# What a failing upstream answers: text a buyer must never see (a host, a token).
SECRET_BODY = "db-7.internal down, token=s3cret"


async def answer(request: Request) -> Response:
    status = int(request.path_params["status"])
    return PlainTextResponse(SECRET_BODY, status_code=status, headers={"Retry-After": "7"})


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def url_of(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}/"


def drop_every_connection(sock: socket.socket, reset: bool) -> None:
    """Read the request, then close: with RST (SO_LINGER 0) or plainly. Ends when ``sock`` is
    closed."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                conn.recv(65536)
            if reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.fixture(scope="module")
def loopback() -> Iterator[Loopback]:
    app = Starlette(routes=[Route("/{status:int}", answer)])
    silent, resetting, closing = listener(), listener(), listener()  # silent: never accepted
    threads = [
        threading.Thread(target=drop_every_connection, args=(sock, reset), daemon=True)
        for sock, reset in ((resetting, True), (closing, False))
    ]
    for thread in threads:
        thread.start()
    try:
        with serve(app) as base:
            yield Loopback(
                base,
                {
                    "refused": f"http://127.0.0.1:{free_port()}/",
                    "silent": url_of(silent),
                    "reset": url_of(resetting),
                    "closing": url_of(closing),
                },
            )
    finally:
        silent.close()
        for sock in (resetting, closing):
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in threads:
            thread.join(5)


def requests_raising(url: str) -> None:
    requests.get(url, timeout=(2, READ_TIMEOUT)).raise_for_status()


def requests_retrying(url: str) -> None:
    """A session that retries 503s itself (urllib3's Retry), then gives up: RetryError."""
    session = requests.Session()
    retry = urllib3.Retry(
        total=1, status_forcelist=[503], backoff_factor=0, respect_retry_after_header=False
    )
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=retry))
    with session:
        session.get(url, timeout=(2, READ_TIMEOUT))


def segments_like_a_signals_agent(url: str) -> None:
    """A seller's own wrapper of requests, as the public signals agent writes it."""
    response = requests.get(url, timeout=(2, READ_TIMEOUT))
    if response.status_code != 200:
        raise Exception(f"Failed to fetch segments: {response.status_code} {response.text}")


def urllib3_plain(url: str) -> None:
    with urllib3.PoolManager() as pool:
        pool.request("GET", url, retries=False, timeout=READ_TIMEOUT)


def urllib3_retrying(url: str) -> None:
    retry = urllib3.Retry(
        total=1, status_forcelist=[500], backoff_factor=0, respect_retry_after_header=False
    )
    with urllib3.PoolManager() as pool:
        pool.request("GET", url, retries=retry, timeout=READ_TIMEOUT)


def urllib3_status_as_runtime_error(url: str) -> None:
    with urllib3.PoolManager() as pool:
        response = pool.request("GET", url, retries=False, timeout=READ_TIMEOUT)
    if response.status >= 400:
        raise RuntimeError(f"inventory service answered HTTP {response.status}")


async def aiohttp_raising(url: str, *, sock_read: float | None = None) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None if sock_read else READ_TIMEOUT, sock_read=sock_read)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        response.raise_for_status()


async def aiohttp_reading_slowly(url: str) -> None:
    await aiohttp_raising(url, sock_read=READ_TIMEOUT)


NEEDS_AIOHTTP = pytest.mark.skipif(
    importlib.util.find_spec("aiohttp") is None,
    reason="aiohttp not installed: pip install -e '.[dev]' (CI's test stage has it)",
)

Call = Callable[[str], object]
HTTP_5XX = FailureKind.HTTP_5XX
CLIENT_CASES = [
    # (call, where, code, kind, retry_after)
    (requests_raising, "refused", "CONNECTION_REFUSED", FailureKind.CONNECTION, None),
    (requests_raising, "silent", "TIMEOUT", FailureKind.TIMEOUT, None),
    (requests_raising, "reset", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (requests_raising, "closing", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (requests_raising, "500", "UPSTREAM_HTTP_500", HTTP_5XX, 7.0),
    (requests_raising, "503", "UPSTREAM_HTTP_503", HTTP_5XX, 7.0),
    (requests_raising, "429", "UPSTREAM_HTTP_429", FailureKind.RATE_LIMITED, 7.0),
    (requests_raising, "404", "UPSTREAM_ERROR", FailureKind.UNEXPECTED, None),
    (requests_retrying, "503", "UPSTREAM_HTTP_503", HTTP_5XX, None),
    (segments_like_a_signals_agent, "refused", "CONNECTION_REFUSED", FailureKind.CONNECTION, None),
    (segments_like_a_signals_agent, "500", "UPSTREAM_HTTP_500", HTTP_5XX, None),
    (segments_like_a_signals_agent, "503", "UPSTREAM_HTTP_503", HTTP_5XX, None),
    (
        segments_like_a_signals_agent,
        "429",
        "UPSTREAM_HTTP_429",
        FailureKind.RATE_LIMITED,
        None,
    ),
    (segments_like_a_signals_agent, "404", "UPSTREAM_ERROR", FailureKind.UNEXPECTED, None),
    (urllib3_plain, "refused", "CONNECTION_REFUSED", FailureKind.CONNECTION, None),
    (urllib3_plain, "silent", "TIMEOUT", FailureKind.TIMEOUT, None),
    (urllib3_plain, "reset", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (urllib3_plain, "closing", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (urllib3_retrying, "500", "UPSTREAM_HTTP_500", HTTP_5XX, None),
    (urllib3_status_as_runtime_error, "502", "UPSTREAM_HTTP_502", HTTP_5XX, None),
    (urllib3_status_as_runtime_error, "404", "UPSTREAM_ERROR", FailureKind.UNEXPECTED, None),
    (aiohttp_raising, "refused", "CONNECTION_REFUSED", FailureKind.CONNECTION, None),
    (aiohttp_raising, "silent", "TIMEOUT", FailureKind.TIMEOUT, None),
    (aiohttp_reading_slowly, "silent", "TIMEOUT", FailureKind.TIMEOUT, None),
    (aiohttp_raising, "reset", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (aiohttp_raising, "closing", "CONNECTION_RESET", FailureKind.CONNECTION, None),
    (aiohttp_raising, "500", "UPSTREAM_HTTP_500", HTTP_5XX, 7.0),
    (aiohttp_raising, "503", "UPSTREAM_HTTP_503", HTTP_5XX, 7.0),
    (aiohttp_raising, "429", "UPSTREAM_HTTP_429", FailureKind.RATE_LIMITED, 7.0),
    (aiohttp_raising, "404", "UPSTREAM_ERROR", FailureKind.UNEXPECTED, None),
]


def client_case(call: Call, where: str, *expected: object) -> Any:
    marks = [NEEDS_AIOHTTP] if call.__name__.startswith("aiohttp") else []
    return pytest.param(call, where, *expected, marks=marks, id=f"{call.__name__}-{where}")


async def run(call: Call, url: str) -> None:
    if inspect.iscoroutinefunction(call):
        await asyncio.wait_for(call(url), 10)
    else:  # a blocking client, in a worker thread as sellers run it
        await asyncio.wait_for(asyncio.to_thread(call, url), 10)


@pytest.mark.parametrize(
    ("call", "where", "code", "kind", "retry_after"),
    [client_case(*case) for case in CLIENT_CASES],
)
async def test_http_clients_failures_are_classified_and_served_stale(
    loopback: Loopback,
    call: Call,
    where: str,
    code: str,
    kind: FailureKind,
    retry_after: float | None,
) -> None:
    url = loopback.url(where)
    with pytest.raises(BaseException) as raised:  # whatever the client raises
        await run(call, url)
    failure = classify(raised.value)
    assert (failure.code, failure.kind, failure.retry_after) == (code, kind, retry_after)

    # Through the cache: an outage serves the entry it holds, with a sanitised advisory.
    cache = UpstreamCache(surfaces=Surfaces.of(SEGMENTS))
    failing = False

    async def get_signals() -> dict[str, Any]:
        if failing:
            await run(call, url)
        return {"signals": ["s1"]}

    await cache.fetch(SIGNALS_AGENT, "signals", get_signals, surface=SEGMENTS)
    failing = True
    if kind is FailureKind.UNEXPECTED:  # a 4xx is the caller's problem: never served stale
        with pytest.raises(type(raised.value)):
            await cache.fetch(SIGNALS_AGENT, "signals", get_signals, surface=SEGMENTS)
        return
    with collect_advisories() as advisories:
        served = await cache.fetch(SIGNALS_AGENT, "signals", get_signals, surface=SEGMENTS)
    assert served == {"signals": ["s1"]}
    [advisory] = advisories.errors()
    fixed = classify(raised.value, SEGMENTS.upstream_timeout_seconds).message
    assert advisory["details"]["original_error"] == {"code": code, "message": fixed}
    for secret in ("db-7", "s3cret", "127.0.0.1", "Failed to fetch"):
        assert secret not in str(advisory)


# --- A status stated in a bare exception's text -------------------------------------------

STATED = [
    ("Failed to fetch segments: 500 Internal Server Error", 500),
    ('Failed to fetch segments: 503 {"error": "db-7.internal down"}', 503),
    ("LiveRamp authentication failed: 429 slow down", 429),
    ("Error fetching page 3: 502", 502),
    ("HTTP 503", 503),
    ("HTTP/1.1 502 Bad Gateway", 502),
    ("HTTP Error 504: Gateway Timeout", 504),
    ("status code: 504", 504),
    ("status_code=500", 500),
    ("upstream said 503 Service Unavailable", 503),
    ("500 Server Error: Internal Server Error for url: http://x.example/a", 500),
    ("request failed (429 Too Many Requests)", 429),
]
NOT_STATED = [
    "id 500123",
    "took 500 ms",
    "Failed to fetch segments: took 500 ms",
    "Failed: 500 ms",
    "Failed: 500 records invalid",
    "Failed to fetch 500 segments",
    "Failed to connect to db.internal:503",
    "Failed to fetch http://x.example:500/a",
    "Failed to fetch segments: 404 Not Found",
    "invalid page size: 500",
    "processed 1,500 rows",
    "value 5.003",
    "HTTP 5003",
    "HTTP 404",
    "order 500 created",
    "segment 503 Service",
    "",
]


@pytest.mark.parametrize(("text", "code"), STATED)
def test_a_status_standing_as_one_is_read(text: str, code: int) -> None:
    assert status_in_text(text) == code


@pytest.mark.parametrize("text", NOT_STATED)
def test_a_number_that_is_no_status_is_not_read(text: str) -> None:
    assert status_in_text(text) is None


OUTAGE_STATUSES = st.one_of(st.integers(500, 599), st.just(429))
NOT_OUTAGE_STATUSES = st.integers(0, 99_999).filter(lambda n: not (500 <= n <= 599 or n == 429))
PLAIN_WORDS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz "), max_size=40)


@given(status=OUTAGE_STATUSES, what=PLAIN_WORDS, body=st.text(max_size=200))
def test_a_failure_then_its_status_first_is_read_whatever_the_body(
    status: int, what: str, body: str
) -> None:
    assert status_in_text(f"Failed to fetch {what}: {status} {{{body}") == status


@given(
    number=NOT_OUTAGE_STATUSES,
    template=st.sampled_from(
        ["HTTP {}", "status code {}", "{} Service Unavailable", "Failed to fetch segments: {} x"]
    ),
)
def test_no_other_number_is_an_outage_status(number: int, template: str) -> None:
    assert status_in_text(template.format(number)) is None


@given(
    status=OUTAGE_STATUSES,
    unit=st.sampled_from(["ms", "s", "seconds", "bytes", "MB", "%", "items", "rows"]),
    lead=st.sampled_from(["took {} {}", "Failed: {} {}", "Failed to fetch segments: {} {}"]),
)
def test_a_figure_with_its_unit_is_no_status(status: int, unit: str, lead: str) -> None:
    assert status_in_text(lead.format(status, unit)) is None


@given(status=OUTAGE_STATUSES, more=st.integers(0, 999), lead=st.sampled_from(["id ", "HTTP "]))
def test_a_status_inside_a_longer_number_is_none(status: int, more: int, lead: str) -> None:
    assert status_in_text(f"{lead}{status}{more}") is None


@given(st.text(max_size=2000))
def test_any_text_reads_without_error(text: str) -> None:
    assert status_in_text(text) in (None, 429, *range(500, 600))


class SegmentsError(Exception):
    """A seller's own type: its message and attributes are its own, never read unasked."""

    status_code = 502  # what the seller answers its own callers with (a REST mapping)


@pytest.mark.parametrize("bare", [Exception, RuntimeError, OSError, ConnectionError])
def test_bare_exceptions_stating_a_status_are_outages(bare: type[Exception]) -> None:
    failure = classify(bare("Failed to fetch segments: 503 db-7.internal token=s3cret"))
    assert (failure.code, failure.kind) == ("UPSTREAM_HTTP_503", FailureKind.HTTP_5XX)
    assert failure.message == "Upstream answered HTTP 503"  # never the exception's text


def test_a_bare_exception_carrying_a_status_attribute_is_an_outage() -> None:
    exc = Exception("segments unavailable")
    exc.status_code = 503  # type: ignore[attr-defined]
    assert classify(exc).code == "UPSTREAM_HTTP_503"
    response = httpx.Response(429, headers={"Retry-After": "12"})
    exc = RuntimeError("rate limited")
    exc.response = response  # type: ignore[attr-defined]
    assert (classify(exc).code, classify(exc).retry_after) == ("UPSTREAM_HTTP_429", 12.0)


def test_a_sellers_own_type_is_not_read_unless_mapped() -> None:
    own = SegmentsError("Failed to fetch segments: 503 Service Unavailable")
    assert classify(own).kind is FailureKind.UNEXPECTED  # its status_code is the seller's own
    mapped = classify(own, None, {SegmentsError: http_status_failure})
    assert mapped.code == "UPSTREAM_HTTP_502"  # asked: its attribute first, then its text
    texted = classify(KeyError("x"), None, {KeyError: http_status_failure})
    assert texted.kind is FailureKind.UNEXPECTED  # no status stated: the usual rules


def test_http_status_failure_of_a_status() -> None:
    assert http_status_failure(503) == Failure(
        FailureKind.HTTP_5XX, "UPSTREAM_HTTP_503", "Upstream answered HTTP 503"
    )
    assert http_status_failure(429) == Failure(
        FailureKind.RATE_LIMITED, "UPSTREAM_HTTP_429", "Upstream rate limited the request"
    )
    assert http_status_failure(404) is None and http_status_failure(200) is None


def test_a_4xx_wrapped_by_a_bare_exception_is_not_an_outage() -> None:
    request = httpx.Request("GET", "http://u")
    status = httpx.HTTPStatusError("x", request=request, response=httpx.Response(404))
    assert classify(chained(Exception("lookup failed"), status)).kind is FailureKind.UNEXPECTED


def test_a_status_attribute_that_raises_reads_as_none() -> None:
    class Odd(Exception):
        __module__ = "requests.exceptions"  # as if requests raised it

        @property
        def response(self) -> object:
            raise RuntimeError("no response")

    assert classify(Odd("x")).kind is FailureKind.UNEXPECTED
