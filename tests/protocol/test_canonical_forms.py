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

from adcp_stale_cache.adcp.request_shapes import MEMBERS, SHAPES
from adcp_stale_cache.adcp.wholesale import (
    NOT_THE_SCOPE,
    Scope,
    canonical,
    feed_scope,
    feed_version,
    release_of,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "adcp-schemas"


def test_the_table_is_what_the_bundled_schemas_say() -> None:
    """Regenerated from the schemas the adcp package bundles, the table is the same."""
    adcp = pytest.importorskip("adcp", reason="the adcp package bundles the request schemas")
    from bench.request_shapes import generate

    root = Path(adcp.__file__).parent / "_schemas"
    assert generate(root) == (ROOT / "adcp_stale_cache" / "adcp/request_shapes.py").read_text()


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/adcp-schemas is not checked out here")
def test_the_reference_schemas_agree_with_the_table() -> None:
    """What the reference copies (3.2.0-beta.5, unbundled: a schema they do not copy is
    skipped) say of the request arrays is what the table says of 3.2: a set there is a set
    here, a default the same (3.2 added more since: audience_activation_methods)."""
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
        shared = facts(pruned(shape_of(json.loads((SHARED / relative).read_text()), SHARED)))
        assert shared <= facts(SHAPES[tool]["3.2"]), tool
        if tool == "get_products":  # the product filters are copied: they say something
            assert ((("filters", "channels"), "@set", "true")) in shared


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
# two meanings, two. A meaning's members, per tool: what each is to the schema.

SET, SEQUENCE, POLYGON, COUNT = "set", "sequence", "polygon", "count"
WORDS = ["display", "olv", "ctv", "audio"]

#: Per tool: (path, kind, default) of the members a meaning may hold.
LAYOUTS: dict[str, list[tuple[tuple[str, ...], str, Any]]] = {
    "get_products": [
        (("buying_mode",), "wholesale", None),
        (("filters", "channels"), SET, None),
        (("filters", "pricing_currencies"), SET, None),
        (("filters", "geo_proximity"), POLYGON, None),
        (("targeting_overlay", "geo_proximity"), POLYGON, None),
        (("preferred_delivery_types",), SEQUENCE, None),
        (("pagination", "max_results"), COUNT, 50),
        (
            ("required_media_buy_support", "frequency_cap_constraints", "supported_per_units"),
            SET,
            None,
        ),
        (("media_buy_frequency_cap", "max_impressions"), COUNT, None),
        (("refine",), SEQUENCE, None),
    ],
    "list_products": [
        (("criteria", "offer_filters", "channels"), SET, None),
        (("criteria", "product_ids"), SET, None),
        (("criteria", "offer_filters", "geo_proximity"), POLYGON, None),
        (("fields",), SET, None),
        (("max_results",), COUNT, 25),
    ],
    "get_signals": [
        (("fields",), SET, None),
        (("countries",), SEQUENCE, None),  # no uniqueItems: kept in order, to be safe
        (("signal_spec",), "text", None),
        (("pagination", "max_results"), COUNT, 50),
    ],
}
points = st.tuples(st.integers(-3, 3), st.integers(-3, 3))


def put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


@st.composite
def meanings(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    """A request in the test's own normal form: sets sorted and unique, no member equal to
    its default, sequences as they mean."""
    meaning: dict[str, Any] = {}
    for path, kind, default in LAYOUTS[tool]:
        if kind == "wholesale":
            put(meaning, path, "wholesale")
        elif not draw(st.booleans()):
            continue
        elif kind == SET:
            put(meaning, path, sorted(draw(st.sets(st.sampled_from(WORDS)))))
        elif kind == SEQUENCE:
            put(meaning, path, draw(st.lists(st.sampled_from(WORDS), max_size=3)))
        elif kind == POLYGON:  # its points are a sequence, each [lng, lat] too
            ring = [list(p) for p in draw(st.lists(points, min_size=3, max_size=4))]
            put(
                meaning,
                path,
                [{"geometry": {"type": "Polygon", "coordinates": [[*ring, ring[0]]]}}],
            )
        elif kind == COUNT:
            put(meaning, path, draw(st.integers(1, 60).filter(lambda n, d=default: n != d)))
        else:
            put(meaning, path, draw(st.sampled_from(["sports fans", "movie goers"])))
    return meaning


def spelled(tool: str, meaning: dict[str, Any], seed: int) -> dict[str, Any]:
    """One of the spellings of ``meaning``: members in any order, set arrays shuffled with
    repeats, defaults spelled, absent members null, the per-request members anything."""
    rnd = random.Random(seed)
    sets = {path for path, kind, _ in LAYOUTS[tool] if kind == SET}
    defaults = {path: default for path, kind, default in LAYOUTS[tool] if default is not None}

    def spell(value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, dict):
            items = [(k, spell(v, (*path, k))) for k, v in value.items()]
            for at, default in defaults.items():
                if at[:-1] == path and at[-1] not in value and rnd.random() < 0.5:
                    items.append((at[-1], default))
            if rnd.random() < 0.3:
                items.append(("unused_null", None))
            rnd.shuffle(items)
            return dict(items)
        if isinstance(value, list) and path in sets:
            items = value + rnd.sample(value, k=min(len(value), rnd.randint(0, 2)))
            rnd.shuffle(items)
            return items
        return value

    request = spell(meaning, ())
    request["context"] = {"correlation_id": f"c{seed}"}
    request["idempotency_key"] = f"k{seed}"
    if rnd.random() < 0.5:
        request["adcp_version"] = "3.2.0"
    return request


def form_and_token(tool: str, request: dict[str, Any]) -> tuple[str, str]:
    """The request's form (what keys its entry, less the per-request members) and token."""
    asked = {k: v for k, v in request.items() if k not in NOT_THE_SCOPE}
    form = json.dumps(canonical(asked, tool, release_of(request)), sort_keys=True)
    return form, feed_version(feed_scope(request, Scope.PUBLIC, tool=tool), [b"content"])


@pytest.mark.parametrize("tool", sorted(LAYOUTS))
@settings(max_examples=200, deadline=None)
@given(data=st.data(), a=st.integers(0, 2**16), b=st.integers(0, 2**16))
def test_one_meaning_is_one_entry_and_one_token(
    tool: str, data: st.DataObject, a: int, b: int
) -> None:
    meaning = data.draw(meanings(tool))
    assert form_and_token(tool, spelled(tool, meaning, a)) == form_and_token(
        tool, spelled(tool, meaning, b)
    )


@pytest.mark.parametrize("tool", sorted(LAYOUTS))
@settings(max_examples=200, deadline=None)
@given(data=st.data(), a=st.integers(0, 2**16), b=st.integers(0, 2**16))
def test_two_meanings_never_share_an_entry_or_a_token(
    tool: str, data: st.DataObject, a: int, b: int
) -> None:
    one, other = data.draw(meanings(tool)), data.draw(meanings(tool))
    if one == other:
        return
    mine, theirs = (
        form_and_token(tool, spelled(tool, one, a)),
        form_and_token(tool, spelled(tool, other, b)),
    )
    assert mine[0] != theirs[0] and mine[1] != theirs[1]
