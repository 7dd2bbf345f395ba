"""Policies: clear errors for bad values, lookups by tool name and route path."""

from __future__ import annotations

import httpx
import pytest
from pydantic import AnyUrl, HttpUrl, TypeAdapter, ValidationError

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
    public = Upstream(name="agent", url="https://agent.example:8443/mcp")
    assert up.identity != public.identity  # what was stripped tells them apart...
    assert up != public
    assert up.key_url is not None and up.key_url.startswith(f"{public.url}#")
    shown = f"{up!r} {up} {up.model_dump()} {up.model_dump_json()} {up.identity}"
    assert "s3cret" not in shown and "abc" not in shown and "jsessionid" not in shown  # ...hashed


def test_upstream_key_url_is_the_url_unless_something_was_stripped() -> None:
    plain = Upstream(name="agent", url="https://agent.example/mcp")
    assert plain.key_url == plain.url  # store keys of such upstreams are as they were
    assert Upstream(name="agent", url="https://agent.example/mcp#top") == plain  # never sent
    tenant_a = Upstream(name="agent", url="https://agent.example/mcp?tenant=a")
    assert Upstream.model_validate(tenant_a).identity == tenant_a.identity
    assert tenant_a.model_copy(update={"timeout_seconds": 3.0}).identity == tenant_a.identity
    held = {"agent": {"name": "agent", "url": "https://agent.example/mcp?tenant=a"}}
    assert TypeAdapter(dict[str, Upstream]).validate_python(held)["agent"] == tenant_a


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
