"""AdCP's wholesale conditional fetch, sans-I/O (issue 24, first step): canonical filters,
scope-keyed tokens, the spec's evaluation order."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adcp_stale_cache.adcp.wholesale import (
    Outcome,
    Scope,
    canonical,
    evaluate,
    feed_scope,
    feed_version,
    unchanged_answer,
)

WHOLESALE = {"buying_mode": "wholesale"}


def filters_form(filters: Any) -> Any:
    return canonical(filters, "get_products", at=("filters",))


def test_filters_in_another_order_are_one_form() -> None:
    one = {"channels": ["display", "olv"], "format_kinds": ["image", "html5"]}
    other = {"format_kinds": ["html5", "image", "html5"], "channels": ["olv", "display"]}
    assert filters_form(one) == filters_form(other)
    assert list(filters_form(other)) == ["channels", "format_kinds"]  # keys sorted


def test_an_omitted_key_equals_a_null_one_and_sequences_keep_their_order() -> None:
    assert filters_form({"channels": None, "countries": ["US"]}) == filters_form(
        {"countries": ["US"]}
    )
    kept = canonical({"preferred_delivery_types": ["guaranteed", "non_guaranteed"]}, "get_products")
    flipped = canonical(
        {"preferred_delivery_types": ["non_guaranteed", "guaranteed"]}, "get_products"
    )
    assert kept != flipped  # a priority order means something (uniqueItems notwithstanding)
    assert filters_form({"channels": []}) != filters_form({})  # "none" is not "no filter"


def polygon(*points: tuple[int, int]) -> dict[str, Any]:
    ring = [list(p) for p in (*points, points[0])]
    return {"geometry": {"type": "Polygon", "coordinates": [ring]}}


def test_unknown_arrays_and_geojson_coordinates_are_sequences() -> None:
    """Issue 32, 2: a polygon and its lng/lat-swapped twin (a place ~150 km away) were one
    form and one token, every nested array sorted as a set."""
    area = polygon((2, 48), (3, 48), (3, 49))
    twin = polygon((48, 2), (48, 3), (49, 3))
    for at in (
        {"filters": {"geo_proximity": [area]}},
        {"targeting_overlay": {"geo_proximity": [area]}},
    ):
        swapped = json.loads(json.dumps(at).replace(json.dumps(area), json.dumps(twin)))
        assert canonical(at, "get_products") != canonical(swapped, "get_products")
        tokens = {
            feed_version(feed_scope({**WHOLESALE, **r}, Scope.PUBLIC), [b"x"])
            for r in (at, swapped)
        }
        assert len(tokens) == 2
    # A ring's point order is the ring: reversed is another polygon to the schema (a sequence).
    reversed_ring = {
        "geometry": {"type": "Polygon", "coordinates": [area["geometry"]["coordinates"][0][::-1]]}
    }
    assert filters_form({"geo_proximity": [area]}) != filters_form(
        {"geo_proximity": [reversed_ring]}
    )
    # Arrays of members no schema knows keep their order, of whatever tool.
    a = {"future_field": [{"b": 1, "a": 2}, {"a": 1}]}
    b = {"future_field": [{"a": 1}, {"a": 2, "b": 1}]}
    assert canonical(a, "get_products") != canonical(b, "get_products")
    assert canonical(a) == {"future_field": [{"a": 2, "b": 1}, {"a": 1}]}  # keys sorted only
    with pytest.raises(TypeError):
        canonical({"when": object()})


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@given(values)
def test_canonical_is_idempotent_and_key_order_blind(value: Any) -> None:
    once = canonical(value, "get_products")
    assert canonical(once, "get_products") == once

    def shuffled(v: Any) -> Any:
        if isinstance(v, dict):
            items = list(v.items())
            random.Random(len(items)).shuffle(items)
            return {k: shuffled(x) for k, x in items}
        if isinstance(v, list):
            return [shuffled(x) for x in v]
        return v

    assert json.dumps(canonical(shuffled(value), "get_products")) == json.dumps(once)


def test_a_token_is_scoped_and_changes_exactly_with_the_content() -> None:
    request = {**WHOLESALE, "filters": {"channels": ["display", "olv"]},
               "pagination": {"cursor": "page-2"}, "context": {"correlation_id": "x"}}  # fmt: skip
    public = feed_scope(request, Scope.PUBLIC)
    overlay = feed_scope(request, Scope.ACCOUNT, account="account-overlay.example")
    other = feed_scope(request, Scope.ACCOUNT, account="another.example")
    content = [b'{"products": [1]}', b'{"products": [2]}']
    tokens = {feed_version(s, content) for s in (public, overlay, other)}
    assert len(tokens) == 3  # no scope's token ever matches another scope's request
    assert feed_version(public, content) == feed_version(public, list(reversed(content)))
    assert feed_version(public, content) != feed_version(public, [b'{"products": [3]}'])
    # Neither the cursor nor the context is part of the scope; reordered filters are not either.
    again = {**WHOLESALE, "filters": {"channels": ["olv", "display"]}}
    assert feed_version(feed_scope(again, Scope.PUBLIC), content) == feed_version(public, content)
    with pytest.raises(ValueError):
        feed_scope(request, Scope.ACCOUNT)


def test_the_evaluation_order_of_the_spec() -> None:
    feed, pricing = "wf1.feed", "wf1.pricing"
    cases = {
        (None, None): Outcome.FULL,  # a bootstrap
        (None, pricing): Outcome.INVALID,  # a lone pricing token
        ("wf1.old", None): Outcome.FULL,
        ("wf1.old", pricing): Outcome.FULL,  # feed mismatch: pricing implicitly stale
        (feed, "wf1.old"): Outcome.FULL,  # feed match, pricing mismatch
        (feed, pricing): Outcome.UNCHANGED,
        (feed, None): Outcome.UNCHANGED,
    }
    for (if_feed, if_pricing), expected in cases.items():
        request = {
            **WHOLESALE,
            "if_wholesale_feed_version": if_feed,
            "if_pricing_version": if_pricing,
        }
        request = {k: v for k, v in request.items() if v is not None}
        assert evaluate(request, feed, pricing) is expected, (if_feed, if_pricing)
    # Pricing not tracked apart: a pricing token is ignored beside a matching feed token.
    assert evaluate({**WHOLESALE, "if_wholesale_feed_version": feed, "if_pricing_version": "x"},
                    feed) is Outcome.UNCHANGED  # fmt: skip
    # Not a wholesale read, or a version the seller cannot know: never unchanged.
    assert (
        evaluate({"buying_mode": "brief", "if_wholesale_feed_version": feed}, feed) is Outcome.FULL
    )
    assert (
        evaluate({**WHOLESALE, "if_wholesale_feed_version": feed}, feed, known=False)
        is Outcome.FULL
    )


def test_every_outcome_is_reachable_only_through_its_tokens() -> None:
    feed = "wf1.feed"
    for if_feed, if_pricing in itertools.product([None, feed, "x"], [None, "p", "q"]):
        request = {k: v for k, v in {**WHOLESALE, "if_wholesale_feed_version": if_feed,
                                     "if_pricing_version": if_pricing}.items() if v is not None}  # fmt: skip
        outcome = evaluate(request, feed, "p")
        assert (outcome is Outcome.UNCHANGED) == (if_feed == feed and if_pricing in (None, "p"))


@pytest.mark.parametrize("version", ["3.1", "3.2"])
def test_the_unchanged_answer_matches_the_official_schema(version: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    adcp = pytest.importorskip("adcp", reason="the adcp package bundles the AdCP schemas")
    bundled = Path(adcp.__file__).parent / "_schemas" / version / "bundled"
    schema = json.loads((bundled / "media-buy" / "get-products-response.json").read_text())
    answer = unchanged_answer("wf1.feed", Scope.PUBLIC, "wf1.pricing", {"correlation_id": "c"})
    assert "products" not in answer and answer["unchanged"] is True
    envelope = {"status": "completed"}  # the protocol envelope's, as a seller's answer has it
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    assert [e.message for e in validator.iter_errors({**answer, **envelope})] == []
    assert list(validator.iter_errors({**answer, **envelope, "unchanged": False}))  # never false


def test_an_empty_filters_object_is_omitted_filters_and_refine_keeps_its_order() -> None:
    bare = feed_scope({"buying_mode": "wholesale"}, Scope.PUBLIC)
    for filters in ({}, {"channels": None}):
        assert feed_scope({"buying_mode": "wholesale", "filters": filters}, Scope.PUBLIC) == bare
    assert (
        feed_scope({"buying_mode": "wholesale", "filters": {"channels": []}}, Scope.PUBLIC) != bare
    )  # an empty set is no channel, not every channel
    refine = [{"scope": "request", "ask": "a"}, {"scope": "request", "ask": "b"}]
    assert canonical({"refine": refine}, "get_products")["refine"] == refine
    assert canonical({"refine": refine[::-1]}, "get_products")["refine"] == refine[::-1]


def test_values_nested_past_the_bound_are_refused() -> None:
    deep: Any = {}
    for _ in range(40):
        deep = {"x": deep}
    with pytest.raises(ValueError, match="nest deeper"):
        canonical(deep)
