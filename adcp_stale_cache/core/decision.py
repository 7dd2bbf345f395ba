"""The caching decision, with no I/O: :func:`plan` before an upstream call, :func:`on_failure`
after it. An entry is fresh while ``age < target``, servable stale while
``age <= target + max_stale`` (RFC 9111); honoured directives move both within the policy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from .entry import Entry


class Freshness(Protocol):
    """What the decision needs of a policy."""

    @property
    def freshness_target_seconds(self) -> int: ...

    @property
    def max_stale_seconds(self) -> int: ...

    @property
    def min_freshness_seconds(self) -> int: ...

    @property
    def max_freshness_seconds(self) -> int | None: ...


@dataclass(slots=True)
class Fresh:
    """Serve ``entry`` as it is; the upstream is not called. Not frozen: every hit builds one,
    and a frozen dataclass sets its field through ``object.__setattr__``."""

    entry: Entry


@dataclass(slots=True)
class Refresh:
    """Call the upstream; ``fallback`` is served stale if it fails, ``previous`` (even past
    max-stale) makes the call conditional, ``background`` serves ``fallback`` now. Not frozen,
    as :class:`Fresh`: every miss and refresh builds one."""

    fallback: Entry | None
    previous: Entry | None = None
    background: bool = False


@dataclass(frozen=True, slots=True)
class ServeStale:
    """Serve ``entry`` past its freshness target and tell the buyer so."""

    entry: Entry
    age_seconds: int
    target_seconds: int


@dataclass(frozen=True, slots=True)
class Fail:
    """No usable entry: the upstream failure stays a failure."""


def whole_seconds(age: float) -> int:
    """An age as the whole number of seconds the spec asks for (floor, never negative)."""
    return max(0, math.floor(age))


def target_seconds(entry: Entry, policy: Freshness) -> float:
    """The upstream's ``max-age`` clamped into the policy's range, else the policy's target."""
    terms = entry.terms
    if terms is None or terms.max_age is None:
        return policy.freshness_target_seconds
    high = policy.max_freshness_seconds
    high = policy.freshness_target_seconds if high is None else high
    return min(max(terms.max_age, policy.min_freshness_seconds), high)


def max_stale_seconds(entry: Entry, policy: Freshness) -> float:
    """The policy's max-stale, capped by the upstream's ``stale-if-error``."""
    terms = entry.terms
    if terms is None or terms.stale_if_error is None:
        return policy.max_stale_seconds
    return min(terms.stale_if_error, policy.max_stale_seconds)


def is_fresh(entry: Entry, now: float, policy: Freshness) -> bool:
    """True while the entry is younger than its target and not soft-purged."""
    if entry.revalidate:
        return False
    if entry.terms is None:  # most entries: every hit asks this
        return max(0.0, now - entry.stored_at) < policy.freshness_target_seconds
    return entry.age(now) < target_seconds(entry, policy)


def fresh_until(entry: Entry, policy: Freshness) -> float:
    """When the entry stops being fresh, on the clock of its ``stored_at``."""
    if entry.revalidate:
        return -math.inf
    carried = 0.0 if entry.terms is None else entry.terms.age
    return entry.stored_at + target_seconds(entry, policy) - carried


def is_servable(entry: Entry, now: float, policy: Freshness) -> bool:
    """True while the entry is within its hard max-stale bound."""
    return entry.age(now) <= target_seconds(entry, policy) + max_stale_seconds(entry, policy)


def in_revalidation_window(entry: Entry, now: float, policy: Freshness) -> bool:
    """True within the upstream's ``stale-while-revalidate`` window past the target."""
    terms = entry.terms
    if entry.revalidate or terms is None or terms.stale_while_revalidate is None:
        return False
    window = min(terms.stale_while_revalidate, max_stale_seconds(entry, policy))
    return entry.age(now) < target_seconds(entry, policy) + window


def fresh_as_stored(entry: Entry, now: float, policy: Freshness) -> bool:
    """True for most fresh entries: no upstream terms, not purged, younger than the target
    (a negative or NaN age is not). ``plan`` decides every other entry."""
    if entry.terms is None and not entry.revalidate:
        age = now - entry.stored_at
        return 0.0 <= age < policy.freshness_target_seconds
    return False


def plan(entry: Entry | None, now: float, policy: Freshness) -> Fresh | Refresh:
    """Before the upstream call: a fresh hit, or a refresh with its stale fallback."""
    if entry is None:
        return Refresh(fallback=None)
    if is_fresh(entry, now, policy):
        return Fresh(entry)
    if not is_servable(entry, now, policy):  # kept for its validators only
        return Refresh(fallback=None, previous=entry)
    return Refresh(entry, entry, in_revalidation_window(entry, now, policy))


def on_failure(entry: Entry | None, now: float, policy: Freshness) -> Fresh | ServeStale | Fail:
    """After a failed upstream call: serve the entry stale if servable (fresh if refreshed)."""
    if entry is None or not is_servable(entry, now, policy):
        return Fail()
    if is_fresh(entry, now, policy):
        return Fresh(entry)
    age = whole_seconds(entry.age(now))
    target = whole_seconds(target_seconds(entry, policy))
    # A purged entry's target is cut to its age: an advisory's age is never below its target.
    return ServeStale(entry, age, min(target, age) if entry.revalidate else target)
