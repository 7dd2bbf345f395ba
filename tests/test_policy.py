"""Policies: clear errors for bad values, lookups by tool name and route path."""

from __future__ import annotations

import httpx
import pytest
from pydantic import AnyUrl, HttpUrl, ValidationError

from adcp_stale_cache import SurfacePolicy, Surfaces, Upstream


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"freshness_target_seconds": -1}, "freshness_target_seconds"),
        ({"max_stale_seconds": -5}, "max_stale_seconds"),
        ({"upstream_timeout_seconds": 0}, "upstream_timeout_seconds"),
        ({"stale_on": ["bogus"]}, "stale_on"),
        ({"freshnes_target_seconds": 1}, "freshnes_target_seconds"),
    ],
)
def test_bad_values_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        SurfacePolicy(name="get_products", **kwargs)  # type: ignore[arg-type]
    assert field in str(raised.value)


def test_lookup_by_tool_and_path() -> None:
    products = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
    surfaces = Surfaces.of(products)
    assert surfaces.for_tool("get_products") is products
    assert surfaces.for_tool("unknown") is surfaces.default
    assert surfaces.for_path("/api/get_products/") is products
    assert surfaces.for_path("/other") is None
    with pytest.raises(KeyError, match="known: get_products"):
        surfaces.get("nope")


def test_duplicate_names_or_paths_are_refused() -> None:
    with pytest.raises(ValidationError, match="unique"):
        Surfaces.of(SurfacePolicy(name="a"), SurfacePolicy(name="a"))
    with pytest.raises(ValidationError, match="one surface only"):
        Surfaces.of(SurfacePolicy(name="a", paths=("/x",)), SurfacePolicy(name="b", paths=("/x",)))


def test_upstream_url_never_carries_credentials() -> None:
    up = Upstream(name="agent", url="https://user:s3cret@agent.example:8443/mcp?token=abc#frag")
    assert up.url == "https://agent.example:8443/mcp"
    with pytest.raises(ValidationError):
        Upstream(name="agent", url="not a url")
    with pytest.raises(ValidationError):
        Upstream(name="")


@pytest.mark.parametrize(
    "held",
    [
        AnyUrl("https://user:s3cret@agent.example:8443/mcp;jsessionid=1?token=abc#frag"),
        HttpUrl("https://user:s3cret@agent.example:8443/mcp?token=abc"),
        httpx.URL("https://user:s3cret@agent.example:8443/mcp?token=abc"),
        "https://user:s3cret@agent.example:8443/mcp?token=abc",
    ],
    ids=["AnyUrl", "HttpUrl", "httpx.URL", "str"],
)
def test_upstream_url_takes_the_url_types_sellers_hold(held: object) -> None:
    up = Upstream(name="agent", url=held)  # type: ignore[arg-type]
    assert up.url == "https://agent.example:8443/mcp"
    assert up.identity == Upstream(name="agent", url="https://agent.example:8443/mcp").identity


@pytest.mark.parametrize(
    ("garbage", "says"),
    [
        (42, "(got int)"),
        (b"https://agent.example/mcp", "(got bytes)"),
        (object(), "(got object)"),
        (httpx.URL("/mcp?token=s3cret"), "(got URL)"),
        ("ftp://agent.example/", "absolute http(s) URL"),
    ],
)
def test_upstream_url_refuses_garbage_clearly(garbage: object, says: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Upstream(name="agent", url=garbage)  # type: ignore[arg-type]
    assert "must be an absolute http(s) URL" in str(raised.value)
    assert says in str(raised.value) and "s3cret" not in str(raised.value)
