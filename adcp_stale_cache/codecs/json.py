"""Plain JSON bodies, where the body is the AdCP payload: rewritten without losing data.

Advisories are spliced before the closing brace when there is no ``errors`` member; else the
payload is re-encoded exactly, or left untouched when no re-encoding could be exact.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeGuard

import orjson

from ..core.values import has_long_number


class Untouched(Exception):
    """The body must pass through unchanged; the message says why, ``reason`` in a word."""

    reason = "unwritable"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class NotJson(Untouched, ValueError):
    """A body not read as JSON (not UTF-8, not JSON, nested too deep); a ``ValueError`` too."""

    reason = "not_json"


class TooDeep(NotJson):
    """A JSON body nested deeper than it can be read: whatever it holds cannot be compared."""


TOO_DEEP = "nested too deep to read or re-encode"
#: The nesting read and encoded through the stdlib on every Python alike (its own limit moves).
STDLIB_DEPTH = 512


class Unmendable(Untouched):
    """An answer holding another request's ``context`` that no re-encoding keeps exact."""


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
#: The request's ``context`` could not be read: an answer's ``context`` in doubt goes.
UNKNOWN: Any = _Marker("UNKNOWN")


class Delivery(list[dict[str, Any]]):
    """The advisories for one answer, and its request's ``context``, which replaces any other
    in the payload; ``replaced`` counts the payloads so mended."""

    def __init__(self, errors: list[dict[str, Any]], context: Any = KEEP) -> None:
        super().__init__(errors)
        self.context = context
        self.replaced = 0


def delivery(errors: list[dict[str, Any]], context: Callable[[], Any], in_doubt: bool) -> Delivery:
    """The :class:`Delivery` of ``errors``: contexts mended always when ``in_doubt`` (a cached
    value was served), else only in an answer rewritten anyway."""
    if in_doubt:
        return Delivery(errors, context())
    if not errors:
        return Delivery(errors)
    known = context()
    return Delivery(errors, KEEP if known is UNKNOWN else known)


def context_of(request: Any) -> Any:
    """The ``context`` of an AdCP request, :data:`NO_CONTEXT` or :data:`UNKNOWN`."""
    if not isinstance(request, dict):
        return UNKNOWN
    context = request.get("context")
    return NO_CONTEXT if context is None else context


class Shadowing(dict[str, Any]):
    """An object naming ``context`` more than once, read as its last; ``shadowed`` holds the
    earlier ones, which a client keeping the first would read."""

    __slots__ = ("shadowed",)

    shadowed: list[Any]


def foreign_context(payload: Any, context: Any) -> bool:
    """Whether ``payload`` carries a non-null ``context`` other than the request's, under any
    of its names when it names one twice."""
    if context is KEEP or not isinstance(payload, dict):
        return False
    if isinstance(payload, Shadowing) and any(_another(v, context) for v in payload.shadowed):
        return True
    return _another(payload.get("context"), context)


def _another(value: Any, context: Any) -> bool:
    return value is not None and (context in (NO_CONTEXT, UNKNOWN) or not same_json(value, context))


def same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON: ``true`` is not ``1`` (``1`` is
    ``1.0``), and values nested however deep are compared without recursion."""
    pairs = [(a, b)]
    while pairs:
        x, y = pairs.pop()
        if isinstance(x, dict):
            if not isinstance(y, dict) or x.keys() != y.keys():
                return False
            pairs.extend((value, y[key]) for key, value in x.items())
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            pairs.extend(zip(x, y, strict=True))
        elif isinstance(x, bool) or isinstance(y, bool):
            if x is not y:
                return False
        elif isinstance(x, _NUMBER) and isinstance(y, _NUMBER):
            if x != y:
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


_NUMBER = (int, float)


def present(obj: Any, key: str) -> bool:
    """True when ``obj`` holds ``key`` with a non-null value (fastmcp writes unset as null)."""
    return isinstance(obj, dict) and obj.get(key) is not None


def inject_payload(payload: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to a payload's ``errors[]`` in place and mend its ``context``;
    :class:`Untouched` for a non-object, a non-list ``errors`` or a failed task."""
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
        elif present(payload, "context"):  # (named twice, the last null: it alone goes out)
            payload["context"] = errors.context
        if isinstance(payload, Shadowing):
            payload.shadowed = []  # written once: the others are gone
        errors.replaced += 1


def _check(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise Untouched("payload is not a JSON object", "not_json")
    if present(payload, "adcp_error"):
        raise Untouched("payload carries adcp_error (a failed task)", "failed_task")
    existing = payload.get("errors")
    if existing is not None and not isinstance(existing, list):
        raise Untouched("payload 'errors' is not a list")


def mends(errors: list[dict[str, Any]]) -> int:
    """How many contexts ``errors`` has mended so far (none for a plain list)."""
    return errors.replaced if isinstance(errors, Delivery) else 0


def unwritten(
    exc: Untouched, errors: list[dict[str, Any]], mended: int, foreign: Callable[[], bool]
) -> Untouched:
    """What to raise when an answer cannot be written: nothing counts as mended since
    ``mended``, and :class:`Unmendable` if a context was mended in it or ``foreign()``
    finds another's in it."""
    loud = mends(errors) > mended
    if isinstance(errors, Delivery):
        errors.replaced = mended  # nothing written, so nothing mended
    if isinstance(exc, Unmendable) or not (loud or foreign()):
        return exc
    if isinstance(exc, TooDeep):
        return Unmendable(f"a context that cannot be compared: {exc}", exc.reason)
    return Unmendable(f"another request's context, but {exc}", exc.reason)


def holds_foreign(
    body: bytes, errors: list[dict[str, Any]], mend: Callable[[Any, Delivery], None]
) -> bool:
    """Whether ``body``, read leniently, holds a context other than the one ``errors``
    carries where ``mend`` (an inject function) would replace one; a body too deep to read
    is in doubt, so yes."""
    context = errors.context if isinstance(errors, Delivery) else KEEP
    if context is KEEP:
        return False
    try:
        value = loads(body, shadows=True)
    except TooDeep:
        return True
    except Untouched:
        return False
    probe = Delivery([], context)
    try:
        mend(value, probe)
    except Unmendable:
        return True
    except Untouched:
        return False
    return probe.replaced > 0


def loads(body: bytes | str, *, shadows: bool = False) -> Any:
    """Parse untrusted JSON to read it (long integers exact; with ``shadows``, where a context
    is compared, an object naming ``context`` twice a :class:`Shadowing`); :class:`NotJson`
    if it is not JSON."""
    raw = _utf8(body)
    twice = shadows and may_name_twice(raw)
    if not twice and not has_long_number(raw):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # NaN, lone surrogates...: the stdlib accepts them, and says if it is not JSON
    return _stdlib(body, None, twice)


def read(body: bytes | str) -> tuple[Any, bool]:
    """Parse JSON to read it, and whether re-encoding that value would be exact."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _stdlib(body, None), False
    return value, not has_long_number(_utf8(body))


def parse(body: bytes | str, *, shadows: bool = False) -> Any:
    """Parse JSON to re-encode it: exact (``shadows`` as for :func:`loads`), or
    :class:`Untouched` when no re-encoding could be."""
    raw = _utf8(body)
    twice = shadows and may_name_twice(raw)
    if not twice and not has_long_number(raw):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return _stdlib(body, _exact_float, twice)


def may_name_twice(raw: bytes) -> bool:
    """Whether an object in ``raw`` may name ``context`` twice (escaped names too): then it
    is read with :func:`parse` or :func:`loads` and ``shadows``."""
    if raw.count(b'"context"') > 1:
        keys = _CONTEXT_KEY.finditer(raw)  # as a name, not a value: at most two sought
        if next(keys, None) is not None and next(keys, None) is not None:
            return True
    return b"\\u00" in raw and _ESCAPED_LETTER.search(raw) is not None


def compares(errors: list[dict[str, Any]]) -> TypeGuard[Delivery]:
    """Whether ``errors`` carries a context to compare answers with."""
    return isinstance(errors, Delivery) and errors.context is not KEEP


def _utf8(body: bytes | str) -> bytes:
    # A JSON text read from a JSON string may hold a lone surrogate ("\ud800"): kept as is.
    return body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body


def _stdlib(body: bytes | str, parse_float: Any, twice: bool = False) -> Any:
    try:  # strictly UTF-8: json.loads would guess UTF-16, which the splice would corrupt
        text = body.decode() if isinstance(body, bytes) else body
    except UnicodeDecodeError:
        raise NotJson("body is not UTF-8 JSON") from None
    exact = parse_float is not None
    try:
        value = json.loads(
            text.removeprefix("\ufeff"),
            parse_float=parse_float,
            parse_constant=_no_constant if exact else None,
            object_pairs_hook=_shadowing if twice else None,
        )
    except RecursionError:  # orjson stops at 1,024 levels; the stdlib at the stack's depth
        raise TooDeep(f"body is {TOO_DEEP}") from None
    except ValueError as exc:
        raise NotJson("body is not valid JSON") from exc
    if _deeper_than_the_stdlib_goes(value, text):
        raise TooDeep(f"body is {TOO_DEEP}")
    return value


def _shadowing(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) < len(pairs):
        named = [v for k, v in pairs if k == "context"]
        if len(named) > 1:
            shadowing = Shadowing(value)
            shadowing.shadowed = named[:-1]
            return shadowing
    return value


def _deeper_than_the_stdlib_goes(value: Any, text: str) -> bool:
    """Whether ``value`` (encoded as ``text``) nests past :data:`STDLIB_DEPTH`."""
    opened = text.count("[") + text.count("{")
    return opened > STDLIB_DEPTH and _nested_deeper_than(value, STDLIB_DEPTH)


def _nested_deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` nests more than ``levels`` deep (read without recursion)."""
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
    value = float(text)
    digits = text.lstrip("-").split("e")[0].split("E")[0].replace(".", "").strip("0")
    if not math.isfinite(value) or len(digits) > 17:
        raise Untouched(f"body holds {text[:32]}, which no re-encoding keeps exactly")
    return value


def _no_constant(name: str) -> Any:
    raise Untouched(f"body holds {name}, which no re-encoding keeps exactly")


def dumps(value: Any) -> bytes:
    """Serialise JSON compactly, through the stdlib for what orjson refuses."""
    try:
        return orjson.dumps(value)
    except TypeError:
        text = dumps_text(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: keep it as the escape it came as
        return dumps_text(value, separators=(",", ":")).encode()


def dumps_text(value: Any, **options: Any) -> str:
    """``json.dumps``, but :class:`Untouched` for a value nested too deep."""
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
    """The JSON body with ``errors`` appended to its payload's ``errors[]``
    (``rpc_is_envelope``: a ``jsonrpc`` body is left untouched)."""
    context = errors.context if isinstance(errors, Delivery) else KEEP
    try:  # the splice keeps every byte, so only a compared context needs an exact reading
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = _read_to_compare(body, context)
    if rpc_is_envelope and present(payload, "jsonrpc"):
        raise Untouched("a JSON-RPC message, not a payload: its call was not read", "call_unread")
    compared = context is not KEEP and present(payload, "context")
    if compared and has_long_number(body):
        payload = _read_to_compare(body, context)
    foreign = foreign_context(payload, context)
    # A context named twice is read as its last, which a client may not: rewritten once.
    named = context is not KEEP and isinstance(payload, dict) and "context" in payload
    twice = named and not foreign and _shadows_another(body, context)
    if not errors and not foreign and not twice:
        return body  # nothing to deliver: every byte as it came
    mended = mends(errors)
    try:
        if errors:
            _check(payload)
        if "errors" not in payload and not foreign and not twice:  # absent, not null: splice
            end = len(body.rstrip()) - 1  # the closing brace
            separator = b',"errors":' if payload else b'"errors":'
            return b"".join((body[:end], separator, dumps(errors), body[end:]))
        payload = parse(body, shadows=context is not KEEP)  # exact: long numbers survive
        inject_payload(payload, errors)
        return dumps(payload)
    except Untouched as exc:
        raise unwritten(exc, errors, mended, lambda: foreign or twice) from exc


def _read_to_compare(body: bytes, context: Any) -> Any:
    try:
        return loads(body, shadows=context is not KEEP)
    except TooDeep as exc:  # deeper than a reading goes: a context in it cannot be compared
        if context is KEEP:
            raise
        raise Unmendable(f"a context that cannot be compared: {exc}", exc.reason) from exc


def _shadows_another(body: bytes, context: Any) -> bool:
    """Whether the object ``body`` names ``context`` more than once, an earlier one neither
    null nor the request's: a client keeping the first reads that one."""
    if not may_name_twice(body):
        return False
    try:
        return foreign_context(_stdlib(body, None, twice=True), context)
    except Untouched:  # deeper than the stdlib reads: orjson's reading holds
        return False


_CONTEXT_KEY = re.compile(rb'"context"\s*:')
_ESCAPED_LETTER = re.compile(rb"\\u00(?:[46][0-9a-fA-F]|[57][0-9aA])")  # \u0041 for "A"...
