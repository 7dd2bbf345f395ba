"""The decision core, by tables: no I/O, no clock but the numbers given."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adcp_stale_cache.core.decision import (
    Fail,
    Fresh,
    Refresh,
    ServeStale,
    on_failure,
    plan,
    whole_seconds,
)
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.core.policy import SurfacePolicy

STORED = 100.0


def policy(target: int, max_stale: int) -> SurfacePolicy:
    return SurfacePolicy(name="t", freshness_target_seconds=target, max_stale_seconds=max_stale)


ENTRY = Entry(b"{}", STORED)


@pytest.mark.parametrize(
    ("target", "max_stale", "age", "expected"),
    [
        (10, 50, 0.0, "fresh"),
        (10, 50, 9.999, "fresh"),
        (10, 50, 10.0, "refresh+fallback"),  # exactly at the target: past it
        (10, 50, 59.999, "refresh+fallback"),
        (10, 50, 60.0, "refresh+fallback"),  # exactly at target + max-stale: still servable
        (10, 50, 60.001, "refresh"),  # past max-stale: no fallback
        (0, 50, 0.0, "refresh+fallback"),  # target 0: every hit is past target
        (0, 0, 0.0, "refresh+fallback"),
        (0, 0, 0.001, "refresh"),
    ],
)
def test_plan(target: int, max_stale: int, age: float, expected: str) -> None:
    step = plan(ENTRY, STORED + age, policy(target, max_stale))
    got = (
        "fresh"
        if isinstance(step, Fresh)
        else ("refresh+fallback" if step.fallback is not None else "refresh")
    )
    assert got == expected


def test_plan_without_entry_refreshes_with_no_fallback() -> None:
    assert plan(None, 0.0, policy(10, 10)) == Refresh(fallback=None)


@pytest.mark.parametrize(
    ("target", "max_stale", "age", "expected"),
    [
        (10, 50, 10.0, ServeStale(ENTRY, 10, 10)),
        (10, 50, 10.7, ServeStale(ENTRY, 10, 10)),  # whole seconds, floored
        (10, 50, 60.0, ServeStale(ENTRY, 60, 10)),
        (10, 50, 60.5, Fail()),
        (0, 5, 0.0, ServeStale(ENTRY, 0, 0)),
        (10, 50, 3.0, Fresh(ENTRY)),  # refreshed by a concurrent call meanwhile: plain hit
    ],
)
def test_on_failure(target: int, max_stale: int, age: float, expected: object) -> None:
    assert on_failure(ENTRY, STORED + age, policy(target, max_stale)) == expected


def test_on_failure_without_entry_fails() -> None:
    assert on_failure(None, 0.0, policy(10, 10)) == Fail()


def test_age_never_negative_and_whole() -> None:
    # A clock reading before the store time (another host, a reset) gives age 0, not -1.
    assert on_failure(ENTRY, STORED - 5, policy(0, 10)) == ServeStale(ENTRY, 0, 0)
    assert whole_seconds(-3.2) == 0
    assert whole_seconds(2.999) == 2
    assert isinstance(whole_seconds(7.0), int)


def test_a_purged_entry_served_stale_states_a_target_no_greater_than_its_age() -> None:
    """Issue 22, item 14: after a soft purge, an entry younger than its target served during
    an outage carries an advisory whose cache_age_seconds >= freshness_target_seconds."""
    import dataclasses

    purged = dataclasses.replace(ENTRY, revalidate=True)
    outcome = on_failure(purged, STORED + 3.5, policy(60, 3600))
    assert isinstance(outcome, ServeStale)
    assert (outcome.age_seconds, outcome.target_seconds) == (3, 3)
    plain = on_failure(ENTRY, STORED + 75, policy(60, 3600))
    assert isinstance(plain, ServeStale) and (plain.age_seconds, plain.target_seconds) == (75, 60)


@given(
    age=st.floats(allow_infinity=True) | st.sampled_from([-0.0, 0.0, 9.999, 10.0, -1e-9]),
    target=st.integers(0, 100),
    revalidate=st.booleans(),
    max_age=st.none() | st.floats(0, 200),
)
def test_fresh_as_stored_is_plans_fresh_and_no_more(
    age: float, target: int, revalidate: bool, max_age: float | None
) -> None:
    """Look-ups take most hits by ``fresh_as_stored`` alone, without a plan: whatever it calls
    fresh, the plan calls fresh; entries with terms or a purge are left to the plan."""
    from adcp_stale_cache.core.decision import fresh_as_stored
    from adcp_stale_cache.core.entry import Terms

    terms = None if max_age is None else Terms(max_age=max_age)
    entry = Entry(b"{}", STORED, (), revalidate, False, terms)
    rule, now = policy(target, 50), STORED + age
    plainly = terms is None and not revalidate and 0.0 <= now - STORED < target
    if fresh_as_stored(entry, now, rule):
        assert isinstance(plan(entry, now, rule), Fresh)
        assert plainly
    elif plainly:
        raise AssertionError("a plain young entry left to the plan")
