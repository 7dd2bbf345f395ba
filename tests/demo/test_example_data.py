"""The mock upstreams' sample data is valid against the official AdCP schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache.demo.data import creative_formats, products

jsonschema = pytest.importorskip("jsonschema")
adcp = pytest.importorskip("adcp", reason="the adcp package bundles the full AdCP schemas")
ROOT = Path(adcp.__file__).parent / "_schemas"


def validator(version: str, path: str) -> Any:
    schema = json.loads((ROOT / version / "bundled" / path).read_text())
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())


# 3.1 responses carry the protocol envelope's status and a cache_scope of their own.
ENVELOPE = {"3.0": {}, "3.1": {"status": "completed"}, "3.2": {"status": "completed"}}


@pytest.mark.parametrize("version", ["3.0", "3.1", "3.2"])
def test_formats_valid(version: str) -> None:
    payload = {
        "formats": creative_formats("http://127.0.0.1:8000/mcp", "a", 8),
        **ENVELOPE[version],
    }
    errors = [
        e.message
        for e in validator(version, "creative/list-creative-formats-response.json").iter_errors(
            payload
        )
    ]
    assert not errors


@pytest.mark.parametrize("version", ["3.0", "3.1", "3.2"])
@pytest.mark.parametrize("principal", [None, "alice"])
def test_products_valid(version: str, principal: str | None) -> None:
    payload = {"products": products(5, principal), "cache_scope": "public", **ENVELOPE[version]}
    errors = [
        e.message
        for e in validator(version, "media-buy/get-products-response.json").iter_errors(payload)
    ]
    assert not errors


def test_principals_get_their_own_products() -> None:
    alice, bob = products(2, "alice"), products(2, "bob")
    assert {p["product_id"] for p in alice}.isdisjoint(p["product_id"] for p in bob)
    assert "alice" not in json.dumps(alice)  # the principal is hashed, not echoed
