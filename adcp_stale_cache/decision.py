"""The caching decision, with no I/O: tested by tables, shared by every adapter.

Two questions are asked of an entry (or its absence), the current time and a policy:

* before calling the upstream, :func:`plan`: serve the entry as fresh, or call the upstream
  (keeping the entry, when it is still within max-stale, as the fallback);
* after the upstream call failed, :func:`on_failure`: serve the entry stale, or fail.

Boundaries (RFC 9111 semantics): an entry is fresh while ``age < target``, so a target of 0
makes every hit past target; it may be served stale while ``age <= target + max_stale``.
"""

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


@dataclass(frozen=True, slots=True)
class Fresh:
    """Serve ``entry`` as it is; the upstream is not called."""

    entry: Entry


@dataclass(frozen=True, slots=True)
class Refresh:
    """Call the upstream; ``fallback`` is the entry to serve stale if the call fails."""

    fallback: Entry | None


@dataclass(frozen=True, slots=True)
class ServeStale:
    """Serve ``entry`` past its freshness target and tell the buyer so."""

    entry: Entry
    age_seconds: int


@dataclass(frozen=True, slots=True)
class Fail:
    """No usable entry: the upstream failure stays a failure."""


def whole_seconds(age: float) -> int:
    """An age as the whole number of seconds the spec asks for (floor, never negative)."""
    return max(0, math.floor(age))


def is_fresh(entry: Entry, now: float, policy: Freshness) -> bool:
    """True while the entry is younger than the freshness target (and not soft-purged: an
    invalidated entry is past its target whatever its age)."""
    return not entry.revalidate and entry.age(now) < policy.freshness_target_seconds


def is_servable(entry: Entry, now: float, policy: Freshness) -> bool:
    """True while the entry is within the hard max-stale bound."""
    return entry.age(now) <= policy.freshness_target_seconds + policy.max_stale_seconds


def plan(entry: Entry | None, now: float, policy: Freshness) -> Fresh | Refresh:
    """Before the upstream call: a fresh hit, or a refresh with its stale fallback."""
    if entry is None:
        return Refresh(fallback=None)
    if is_fresh(entry, now, policy):
        return Fresh(entry)
    return Refresh(fallback=entry if is_servable(entry, now, policy) else None)


def on_failure(entry: Entry | None, now: float, policy: Freshness) -> Fresh | ServeStale | Fail:
    """After a failed upstream call: serve the entry stale if it is still servable.

    The entry may have been refreshed by a concurrent call meanwhile: a fresh entry is
    served as a plain hit, with no advisory.
    """
    if entry is None or not is_servable(entry, now, policy):
        return Fail()
    if is_fresh(entry, now, policy):
        return Fresh(entry)
    return ServeStale(entry, whole_seconds(entry.age(now)))
