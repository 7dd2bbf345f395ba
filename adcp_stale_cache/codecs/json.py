"""Plain JSON bodies: the body is the AdCP payload.

The rewrite never loses data. When the payload has no ``errors`` member (the common case)
the advisories are spliced in before the closing brace and every original byte is kept.
When it has one, the payload is re-encoded: through orjson, or through the stdlib when the
body holds an integer too long for a 64-bit parser (orjson would turn it into a float).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Digits all become "0": a run of 19 "0"s then means a number (or digit string) orjson may not
# hold exactly. translate + substring search is C-speed; a regex scan is ten times slower.
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * 19


def has_long_integer(body: bytes) -> bool:
    """True when ``body`` may hold an integer too long for orjson (19 digits or more)."""
    return _LONG_RUN in body.translate(_DIGITS_TO_ZERO)


class Untouched(Exception):
    """The body must pass through unchanged; the message says why."""


def inject_payload(payload: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to an AdCP payload's ``errors[]`` in place (creating it).

    Leaves alone what it must not touch: a non-object, an ``errors`` that is not a list, and a
    failed task (``adcp_error`` present: a stale advisory is never promoted to a fatal error,
    nor mixed into one).
    """
    _check(payload)
    existing = payload.get("errors")
    if existing is None:
        payload["errors"] = list(errors)
    else:
        existing.extend(errors)


def _check(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise Untouched("payload is not a JSON object")
    if "adcp_error" in payload:
        raise Untouched("payload carries adcp_error (a failed task)")
    existing = payload.get("errors")
    if existing is not None and not isinstance(existing, list):
        raise Untouched("payload 'errors' is not a list")


def loads(body: bytes | str, *, exact: bool = False) -> Any:
    """Parse JSON; ``exact`` uses the stdlib, which keeps integers of any length."""
    if not exact:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # NaN and friends: the stdlib accepts them, and must say if it is not JSON
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Untouched("body is not valid JSON") from exc


def parse(body: bytes) -> Any:
    """Parse JSON without losing data: exact (stdlib) when an integer is too long for orjson."""
    return loads(body, exact=has_long_integer(body))


def dumps(value: Any) -> bytes:
    """Serialise JSON compactly (stdlib fallback for what orjson refuses)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def inject_json(body: bytes, errors: list[dict[str, Any]]) -> bytes:
    """The JSON body with ``errors`` appended to its payload's ``errors[]``."""
    payload = loads(body)  # the splice below keeps every byte: no exact parse needed for it
    _check(payload)
    if "errors" not in payload:
        head = body.rstrip()
        separator = b"," if payload else b""
        return (
            head[:-1] + separator + b'"errors":' + orjson.dumps(errors) + b"}" + body[len(head) :]
        )
    payload = parse(body)  # re-encoded: exact, so that long integers survive
    inject_payload(payload, errors)
    return dumps(payload)
