"""One hop of AdCP's federated network, read from the answer (no I/O): a sub-agent's own
``STALE_RESPONSE`` is its data's age (AdCP's ``Age``), which the cache stores the entry with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.advisory import STALE_RESPONSE
from ..core.directives import Directives
from ..core.failures import Failure, is_adcp_code, stated_seconds
from ..core.policy import FailureKind


def directives_of(payload: object) -> Directives | None:
    """What ``payload`` says of its own age: None unless it holds a ``STALE_RESPONSE``.

    The age is the oldest entry's ``cache_age_seconds`` (an entry without one: its
    ``freshness_target_seconds``, ``age_known=False``); the failure is that entry's
    ``original_error`` code, with our own message (a sub-agent's text may hold hostnames)."""
    oldest: tuple[float, str] | None = None
    known = True
    for error in _stale_entries(payload):
        details = error.get("details")
        details = details if isinstance(details, Mapping) else {}
        age = stated_seconds(details.get("cache_age_seconds"))
        if age is None:
            known = False
            age = stated_seconds(details.get("freshness_target_seconds")) or 0.0
        original = details.get("original_error")
        code = original.get("code") if isinstance(original, Mapping) else None
        code = code if is_adcp_code(code) else STALE_RESPONSE
        if oldest is None or age > oldest[0]:  # as old as its oldest part
            oldest = (age, code)
    if oldest is None:
        return None
    age, code = oldest
    failure = Failure(FailureKind.UPSTREAM_ERROR, code, "Upstream served its own cached answer")
    return Directives(age=age, stale_at_source=failure, age_known=known)


def delivered(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` as the seller composes it: without ``STALE_RESPONSE`` entries (ours stands
    for them) nor ``context``, its SDK entries once per ``(code, field)`` (the multi-hop rule)."""
    result = {name: value for name, value in payload.items() if name != "context"}
    result.pop("errors", None)
    kept, seen = [], set()
    for error in _errors(payload):
        if isinstance(error, Mapping) and error.get("code") == STALE_RESPONSE:
            continue
        if isinstance(error, Mapping) and error.get("source") == "sdk":
            seen_as = (str(error.get("code")), str(error.get("field")))
            if seen_as in seen:
                continue
            seen.add(seen_as)
        kept.append(error)
    if kept:
        result["errors"] = kept
    return result


def revalidated(held: Mapping[str, Any], unchanged: Mapping[str, Any]) -> dict[str, Any]:
    """The held answer re-stamped by an ``unchanged: true`` answer: delivered, with the
    ``STALE_RESPONSE`` entries of ``unchanged`` (its age, read again)."""
    result = delivered(held)
    stale = _stale_entries(unchanged)
    if stale:
        result["errors"] = [*result.get("errors", []), *stale]
    return result


def _errors(payload: object) -> list[Any]:
    errors = payload.get("errors") if isinstance(payload, Mapping) else None
    if isinstance(errors, Mapping):
        return [errors]
    return errors if isinstance(errors, list) else []


def _stale_entries(payload: object) -> list[Mapping[str, Any]]:
    return [
        error
        for error in _errors(payload)
        if isinstance(error, Mapping) and error.get("code") == STALE_RESPONSE
    ]
