"""One hop of AdCP's federated network, read from the answer (no I/O).

Our upstream may be an AdCP agent itself (a sub-seller, a signals agent). When it answers
success *with its own* ``STALE_RESPONSE``, its data is already ``cache_age_seconds`` old:
the AdCP equivalent of HTTP's ``Age``. :func:`directives_of` says so to the cache, which
stores the entry that old (so a later outage counts from when the data was last fresh at the
bottom) and, once it is past our own target, tells our buyer with one advisory of ours for
that upstream (named as we call it, ``field`` ours, the sub-agent's ``original_error`` code).

The sub-agent's own advisories are its entries about *its* upstreams: they stay in the
cached payload (the age is read from them again where another process stored it) and
:func:`delivered` takes them out of what the seller composes, since ours stands for them. A
``STALE_RESPONSE`` an SDK added on the way (``source: "sdk"``) is read and taken out alike:
relayed, it would state an age frozen at that hop. Other entries a consuming SDK added are
observations, not the producer's: they pass through once per ``(code, field)``
(``core/error.json``'s multi-hop rule). A sub-agent's echo of a ``context`` is the
request's, never data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.advisory import STALE_RESPONSE
from ..core.directives import Directives
from ..core.failures import Failure, is_adcp_code, stated_seconds
from ..core.policy import FailureKind


def directives_of(payload: object) -> Directives | None:
    """What ``payload`` says of its own age: None unless it holds a ``STALE_RESPONSE``.

    The age is the oldest of its ``STALE_RESPONSE`` entries' ``cache_age_seconds`` (one per
    upstream of the sub-agent: the answer is as old as its oldest part). Every such entry
    counts, the producer's and an SDK's alike: an age is never taken from the least of
    them. An entry with no readable age is at least past a target, by the code's meaning:
    its own ``freshness_target_seconds`` when readable, and never younger than ours
    (``age_known=False``: the cache floors it at the surface's target). The failure is the
    oldest entry's ``original_error`` code, else ``STALE_RESPONSE`` itself; its message is
    ours (a sub-agent's text may hold what an advisory must not: hostnames, credentials).
    """
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
        if oldest is None or age > oldest[0]:
            oldest = (age, code)
    if oldest is None:
        return None
    age, code = oldest
    failure = Failure(FailureKind.UPSTREAM_ERROR, code, "Upstream served its own cached answer")
    return Directives(age=age, stale_at_source=failure, age_known=known)


def delivered(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` as the seller composes it: without its ``STALE_RESPONSE`` entries (our
    advisory stands for them, with an honest age), its SDK entries once per
    ``(code, field)`` (the spec's multi-hop rule), and without ``context`` (the request's
    own). An ``errors`` that is one object is read as a list of it; one that is neither is
    no errors list and is left out."""
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
    """The held answer as an ``unchanged: true`` answer re-stamps it: delivered (its old
    staleness no longer holds), with the ``STALE_RESPONSE`` entries of ``unchanged``,
    which say how old the agent's own knowledge of its feed is (read again as its age)."""
    result = delivered(held)
    stale = _stale_entries(unchanged)
    if stale:
        result["errors"] = [*result.get("errors", []), *stale]
    return result


def _errors(payload: object) -> list[Any]:
    """``payload``'s ``errors`` as a list (one object is a list of it; anything else none)."""
    errors = payload.get("errors") if isinstance(payload, Mapping) else None
    if isinstance(errors, Mapping):
        return [errors]
    return errors if isinstance(errors, list) else []


def _stale_entries(payload: object) -> list[Mapping[str, Any]]:
    """The ``STALE_RESPONSE`` entries of ``payload``."""
    return [error for error in _errors(payload)
            if isinstance(error, Mapping) and error.get("code") == STALE_RESPONSE]  # fmt: skip
