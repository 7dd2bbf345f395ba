"""Plain JSON bodies: the body is the AdCP payload."""

from __future__ import annotations

import json
from typing import Any

import orjson


class Untouched(Exception):
    """The body must pass through unchanged; the message says why."""


def inject_payload(payload: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to an AdCP payload's ``errors[]`` in place (creating it).

    Leaves alone what it must not touch: a non-object, an ``errors`` that is not a list, and a
    failed task (``adcp_error`` present: a stale advisory is never promoted to a fatal error,
    nor mixed into one).
    """
    if not isinstance(payload, dict):
        raise Untouched("payload is not a JSON object")
    if "adcp_error" in payload:
        raise Untouched("payload carries adcp_error (a failed task)")
    existing = payload.get("errors")
    if existing is None:
        payload["errors"] = list(errors)
    elif isinstance(existing, list):
        existing.extend(errors)
    else:
        raise Untouched("payload 'errors' is not a list")


def loads(body: bytes | str) -> Any:
    """Parse JSON, falling back to the stdlib for what orjson refuses (huge integers)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise Untouched("body is not valid JSON") from exc


def dumps(value: Any) -> bytes:
    """Serialise JSON compactly (stdlib fallback for integers past 64 bits)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def inject_json(body: bytes, errors: list[dict[str, Any]]) -> bytes:
    """The JSON body with ``errors`` appended to its payload's ``errors[]``."""
    payload = loads(body)
    inject_payload(payload, errors)
    return dumps(payload)
