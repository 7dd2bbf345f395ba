"""One hop of AdCP's federated network, read from the answer (no I/O).

Our upstream may be an AdCP agent itself (a sub-seller, a signals agent). When it answers
success *with its own* ``STALE_RESPONSE``, its data is already ``cache_age_seconds`` old:
the AdCP equivalent of HTTP's ``Age``. :func:`directives_of` says so to the cache, which
stores the entry that old (so a later outage counts from when the data was last fresh at the
bottom) and, once it is past our own target, tells our buyer with one advisory of ours for
that upstream (named as we call it, ``field`` ours, the sub-agent's ``original_error`` code).

The sub-agent's own advisories are its producer entries about *its* upstreams: they stay in
the cached payload (the age is read from them again where another process stored it) and
:func:`delivered` takes them out of what the seller composes, since ours stands for them.
Entries a consuming SDK added on the way (``source: "sdk"``) are observations, not the
producer's: they pass through once per ``(code, field)`` (``core/error.json``'s multi-hop
rule). A sub-agent's echo of a ``context`` is the request's, never data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .directives import Directives
from .failures import Failure
from .policy import FailureKind

STALE_RESPONSE = "STALE_RESPONSE"
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def directives_of(payload: object) -> Directives | None:
    """What ``payload`` says of its own age: None unless its producer marked it stale.

    The age is the oldest of its ``STALE_RESPONSE`` entries' ``cache_age_seconds`` (one per
    upstream of the sub-agent: the answer is as old as its oldest part). An entry with no
    readable age counts as old as its own ``freshness_target_seconds`` (at least past it, by
    the code's meaning), else 0. The failure is the oldest entry's ``original_error`` code,
    else ``STALE_RESPONSE`` itself; its message is ours (a sub-agent's text may hold what
    an advisory must not: hostnames, credentials).
    """
    oldest: tuple[float, str] | None = None
    for error in _own_stale_entries(payload):
        details = error.get("details")
        details = details if isinstance(details, Mapping) else {}
        age = _seconds(details.get("cache_age_seconds"))
        if age is None:
            age = _seconds(details.get("freshness_target_seconds")) or 0.0
        original = details.get("original_error")
        code = original.get("code") if isinstance(original, Mapping) else None
        code = code if isinstance(code, str) and _CODE.fullmatch(code) else STALE_RESPONSE
        if oldest is None or age > oldest[0]:
            oldest = (age, code)
    if oldest is None:
        return None
    age, code = oldest
    failure = Failure(FailureKind.UPSTREAM_ERROR, code, "Upstream served its own cached answer")
    return Directives(age=age, stale_at_source=failure)


def delivered(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` as the seller composes it: without the producer's ``STALE_RESPONSE``
    entries (our advisory stands for them), its SDK entries once per ``(code, field)`` (the
    spec's multi-hop rule), and without ``context`` (the request's own)."""
    result = {name: value for name, value in payload.items() if name != "context"}
    errors = payload.get("errors")
    if isinstance(errors, list):
        own = {id(error) for error in _own_stale_entries(payload)}
        kept, seen = [], set()
        for error in errors:
            if id(error) in own:
                continue
            if isinstance(error, Mapping) and error.get("source") == "sdk":
                seen_as = (str(error.get("code")), str(error.get("field")))
                if seen_as in seen:
                    continue
                seen.add(seen_as)
            kept.append(error)
        if kept:
            result["errors"] = kept
        else:
            result.pop("errors")
    return result


def _own_stale_entries(payload: object) -> list[Mapping[str, Any]]:
    """The ``STALE_RESPONSE`` entries ``payload``'s producer wrote (not an SDK's)."""
    if not isinstance(payload, Mapping):
        return []
    errors = payload.get("errors")
    if not isinstance(errors, list):
        return []
    return [
        error
        for error in errors
        if isinstance(error, Mapping)
        and error.get("code") == STALE_RESPONSE
        and error.get("source") != "sdk"
    ]


def _seconds(value: object) -> float | None:
    """A non-negative finite number of seconds, or None (booleans are no numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
