"""One place that turns an upstream failure into ``original_error`` ``{code, message}``.

Codes are the AdCP code the upstream returned (``SERVICE_UNAVAILABLE``), or a transport
identifier:

=====================  =====================================================
``TIMEOUT``            no answer within the upstream deadline
``CONNECTION_REFUSED`` nothing listens at the upstream's address
``CONNECTION_RESET``   the connection dropped mid-answer
``DNS_FAILURE``        the upstream's host name did not resolve
``TLS_ERROR``          the TLS handshake or certificate check failed
``CONNECTION_ERROR``   any other connection-level failure
``UPSTREAM_HTTP_<n>``  the upstream answered HTTP status ``n`` (5xx, 429)
``INVALID_PAYLOAD``    a 2xx answer that is not a valid payload
``UPSTREAM_ERROR``     any other exception (counts as an outage only if the policy says so)
=====================  =====================================================

The exceptions of the HTTP clients (httpx, requests, urllib3, aiohttp, the stdlib's urllib)
are recognised by their classes' modules, never imported. Messages are fixed templates: raw
exception text can carry hostnames, URLs with tokens or file paths, so it is logged by the
seller, never sent to a buyer.
"""

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
    """True for what may stand as an AdCP error code in an advisory (``SERVICE_UNAVAILABLE``):
    an upstream's text is never repeated as a code unless it is one, whole."""
    return isinstance(value, str) and _ADCP_CODE.fullmatch(value) is not None


def retry_after_of(headers: Mapping[str, str] | email.message.Message) -> float | None:
    """An HTTP answer's ``Retry-After`` hint in seconds, or None. RFC 9110 delay-seconds are
    digits only (``inf``, ``1e999`` and ``-1`` are not hints); an HTTP date is not worth
    parsing for a hint."""
    value = headers.get("retry-after")
    return delta_seconds(value.strip()) if isinstance(value, str) else None


#: The most seconds an upstream's number is read as (RFC 9111's cap, 68 years): more says
#: no more, and no conversion of a 400-digit number may overflow.
MAX_STATED_SECONDS = 2**31


def stated_seconds(value: object) -> float | None:
    """Seconds a JSON number states, at most :data:`MAX_STATED_SECONDS`; None for what
    states none (a string, a boolean, a negative, NaN, an infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return float(min(value, MAX_STATED_SECONDS)) if value >= 0 else None


def delta_seconds(text: str | None) -> float | None:
    """HTTP delta-seconds (RFC 9111 1.2.2): ASCII digits only (``inf``, ``-1``, ``1e9`` are
    not seconds), at most :data:`MAX_STATED_SECONDS`."""
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


#: The breaker is open and no failure was seen yet in this process (a restart, say).
CIRCUIT_OPEN = Failure(FailureKind.CONNECTION, "CIRCUIT_OPEN", "Upstream is failing; calls paused")
#: Any other exception.
UNKNOWN_FAILURE = Failure(FailureKind.UNEXPECTED, "UPSTREAM_ERROR", "Upstream call failed")
_CONNECTION_FAILED = Failure(
    FailureKind.CONNECTION, "CONNECTION_ERROR", "Connection to upstream failed"
)
#: The request's budget ran out before this upstream could be called.
BUDGET_SPENT = Failure(FailureKind.TIMEOUT, "TIMEOUT", "Request time budget spent before the call")


class UpstreamError(Exception):
    """Raise from an upstream call when the upstream answered with an AdCP error.

    ``code`` becomes ``original_error.code`` (e.g. ``SERVICE_UNAVAILABLE``); the upstream's own
    message is kept for logs only.
    """

    def __init__(self, code: str, message: str = "", *, retry_after: float | None = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code if is_adcp_code(code) else "UPSTREAM_ERROR"
        self.retry_after = retry_after


class StaleBeyondBound(UpstreamError):
    """An upstream's answer is its own stale serve, older than the surface may serve at all
    (its target plus max-stale): no answer to give, with the failure the upstream named."""


class InvalidPayload(Exception):
    """Raise from an upstream call (or a ``validate`` hook) for an unusable 2xx answer."""


class UpstreamHTTPError(Exception):
    """An upstream answered with a status that counts as an outage (5xx, 429)."""

    def __init__(self, status_code: int, *, retry_after: float | None = None):
        super().__init__(f"upstream answered HTTP {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


class UpstreamUnavailable(Exception):
    """An upstream failed and no cached entry could stand in for it.

    Sellers either let it fail the request or turn it into the fatal ``SERVICE_UNAVAILABLE``
    error with :func:`adcp_stale_cache.service_unavailable`.
    """

    def __init__(self, upstream: Upstream, failure: Failure):
        super().__init__(f"upstream {upstream.name!r} unavailable: {failure.code}")
        self.upstream = upstream
        self.failure = failure


def http_status_failure(source: int | BaseException) -> Failure | None:
    """The outage an HTTP status stands for (5xx, 429), or None (2xx-4xx, or no status).

    Given an exception, its status is read where it states one: an int ``status_code`` or
    ``status``, ``response.status_code``, or its text (``503 Service Unavailable``,
    ``HTTP 503``, ``Failed to fetch segments: 503 ...``). The built-in reading does so for
    bare ``Exception``, ``RuntimeError``, ``OSError`` and ``ConnectionError`` only; name your
    own types in ``failure_types={SegmentsError: http_status_failure}``.
    """
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


#: What one of an adopter's exception types means: a :class:`Failure`, an AdCP code
#: (``"SERVICE_UNAVAILABLE"``, which counts as the upstream's error, ``upstream_error``), or a
#: function of the exception returning either, or None when it says nothing of this one (a
#: type the seller also raises for permanent errors, say): the usual rules then apply.
FailureMeaning = Failure | str | Callable[[BaseException], Failure | str | None]

#: An adopter's own exception types and what they mean (see :data:`FailureMeaning`).
FailureTypes = Mapping[type[BaseException], FailureMeaning]

#: What ``UpstreamCache(failure_types=...)`` takes: a mapping, or one function reading every
#: exception.
FailureTypesLike = FailureTypes | Callable[[BaseException], Failure | str | None]


def failure_types_of(given: FailureTypesLike | None) -> dict[type[BaseException], FailureMeaning]:
    """A mapping of exception types to meanings; a lone function reads every exception."""
    if given is None:
        return {}
    if callable(given) and not isinstance(given, Mapping):
        return {BaseException: given}
    return dict(given)


# Codes that say only "it failed": a meaning the adopter gave is more specific than these.
_GENERIC_CODES = frozenset({"CONNECTION_ERROR", "UPSTREAM_ERROR"})


def classify(
    exc: BaseException,
    timeout_seconds: float | None = None,
    failure_types: FailureTypes | None = None,
) -> Failure:
    """Classify an exception raised by an upstream call (ExceptionGroups and chains included).

    The chain speaks first: this library's exceptions, HTTP statuses (httpx's, requests',
    urllib3's and aiohttp's status errors; a bare ``Exception`` stating one, see
    :func:`http_status_failure`), the ``adcp`` client's exceptions (by type:
    ``ADCPTimeoutError``, ``ADCPConnectionError``, ``ADCPTaskError`` with an AdCP code) and
    transport errors (those HTTP clients' included), most specific first. An
    adopter's ``failure_types`` (see ``UpstreamCache(failure_types=...)``) say what their own
    exceptions mean, unless that exception's own causes say something more specific: a
    seller's ``ServiceUnavailable`` raised from a refused connection keeps
    ``CONNECTION_REFUSED``, one with no cause becomes what the mapping says (its name or
    message are never read once mapped).
    """
    found = list(causes_of(exc))
    if failure_types:
        mapped = _mapped(found, failure_types)
        if mapped is not None:
            meant, matched = mapped
            # What the matched exception's own causes say, when it says more; the matched
            # exception itself is not read by the heuristics (its name or message would
            # override what the adopter said of it).
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
    """Whether a cancellation was raised (not merely being handled when another error was)."""
    return any(isinstance(e, asyncio.CancelledError) for e in raised)


def _mapped(
    found: list[BaseException], failure_types: FailureTypes
) -> tuple[Failure, BaseException] | None:
    """The first meaning an adopter's mapping gives an exception of the chain, and that
    exception. A meaning function that raises says nothing (logged once)."""
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
    # A 4xx is the caller's problem, whatever the exception's type says (requests' HTTPError
    # is an OSError): not an outage.
    return _status_failure(*stated) or (UNKNOWN_FAILURE if 400 <= stated[0] < 500 else None)


# The HTTP clients whose exceptions are read by their classes' modules (none is imported;
# ``urllib`` is the stdlib's, whose HTTPError states ``status`` and ``headers``).
_HTTP_CLIENTS = frozenset(
    {"aiohttp", "httpcore", "httpx", "httpx2", "requests", "urllib", "urllib3"}
)

# Exceptions raised bare, with no meaning of their own: their text may be read for a status.
# A seller's own subclass is never read (its message is its own; see http_status_failure).
_BARE_TYPES = frozenset({Exception, RuntimeError, OSError, ConnectionError})


def _client_classes(exc: BaseException) -> set[str]:
    """The HTTP clients' classes an exception is an instance of, as ``package.Name``."""
    found: set[str] = set()
    for cls in type(exc).__mro__:
        package = cls.__module__.partition(".")[0]
        if package in _HTTP_CLIENTS:
            found.add(f"{package}.{cls.__name__}")
    return found


def _http_status(exc: BaseException) -> tuple[int, float | None] | None:
    """The HTTP status an exception states, where it means the upstream's answer: an HTTP
    client's own exception (its attributes), a bare exception (its attributes or text)."""
    classes = _client_classes(exc)
    bare = type(exc) in _BARE_TYPES
    stated = _stated_status(exc) if classes or bare else None
    if stated is None and bare:
        stated = _status_of_text(exc)
    if stated is None and "urllib3.ResponseError" in classes:  # its retries on a status ran out
        found = _RETRIES_RAN_OUT.fullmatch(_text(exc))
        stated = (int(found.group(1)), None) if found is not None else None
    return stated


# urllib3's ResponseError when Retry(status_forcelist=...) gives up; the status is only there.
_RETRIES_RAN_OUT = re.compile(r"too many ([1-5]\d\d) error responses")


def _stated_status(exc: BaseException) -> tuple[int, float | None] | None:
    """The HTTP status an exception's attributes state, and its answer's Retry-After."""
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
    """An attribute of a foreign object, or None: a property that raises reads as absent."""
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
    """The first error code of an ``errors`` list (models in some ``adcp`` versions, dicts
    in others)."""
    for error in errors if isinstance(errors, list) else []:
        code = error.get("code") if isinstance(error, dict) else getattr(error, "code", None)
        if isinstance(code, str) and code:
            return code
    return None


def causes_of(exc: BaseException, *, contexts: bool = True) -> Iterator[BaseException]:
    """The exception, the members of its groups, and its cause/context chains, each once.
    ``contexts=False`` leaves out what was being handled when one was raised."""
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


# The HTTP clients' words for a connection dropped mid-answer, and for any other connection
# failure (requests' own are OSErrors, caught as such).
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
