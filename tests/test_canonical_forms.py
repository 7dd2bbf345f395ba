"""Canonical forms from the request schemas (issue 32): the generated table is what the
schemas say, and a request's meaning, not its spelling, decides its entry and its token."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adcp_stale_cache.request_shapes import MEMBERS, SHAPES
from adcp_stale_cache.wholesale import (
    NOT_THE_SCOPE,
    Scope,
    canonical,
    feed_scope,
    feed_version,
)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "adcp-schemas"


def test_the_table_is_what_the_bundled_schemas_say() -> None:
    """Regenerated from the schemas the adcp package bundles, the table is the same."""
    adcp = pytest.importorskip("adcp", reason="the adcp package bundles the request schemas")
    from bench.request_shapes import generate

    root = Path(adcp.__file__).parent / "_schemas"
    assert generate(root) == (ROOT / "adcp_stale_cache" / "request_shapes.py").read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/adcp-schemas is not checked out here")
def test_the_reference_schemas_agree_with_the_table() -> None:
    """What the reference copies (3.2.0-beta.5) say of the request arrays they define inline
    is what the table says of 3.2 (a set there is a set here, a default the same)."""
    from bench.request_shapes import TOOLS, pruned, shape_of

    def facts(node: dict[str, Any], path: tuple[str, ...] = ()) -> set[tuple[Any, ...]]:
        found: set[tuple[Any, ...]] = set()
        for key, value in node.items():
            if key.startswith("@") and key not in ("@items", "@any"):
                found.add((path, key, json.dumps(value)))
            else:
                found |= facts(value, (*path, key))
        return found

    for tool, relative in TOOLS.items():
        shared = pruned(shape_of(json.loads((SHARED / relative).read_text())))
        assert facts(shared) <= facts(SHAPES[tool]["3.2"]), tool


def test_every_member_of_every_release_is_in_the_scope_or_known_not_to_select() -> None:
    """Issue 32, 9: 3.2's media_buy_frequency_cap and required_media_buy_support were not in
    the token's scope: two requests with different product sets got one token."""
    for tool, releases in MEMBERS.items():
        for release, members in releases.items():
            for member in members:
                if member in NOT_THE_SCOPE:
                    continue
                one = {"buying_mode": "wholesale", "adcp_version": f"{release}.0", member: {"a": 1}}
                other = {**one, member: {"a": 2}}
                tokens = {
                    feed_version(feed_scope(r, Scope.PUBLIC, tool=tool), [b"same"])
                    for r in (one, other)
                }
                assert len(tokens) == 2, (tool, release, member)
    for member in ("media_buy_frequency_cap", "required_media_buy_support"):
        assert member in MEMBERS["get_products"]["3.2"]


# The property: requests are spelled from a meaning; one meaning, one form and one token;
# two meanings, two.

CHANNELS = ["display", "olv", "ctv", "audio"]
points = st.tuples(st.integers(-3, 3), st.integers(-3, 3))


@st.composite
def meanings(draw: st.DrawFn) -> dict[str, Any]:
    """A get_products request in the test's own normal form: sets sorted and unique, no
    member equal to its default, sequences as they mean."""
    meaning: dict[str, Any] = {"buying_mode": "wholesale"}
    filters: dict[str, Any] = {}
    if draw(st.booleans()):
        filters["channels"] = sorted(draw(st.sets(st.sampled_from(CHANNELS))))
    if draw(st.booleans()):
        filters["pricing_currencies"] = sorted(draw(st.sets(st.sampled_from(["EUR", "USD"]))))
    if draw(st.booleans()):  # a polygon: its points are a sequence, each [lng, lat] too
        ring = [list(p) for p in draw(st.lists(points, min_size=3, max_size=4))]
        filters["geo_proximity"] = [
            {"geometry": {"type": "Polygon", "coordinates": [[*ring, ring[0]]]}}
        ]
    if filters:
        meaning["filters"] = filters
    if draw(st.booleans()):
        meaning["preferred_delivery_types"] = draw(
            st.permutations(["guaranteed", "non_guaranteed"])
        )
    if draw(st.booleans()):
        meaning["pagination"] = {"max_results": draw(st.integers(1, 49))}  # 50 is the default
    if draw(st.booleans()):
        meaning["required_media_buy_support"] = {
            "frequency_cap_constraints": {
                "supported_per_units": sorted(
                    draw(st.sets(st.sampled_from(["devices", "households"]), min_size=1))
                )
            }
        }
    if draw(st.booleans()):
        meaning["media_buy_frequency_cap"] = {"max_impressions": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        meaning["refine"] = [
            {"scope": "request", "ask": ask}
            for ask in draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=2))
        ]
    return meaning


SETS = {"channels", "pricing_currencies", "supported_per_units"}
DEFAULTS = {"pagination": ("max_results", 50), "refine": ("action", "include")}


def spelled(meaning: dict[str, Any], seed: int) -> dict[str, Any]:
    """One of the spellings of ``meaning``: members in any order, set arrays shuffled with
    repeats, defaults spelled, absent members null, the per-request members anything."""
    rnd = random.Random(seed)

    def spell(value: Any, name: str = "") -> Any:
        if isinstance(value, dict):
            items = [(k, spell(v, k)) for k, v in value.items()]
            if name in DEFAULTS and DEFAULTS[name][0] not in value and rnd.random() < 0.5:
                items.append(DEFAULTS[name])
            if rnd.random() < 0.3:
                items.append(("unused_null", None))
            rnd.shuffle(items)
            return dict(items)
        if isinstance(value, list):
            items = [spell(v, "refine" if name == "refine" else "") for v in value]
            if name in SETS:
                items = items + rnd.sample(items, k=min(len(items), rnd.randint(0, 2)))
                rnd.shuffle(items)
            return items
        return value

    request = spell(meaning)
    request["context"] = {"correlation_id": f"c{seed}"}
    request["idempotency_key"] = f"k{seed}"
    if rnd.random() < 0.5:
        request["adcp_version"] = "3.2.0"
    return request


def form_and_token(request: dict[str, Any]) -> tuple[str, str]:
    asked = {k: v for k, v in request.items() if k not in NOT_THE_SCOPE}
    form = json.dumps(canonical(asked, "get_products", "3.2"), sort_keys=True)
    return form, feed_version(feed_scope(request, Scope.PUBLIC), [b"content"])


@settings(max_examples=300, deadline=None)
@given(meanings(), st.integers(0, 2**16), st.integers(0, 2**16))
def test_one_meaning_is_one_entry_and_one_token(meaning: dict[str, Any], a: int, b: int) -> None:
    assert form_and_token(spelled(meaning, a)) == form_and_token(spelled(meaning, b))


@settings(max_examples=300, deadline=None)
@given(meanings(), meanings(), st.integers(0, 2**16), st.integers(0, 2**16))
def test_two_meanings_never_share_an_entry_or_a_token(
    one: dict[str, Any], other: dict[str, Any], a: int, b: int
) -> None:
    if one == other:
        return
    mine, theirs = form_and_token(spelled(one, a)), form_and_token(spelled(other, b))
    assert mine[0] != theirs[0] and mine[1] != theirs[1]
