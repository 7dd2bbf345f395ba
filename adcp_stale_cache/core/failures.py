"""Upstream failures classified into ``original_error`` ``{code, message}``: fixed messages,
since raw exception text may carry hosts, tokens or paths."""

from __future__ import annotations

import asyncio
import email.message
import logging
import math
import re
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeGuard

from .policy import FailureKind, Upstream
from .status_text import status_in_text

logger = logging.getLogger("adcp_stale_cache")

_ADCP_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def is_adcp_code(value: object) -> TypeGuard[str]:
    """True for a whole AdCP error code (``SERVICE_UNAVAILABLE``): nothing else is repeated."""
    return isinstance(value, str) and _ADCP_CODE.fullmatch(value) is not None


def retry_after_of(headers: Mapping[str, str] | email.message.Message) -> float | None:
    """An HTTP answer's ``Retry-After`` in delay-seconds, or None (an HTTP date too)."""
    value = headers.get("retry-after")
    return delta_seconds(value.strip()) if isinstance(value, str) else None


#: The most seconds an upstream's number is read as (RFC 9111's cap): no overflow.
MAX_STATED_SECONDS = 2**31


def stated_seconds(value: object) -> float | None:
    """Seconds a JSON number states, capped; None for a non-number, a negative or NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return float(min(value, MAX_STATED_SECONDS)) if value >= 0 else None


def delta_seconds(text: str | None) -> float | None:
    """HTTP delta-seconds (RFC 9111 1.2.2): ASCII digits only, capped; else None."""
    if text is None or not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0")  # int() refuses 4,300 digits and more: never asked
    return stated_seconds(int(digits or 0) if len(digits) <= 10 else MAX_STATED_SECONDS)


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified upstream failure, safe to show a buyer."""

    kind: FailureKind
    code: str
    message: str
    retry_after: float | None = None


#: The breaker is open and this process saw no failure yet (a restart, say).
CIRCUIT_OPEN = Failure(FailureKind.CONNECTION, "CIRCUIT_OPEN", "Upstream is failing; calls paused")
UNKNOWN_FAILURE = Failure(FailureKind.UNEXPECTED, "UPSTREAM_ERROR", "Upstream call failed")
_CONNECTION_FAILED = Failure(
    FailureKind.CONNECTION, "CONNECTION_ERROR", "Connection to upstream failed"
)
BUDGET_SPENT = Failure(FailureKind.TIMEOUT, "TIMEOUT", "Request time budget spent before the call")


class UpstreamError(Exception):
    """Raise from an upstream call when the upstream answered with an AdCP error: ``code``
    becomes ``original_error.code``, the message is kept for logs only."""

    def __init__(self, code: str, message: str = "", *, retry_after: float | None = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code if is_adcp_code(code) else "UPSTREAM_ERROR"
        self.retry_after = retry_after


class StaleBeyondBound(UpstreamError):
    """An upstream's own stale serve, older than the surface may serve at all."""


class InvalidPayload(Exception):
    """Raise from an upstream call (or a ``validate`` hook) for an unusable 2xx answer."""


class UpstreamHTTPError(Exception):
    """An upstream answered with a status that counts as an outage (5xx, 429)."""

    def __init__(self, status_code: int, *, retry_after: float | None = None):
        super().__init__(f"upstream answered HTTP {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


class UpstreamUnavailable(Exception):
    """An upstream failed and no cached entry could stand in for it."""

    def __init__(self, upstream: Upstream, failure: Failure):
        super().__init__(f"upstream {upstream.name!r} unavailable: {failure.code}")
        self.upstream = upstream
        self.failure = failure


def http_status_failure(source: int | BaseException) -> Failure | None:
    """The outage (5xx, 429) a status or an exception's attributes or text state, or None;
    for your own types: ``failure_types={SegmentsError: http_status_failure}``."""
    if isinstance(source, int):
        return _status_failure(source, None)
    stated = _stated_status(source) or _status_of_text(source)
    return _status_failure(*stated) if stated is not None else None


def _status_failure(status_code: int, retry_after: float | None) -> Failure | None:
    if status_code == 429:
        return Failure(
            FailureKind.RATE_LIMITED,
            "UPSTREAM_HTTP_429",
            "Upstream rate limited the request",
            retry_after,
        )
    if status_code >= 500:
        return Failure(
            FailureKind.HTTP_5XX,
            f"UPSTREAM_HTTP_{status_code}",
            f"Upstream answered HTTP {status_code}",
            retry_after,
        )
    return None


#: A :class:`Failure`, an AdCP code, or a function returning either (None: the usual rules).
FailureMeaning = Failure | str | Callable[[BaseException], Failure | str | None]

FailureTypes = Mapping[type[BaseException], FailureMeaning]

#: What ``UpstreamCache(failure_types=...)`` takes: a mapping, or one function for all.
FailureTypesLike = FailureTypes | Callable[[BaseException], Failure | str | None]


def failure_types_of(given: FailureTypesLike | None) -> dict[type[BaseException], FailureMeaning]:
    """A mapping of exception types to meanings."""
    if given is None:
        return {}
    if callable(given) and not isinstance(given, Mapping):
        return {BaseException: given}
    return dict(given)


# Codes that say only "it failed": an adopter's meaning is more specific.
_GENERIC_CODES = frozenset({"CONNECTION_ERROR", "UPSTREAM_ERROR"})


def classify(
    exc: BaseException,
    timeout_seconds: float | None = None,
    failure_types: FailureTypes | None = None,
) -> Failure:
    """Classify an exception raised by an upstream call, its groups and chains included;
    ``failure_types`` give meanings unless the exception's causes say something more specific."""
    found = list(causes_of(exc))
    if failure_types:
        mapped = _mapped(found, failure_types)
        if mapped is not None:
            meant, matched = mapped
            # Only its causes: its own name or message would override what the adopter said.
            causes = list(causes_of(matched))[1:]
            cancelled = _cancelled(list(causes_of(matched, contexts=False))[1:])
            own = _from_chain(causes, timeout_seconds, cancelled)
            return meant if own.code in _GENERIC_CODES else own
    return _from_chain(found, timeout_seconds, _cancelled(causes_of(exc, contexts=False)))


def _from_chain(
    found: list[BaseException], timeout_seconds: float | None, cancelled: bool
) -> Failure:
    for candidate in found:
        failure = _explicit(candidate)
        if failure is not None:
            return failure
    # Most specific first: a refused connection usually arrives wrapped in a ConnectError.
    for test, failure in _TRANSPORT_RULES:
        if any(test(e) for e in found):
            if failure.kind is FailureKind.TIMEOUT and timeout_seconds is not None:
                return Failure(
                    FailureKind.TIMEOUT,
                    "TIMEOUT",
                    f"Upstream did not answer within {_seconds(timeout_seconds)}",
                )
            return failure
    if cancelled:  # a kept-open MCP session whose server died ends its calls so
        return _CONNECTION_FAILED
    return UNKNOWN_FAILURE


def _cancelled(raised: Iterable[BaseException]) -> bool:
    """Whether a cancellation was raised (not merely being handled)."""
    return any(isinstance(e, asyncio.CancelledError) for e in raised)


def _mapped(
    found: list[BaseException], failure_types: FailureTypes
) -> tuple[Failure, BaseException] | None:
    """The first meaning the mapping gives an exception of the chain, and that exception."""
    for candidate in found:
        for exc_type, meaning in failure_types.items():
            if not isinstance(candidate, exc_type):
                continue
            try:
                meant = meaning(candidate) if callable(meaning) else meaning
            except Exception as error:  # the adopter's bug must not turn outages into crashes
                _warn_once(meaning, error)
                continue
            if isinstance(meant, Failure):
                return meant, candidate
            if isinstance(meant, str):
                return _upstream_code(meant, None), candidate
    return None


_warned_meanings: set[int] = set()


def _warn_once(meaning: object, error: Exception) -> None:
    if id(meaning) not in _warned_meanings and len(_warned_meanings) < 256:
        _warned_meanings.add(id(meaning))
        logger.warning(
            "failure_types_error meaning=%s error=%s: ignored for this exception",
            getattr(meaning, "__qualname__", type(meaning).__name__),
            type(error).__name__,
        )


def _upstream_code(code: str, retry_after: float | None) -> Failure:
    code = code if is_adcp_code(code) else "UPSTREAM_ERROR"
    return Failure(FailureKind.UPSTREAM_ERROR, code, f"Upstream returned {code}", retry_after)


def _explicit(exc: BaseException) -> Failure | None:
    if isinstance(exc, UpstreamError):
        return _upstream_code(exc.code, exc.retry_after)
    if "ADCPTaskError" in _names(exc):  # the adcp client's: the agent answered an AdCP error
        code = _first_code(getattr(exc, "errors", None))
        if code is not None:
            return _upstream_code(code, None)
    if isinstance(exc, InvalidPayload):
        return Failure(
            FailureKind.INVALID_PAYLOAD, "INVALID_PAYLOAD", "Upstream returned an invalid payload"
        )
    if isinstance(exc, UpstreamHTTPError):
        return _status_failure(exc.status_code, exc.retry_after)
    stated = _http_status(exc)
    if stated is None:
        return None
    # A 4xx is no outage, whatever the type says (requests' HTTPError is an OSError).
    return _status_failure(*stated) or (UNKNOWN_FAILURE if 400 <= stated[0] < 500 else None)


_HTTP_CLIENTS = frozenset(
    {"aiohttp", "httpcore", "httpx", "httpx2", "requests", "urllib", "urllib3"}
)

# Only bare exceptions' text is read for a status: a seller's own subclass means its own.
_BARE_TYPES = frozenset({Exception, RuntimeError, OSError, ConnectionError})


def _client_classes(exc: BaseException) -> set[str]:
    found: set[str] = set()
    for cls in type(exc).__mro__:
        package = cls.__module__.partition(".")[0]
        if package in _HTTP_CLIENTS:
            found.add(f"{package}.{cls.__name__}")
    return found


def _http_status(exc: BaseException) -> tuple[int, float | None] | None:
    """The HTTP status an HTTP client's or a bare exception states, and its Retry-After."""
    classes = _client_classes(exc)
    bare = type(exc) in _BARE_TYPES
    stated = _stated_status(exc) if classes or bare else None
    if stated is None and bare:
        stated = _status_of_text(exc)
    if stated is None and "urllib3.ResponseError" in classes:  # its retries on a status ran out
        found = _RETRIES_RAN_OUT.fullmatch(_text(exc))
        stated = (int(found.group(1)), None) if found is not None else None
    return stated


# urllib3's ResponseError when Retry(status_forcelist=...) gives up.
_RETRIES_RAN_OUT = re.compile(r"too many ([1-5]\d\d) error responses")


def _stated_status(exc: BaseException) -> tuple[int, float | None] | None:
    """The HTTP status an exception's attributes state, and its Retry-After."""
    response = _attribute(exc, "response")
    for holder, name in ((exc, "status_code"), (exc, "status"), (response, "status_code")):
        status = _attribute(holder, name)
        if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
            headers = _attribute(exc, "headers") or _attribute(response, "headers")
            return status, (retry_after_of(headers) if _is_headers(headers) else None)
    return None


def _is_headers(value: object) -> TypeGuard[Mapping[str, str] | email.message.Message]:
    # The stdlib's http.client.HTTPMessage (urllib's) is no Mapping, but reads like one.
    return isinstance(value, (Mapping, email.message.Message))


def _status_of_text(exc: BaseException) -> tuple[int, float | None] | None:
    status = status_in_text(_text(exc))
    return (status, None) if status is not None else None


def _attribute(holder: object, name: str) -> object:
    # A property that raises reads as absent.
    try:
        return getattr(holder, name, None)
    except Exception:
        return None


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an argument whose __str__ raises
        return ""


def _first_code(errors: object) -> str | None:
    """The first code of an ``errors`` list (of models or dicts, by ``adcp`` version)."""
    for error in errors if isinstance(errors, list) else []:
        code = error.get("code") if isinstance(error, dict) else getattr(error, "code", None)
        if isinstance(code, str) and code:
            return code
    return None


def causes_of(exc: BaseException, *, contexts: bool = True) -> Iterator[BaseException]:
    """The exception, its groups' members and its cause/context chains, each once."""
    seen: set[int] = set()
    stack = [exc]
    while stack and len(seen) < 64:
        current = stack.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        members = getattr(current, "exceptions", None)  # an ExceptionGroup (3.11+ or backport)
        if isinstance(members, (list, tuple)):
            stack.extend(m for m in members if isinstance(m, BaseException))
        for linked in (current.__cause__, current.__context__ if contexts else None):
            if linked is not None:
                stack.append(linked)


def _names(exc: BaseException) -> set[str]:
    # httpx, httpcore and httpx2 (the mcp client) share class names but not classes.
    return {cls.__name__ for cls in type(exc).__mro__}


def _is_dns(exc: BaseException) -> bool:
    text = _text(exc).lower()
    return (
        isinstance(exc, socket.gaierror)
        or "name or service not known" in text
        or ("nodename nor servname" in text)
        or "temporary failure in name resolution" in text
    )


# requests' own connection errors are OSErrors, caught as such.
_CLIENT_RESETS = frozenset(
    {"urllib3.ProtocolError", "aiohttp.ServerDisconnectedError", "aiohttp.ClientPayloadError"}
)
_CLIENT_CONNECTION_ERRORS = frozenset(
    {"urllib3.NewConnectionError", "urllib3.MaxRetryError", "aiohttp.ClientConnectionError"}
)

_TRANSPORT_RULES = (
    (
        lambda e: isinstance(e, ConnectionRefusedError) or "connection refused" in _text(e).lower(),
        Failure(FailureKind.CONNECTION, "CONNECTION_REFUSED", "Upstream refused the connection"),
    ),
    (
        _is_dns,
        Failure(FailureKind.CONNECTION, "DNS_FAILURE", "Upstream host name did not resolve"),
    ),
    (
        lambda e: (
            isinstance(e, ssl.SSLError)
            or "SSLError" in _names(e)
            or "[ssl" in _text(e).lower()
            or "certificate verify failed" in _text(e).lower()
            or "aiohttp.ServerFingerprintMismatch" in _client_classes(e)
        ),
        Failure(FailureKind.CONNECTION, "TLS_ERROR", "TLS handshake with upstream failed"),
    ),
    (
        lambda e: (
            isinstance(e, (TimeoutError, asyncio.TimeoutError))
            or bool(_names(e) & {"TimeoutException", "ADCPTimeoutError"})
            or type(e).__name__.endswith("Timeout")
            or "urllib3.TimeoutError" in _client_classes(e)
        ),
        Failure(FailureKind.TIMEOUT, "TIMEOUT", "Upstream did not answer in time"),
    ),
    (
        lambda e: (
            isinstance(e, (ConnectionResetError, BrokenPipeError))
            or bool(_names(e) & {"RemoteProtocolError", "ReadError", "WriteError"})
            or bool(_client_classes(e) & _CLIENT_RESETS)
        ),
        Failure(FailureKind.CONNECTION, "CONNECTION_RESET", "Upstream connection was reset"),
    ),
    (
        lambda e: (
            isinstance(e, (ConnectionError, OSError, EOFError))
            or bool(
                _names(e)
                & {"TransportError", "NetworkError", "ConnectError", "ADCPConnectionError"}
            )
            or bool(_client_classes(e) & _CLIENT_CONNECTION_ERRORS)
        ),
        _CONNECTION_FAILED,
    ),
)


def _seconds(value: float) -> str:
    return f"{value:g}s"
