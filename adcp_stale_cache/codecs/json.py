"""Plain JSON bodies: the body is the AdCP payload.

The rewrite never loses data. When the payload has no ``errors`` member (the common case)
the advisories are spliced in before the closing brace and every original byte is kept.
When it has one, the payload is re-encoded: through orjson, or through the stdlib when the
body holds a number orjson may not hold exactly (an integer past 64 bits, a decimal with more
digits than a double). What no re-encoding keeps exactly (``NaN``, ``Infinity``, ``1e400``, a
decimal with more than 17 significant digits) is left untouched, as is a body that is not
UTF-8 (RFC 8259). Lone surrogate escapes (``"\\ud83d"``) survive, re-escaped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson

# Digits and dots all become "0": a run of 18 "0"s then means a number that orjson may not
# hold exactly (a long integer, a long decimal). translate + substring search is C-speed; a
# regex scan is ten times slower.
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789.", b"0" * 11)
_LONG_RUN = b"0" * 18


def has_long_number(body: bytes) -> bool:
    """True when ``body`` may hold a number too long for orjson to keep exactly."""
    return _LONG_RUN in body.translate(_DIGITS_TO_ZERO)


class Untouched(Exception):
    """The body must pass through unchanged; the message says why, ``reason`` in a word (what
    an ``advisory_lost`` log line names)."""

    reason = "unwritable"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class NotJson(Untouched, ValueError):
    """A body this package does not read as JSON: not UTF-8, not JSON, or nested deeper than
    a parser holds (a ``ValueError`` too, for callers that answer bad input with a 400)."""

    reason = "not_json"


#: Why a value nested past what the parsers and encoders hold is left alone.
TOO_DEEP = "nested too deep to read or re-encode"
#: The nesting the stdlib reads and encodes here, on every Python alike: its own limit moves
#: (about 1,000 levels less the stack in use to 3.11, 1,500 on 3.12, 10,000 on 3.13).
STDLIB_DEPTH = 512


class Unmendable(Untouched):
    """An answer holding another request's ``context`` that cannot be re-encoded exactly
    (``NaN``, ``1e400``, a decimal past 17 digits): it goes out as it came, said loudly."""


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: A :class:`Delivery` that leaves every payload's ``context`` as it is.
KEEP: Any = _Marker("KEEP")
#: The request carried no ``context``: an answer's ``context`` is then another request's.
NO_CONTEXT: Any = _Marker("NO_CONTEXT")
#: The request's ``context`` could not be read (its body was not, or could not be): an
#: answer's ``context`` in doubt cannot be shown to be its own, so it goes.
UNKNOWN: Any = _Marker("UNKNOWN")


class Delivery(list[dict[str, Any]]):
    """The advisories handed to one answer (a list, appended to its payload's ``errors[]``),
    and the ``context`` of the request it answers: a payload whose ``context`` is not that
    one (a cached value's, another buyer's) gets the request's instead, or none when the
    request had none (:data:`NO_CONTEXT`). ``replaced`` counts the payloads so mended."""

    def __init__(self, errors: list[dict[str, Any]], context: Any = KEEP) -> None:
        super().__init__(errors)
        self.context = context
        self.replaced = 0


def delivery(errors: list[dict[str, Any]], context: Callable[[], Any], in_doubt: bool) -> Delivery:
    """The :class:`Delivery` of ``errors`` to an answer whose request's ``context`` is
    ``context()`` (asked only when needed): mended whenever the cache served the request a
    value holding one (``in_doubt``: then one that cannot be read mends to none), else only
    when the answer is rewritten anyway and the request's is known."""
    if in_doubt:
        return Delivery(errors, context())
    if not errors:
        return Delivery(errors)
    known = context()
    return Delivery(errors, KEEP if known is UNKNOWN else known)


def context_of(request: Any) -> Any:
    """The ``context`` of an AdCP request (its body, a tool's arguments, a skill's
    parameters): :data:`NO_CONTEXT` when it has none (null is none), :data:`UNKNOWN` when
    the request is not an object that could be read."""
    if not isinstance(request, dict):
        return UNKNOWN
    context = request.get("context")
    return NO_CONTEXT if context is None else context


def foreign_context(payload: Any, context: Any) -> bool:
    """Whether ``payload`` carries a ``context`` other than the request's ``context``.

    A null ``context`` carries none (fastmcp writes an unset field as null): never foreign,
    so it stays as the app wrote it."""
    if context is KEEP or not present(payload, "context"):
        return False
    return context in (NO_CONTEXT, UNKNOWN) or payload["context"] != context


def present(obj: Any, key: str) -> bool:
    """True when the object ``obj`` holds ``key`` with a value other than null.

    A null member is an absent member: fastmcp serialises a pydantic model's unset fields as
    ``null`` (``"adcp_error": null`` on every successful answer), so presence tests read
    through this, never through ``in``.
    """
    return isinstance(obj, dict) and obj.get(key) is not None


def inject_payload(payload: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to an AdCP payload's ``errors[]`` in place (creating it), and, for a
    :class:`Delivery`, make its ``context`` the request's.

    Leaves alone what it must not touch: a non-object, an ``errors`` that is not a list, and a
    failed task (``adcp_error`` present: a stale advisory is never promoted to a fatal error,
    nor mixed into one).
    """
    if errors:
        _check(payload)
        existing = payload.get("errors")
        if existing is None:
            payload["errors"] = list(errors)
        else:
            existing.extend(errors)
    elif not isinstance(payload, dict):
        raise Untouched("payload is not a JSON object", "not_json")
    if isinstance(errors, Delivery) and foreign_context(payload, errors.context):
        if errors.context in (NO_CONTEXT, UNKNOWN):
            del payload["context"]
        else:
            payload["context"] = errors.context
        errors.replaced += 1


def _check(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise Untouched("payload is not a JSON object", "not_json")
    if present(payload, "adcp_error"):
        raise Untouched("payload carries adcp_error (a failed task)", "failed_task")
    existing = payload.get("errors")
    if existing is not None and not isinstance(existing, list):
        raise Untouched("payload 'errors' is not a list")


def loads(body: bytes | str) -> Any:
    """Parse untrusted JSON to read it (not to re-encode it: see :func:`parse`), numbers as
    the stdlib reads them (orjson would make an integer past 64 bits a float); raises
    :class:`NotJson`, never ``RecursionError``, for what is no JSON read here."""
    if not has_long_number(body.encode() if isinstance(body, str) else body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # NaN, lone surrogates...: the stdlib accepts them, and says if it is not JSON
    return _stdlib(body, None)


def read(body: bytes | str) -> tuple[Any, bool]:
    """Parse JSON to read it, and say whether re-encoding that value would be exact (else
    :func:`parse` it again before re-encoding)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _stdlib(body, None), False
    return value, not has_long_number(body.encode() if isinstance(body, str) else body)


def parse(body: bytes | str) -> Any:
    """Parse JSON to re-encode it: exact, or :class:`Untouched` when no re-encoding could be."""
    if not has_long_number(body.encode() if isinstance(body, str) else body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return _stdlib(body, _exact_float)


def _stdlib(body: bytes | str, parse_float: Any) -> Any:
    try:  # strictly UTF-8: json.loads would guess UTF-16 from bytes, and the splice corrupt it
        text = body.decode() if isinstance(body, bytes) else body
    except UnicodeDecodeError:
        raise NotJson("body is not UTF-8 JSON") from None
    exact = parse_float is not None
    try:
        value = json.loads(
            text.removeprefix("\ufeff"),
            parse_float=parse_float,
            parse_constant=_no_constant if exact else None,
        )
    except RecursionError:  # orjson stops at 1,024 levels; the stdlib at the stack's depth
        raise NotJson(f"body is {TOO_DEEP}") from None
    except ValueError as exc:
        raise NotJson("body is not valid JSON") from exc
    if _deeper_than_the_stdlib_goes(value, text):
        raise NotJson(f"body is {TOO_DEEP}")
    return value


def _deeper_than_the_stdlib_goes(value: Any, text: str) -> bool:
    """Whether ``value``, encoded as ``text``, nests past :data:`STDLIB_DEPTH`: read only
    when the text opens that many lists and objects (C-speed counts), rarely."""
    opened = text.count("[") + text.count("{")
    return opened > STDLIB_DEPTH and _nested_deeper_than(value, STDLIB_DEPTH)


def _nested_deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``levels`` deep (read level by
    level: no recursion)."""
    layer = [value]
    for _ in range(levels):
        layer = [
            inner
            for outer in layer
            if isinstance(outer, (list, dict))
            for inner in (outer.values() if isinstance(outer, dict) else outer)
        ]
        if not layer:
            return False
    return any(isinstance(inner, (list, dict)) for inner in layer)


def _exact_float(text: str) -> float:
    """A JSON decimal as a float, refusing one a double would change."""
    value = float(text)
    digits = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").strip("0")
    if not math.isfinite(value) or len(digits) > 17:
        raise Untouched(f"body holds {text[:32]}, which no re-encoding keeps exactly")
    return value


def _no_constant(name: str) -> Any:
    raise Untouched(f"body holds {name}, which no re-encoding keeps exactly")


def dumps(value: Any) -> bytes:
    """Serialise JSON compactly (stdlib for what orjson refuses: long integers, lone
    surrogates, which are then escaped, values nested past orjson's 255 levels).
    :class:`Untouched` for a value nested deeper than the stdlib holds."""
    try:
        return orjson.dumps(value)
    except TypeError:
        text = dumps_text(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: keep it as the escape it came as
        return dumps_text(value, separators=(",", ":")).encode()


def dumps_text(value: Any, **options: Any) -> str:
    """``json.dumps`` with its ``options``, but :class:`Untouched` for a value nested deeper
    than :data:`STDLIB_DEPTH` or the stack holds (never ``RecursionError``)."""
    try:
        text = json.dumps(value, **options)
    except RecursionError:
        raise Untouched(f"value is {TOO_DEEP}") from None
    if _deeper_than_the_stdlib_goes(value, text):
        raise Untouched(f"value is {TOO_DEEP}")
    return text


def inject_json(
    body: bytes, errors: list[dict[str, Any]], *, rpc_is_envelope: bool = False
) -> bytes:
    """The JSON body with ``errors`` appended to its payload's ``errors[]``.

    ``rpc_is_envelope``: a body with a ``jsonrpc`` member is a JSON-RPC envelope whose call
    was not read (not a payload): leave it untouched rather than write beside ``result``.
    """
    payload = loads(body)  # the splice below keeps every byte: no exact parse needed for it
    if rpc_is_envelope and present(payload, "jsonrpc"):
        raise Untouched("a JSON-RPC message, not a payload: its call was not read", "call_unread")
    foreign = isinstance(errors, Delivery) and foreign_context(payload, errors.context)
    if not errors and not foreign:
        return body  # nothing to deliver: every byte as it came
    if errors:
        _check(payload)
    if "errors" not in payload and not foreign:  # absent (not null): splice every byte
        head = body.rstrip()
        separator = b"," if payload else b""
        return (
            head[:-1] + separator + b'"errors":' + orjson.dumps(errors) + b"}" + body[len(head) :]
        )
    try:
        payload = parse(body)  # re-encoded: exact, so that long numbers survive
    except Untouched as exc:
        if foreign and not errors:  # only a context to mend, and it cannot be: said loudly
            raise Unmendable(f"another request's context, but {exc}") from exc
        raise
    inject_payload(payload, errors)
    return dumps(payload)
