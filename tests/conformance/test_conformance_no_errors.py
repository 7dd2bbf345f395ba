"""The kit fails a seller that puts ``errors`` (a ``STALE_RESPONSE`` say) in an answer whose
schema has none: 3.2's ``list_products`` (issue 32). Its table comes from the schemas the
``adcp`` package bundles, never from ``../shared``."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache.conformance import check_seller, rules

from ..a2a_kit_seller import a2a_seller

pytest.importorskip("jsonschema", reason="the check extra is needed")
if rules.response_schema("list_products") is None:
    pytest.skip("the installed adcp bundles no 3.2 list_products schema", allow_module_level=True)

STALE = {
    "code": "STALE_RESPONSE",
    "message": "m",
    "recovery": "transient",
    "field": "products",
    "details": {"served_from_cache": True, "cache_age_seconds": 120},
}


def test_the_table_comes_from_the_bundled_schemas() -> None:
    assert rules.has_errors_member("list_products") is False
    assert rules.has_errors_member("get_products") is True
    assert rules.has_errors_member("no_such_tool") is True  # unknown: not held to it


@pytest.mark.parametrize(
    ("stale", "passed"),
    [
        ({"errors": [STALE]}, False),
        ({"errors": []}, False),
        ({"incomplete": [{"scope": "products", "description": "served from cache"}]}, True),
    ],
    ids=["a STALE_RESPONSE", "an empty errors", "incomplete"],
)
async def test_a_list_products_answer_never_carries_errors(
    stale: dict[str, Any], passed: bool
) -> None:
    report = await check_seller(a2a_seller(stale), transport="a2a", tool="list_products")
    assert report.passed is passed, report.text()
    failed = {r.rule for r in report.failed()}
    assert failed == (set() if passed else {"no_errors_member (stale)"}), report.text()
