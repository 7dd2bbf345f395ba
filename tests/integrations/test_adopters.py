"""What adopting sellers bring: pydantic models, the adcp client's errors, their own types."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from adcp_stale_cache import (
    FailureKind,
    PydanticCodec,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    classify,
    collect_advisories,
)

FORMATS = SurfacePolicy(name="list_creative_formats", field="formats", freshness_target_seconds=0)
AGENT = Upstream(name="creative-agent", url="https://creative.example/mcp")


class FormatId(BaseModel):
    agent_url: str
    format_id: str = Field(alias="id")


class Format(BaseModel):
    """Shaped like a seller's: aliases, extras, internal fields kept out of dumps, privates."""

    model_config = ConfigDict(extra="allow")

    format_id: FormatId
    display_name: str = Field(alias="name")
    platform_config: dict[str, Any] | None = Field(default=None, exclude=True)
    category: str | None = Field(default=None, exclude=True)
    renders: list[int] = []
    _source_agent: str | None = PrivateAttr(default=None)


def make_format(i: int) -> Format:
    fmt = Format.model_validate(
        {
            "format_id": {"agent_url": "https://creative.example", "id": f"display_{i}"},
            "name": f"Display {i}",
            "platform_config": {"gam": {"size": [300, 250]}},
            "vendor_hint": {"x": i},  # an extra
        }
    )
    fmt._source_agent = "agent-a"
    return fmt


def test_default_codec_refuses_models_and_model_dump_loses_state() -> None:
    from adcp_stale_cache import JSON

    with pytest.raises(TypeError):
        JSON.dumps([make_format(1)])
    assert "platform_config" not in make_format(1).model_dump()  # why dumps are no cache format


@pytest.mark.parametrize("shape", ["model", "list", "dict"])
def test_pydantic_codec_round_trips_what_the_seller_holds(shape: str) -> None:
    value: Any = {
        "model": make_format(1),
        "list": [make_format(1), make_format(2)],
        "dict": {"a": make_format(1)},
    }[shape]
    value_type: Any = {"model": Format, "list": list[Format], "dict": dict[str, Format]}[shape]
    codec = PydanticCodec(value_type)
    back = codec.loads(codec.dumps(value))
    originals = (
        value
        if isinstance(value, list)
        else list(value.values())
        if isinstance(value, dict)
        else [value]
    )
    copies = (
        back
        if isinstance(back, list)
        else list(back.values())
        if isinstance(back, dict)
        else [back]
    )
    for original, copy in zip(originals, copies, strict=True):
        assert copy is not original and copy == original  # fields, extras, excluded fields
        assert copy.platform_config == {"gam": {"size": [300, 250]}}
        assert copy.model_extra == {"vendor_hint": {"x": original.model_extra["vendor_hint"]["x"]}}
        assert copy._source_agent == "agent-a"  # a private attribute
        assert copy.model_fields_set == original.model_fields_set
        assert copy.model_dump(by_alias=True, exclude_unset=True) == original.model_dump(
            by_alias=True, exclude_unset=True
        )


def test_an_entry_of_an_older_model_shape_is_unreadable() -> None:
    class Old(BaseModel):
        name: str

    class New(BaseModel):
        name: str
        width: int

    data = PydanticCodec(Old).dumps(Old(name="x"))
    with pytest.raises(ValueError):
        PydanticCodec(New).loads(data)


async def test_models_through_the_cache_are_served_stale_as_models() -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    codec: PydanticCodec[list[Format]] = PydanticCodec(list[Format])
    down = False

    async def list_formats() -> list[Format]:
        if down:
            raise ConnectionRefusedError
        return [make_format(1)]

    first = await cache.fetch(AGENT, "formats", list_formats, surface=FORMATS, codec=codec)
    down = True
    with collect_advisories() as advisories:
        stale = await cache.fetch(AGENT, "formats", list_formats, surface=FORMATS, codec=codec)
    assert stale == first and isinstance(stale[0], Format) and stale[0].platform_config
    assert advisories.errors()[0]["code"] == "STALE_RESPONSE"


# The adcp client's exceptions are outages, by type.
adcp_exceptions = pytest.importorskip("adcp.exceptions", reason="the adcp extra is needed")


@pytest.mark.parametrize(
    ("make", "code", "kind"),
    [
        (lambda e: e.ADCPTimeoutError("timed out", agent_id="a", timeout=5), "TIMEOUT",
         FailureKind.TIMEOUT),
        (lambda e: e.ADCPConnectionError("Failed to connect: boom", agent_id="a"),
         "CONNECTION_ERROR", FailureKind.CONNECTION),
    ],
)  # fmt: skip
def test_adcp_client_errors_are_outages(make: Any, code: str, kind: FailureKind) -> None:
    failure = classify(make(adcp_exceptions))
    assert (failure.code, failure.kind) == (code, kind)


def test_an_http_503_wrapped_by_the_adcp_client_keeps_its_status() -> None:
    import httpx

    request = httpx.Request("GET", "https://creative.example/.well-known/agent-card.json")
    status = httpx.HTTPStatusError(
        "503", request=request, response=httpx.Response(503, request=request)
    )
    try:
        try:
            raise status
        except httpx.HTTPStatusError as exc:
            raise adcp_exceptions.ADCPConnectionError(
                "Failed to fetch agent card: HTTP 503"
            ) from exc
    except adcp_exceptions.ADCPConnectionError as wrapped:
        assert classify(wrapped).code == "UPSTREAM_HTTP_503"


def test_adcp_task_error_with_an_adcp_code_is_the_upstreams_error() -> None:
    error = adcp_exceptions.ADCPTaskError(
        "list_creative_formats", [{"code": "SERVICE_UNAVAILABLE", "message": "down"}]
    )
    failure = classify(error)
    assert (failure.code, failure.kind) == ("SERVICE_UNAVAILABLE", FailureKind.UPSTREAM_ERROR)


async def test_adopters_map_their_own_exception_types() -> None:
    class AdCPServiceUnavailableError(Exception):
        """What a seller raises of its own."""

    cache = UpstreamCache(
        surfaces=Surfaces.of(FORMATS),
        failure_types={AdCPServiceUnavailableError: "SERVICE_UNAVAILABLE"},
    )
    calls = 0

    async def list_formats() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise AdCPServiceUnavailableError("agent https://internal.example is down")
        return {"formats": ["f1"]}

    await cache.fetch(AGENT, "formats", list_formats, surface=FORMATS)
    with collect_advisories() as advisories:
        assert await cache.fetch(AGENT, "formats", list_formats, surface=FORMATS) == {
            "formats": ["f1"]
        }
    original = advisories.errors()[0]["details"]["original_error"]
    assert original == {
        "code": "SERVICE_UNAVAILABLE",
        "message": "Upstream returned SERVICE_UNAVAILABLE",
    }


async def test_a_credential_the_partition_does_not_read_warns_once(caplog: Any) -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from adcp_stale_cache import StaleAdvisoryMiddleware

    private = SurfacePolicy(name="get_products", field="products", paths=("/api/get_products",))
    public = FORMATS.model_copy(
        update={"paths": ("/api/list_creative_formats",), "shared_across_callers": True}
    )
    surfaces = Surfaces.of(private, public)
    cache = UpstreamCache(surfaces=surfaces)

    async def handler(request: Request) -> JSONResponse:
        async def call() -> dict[str, Any]:
            return {"items": []}

        return JSONResponse(await cache.fetch(AGENT, "k", call))

    routes = [
        Route(p, handler, methods=["POST"])
        for p in ("/api/get_products", "/api/list_creative_formats")
    ]
    app = StaleAdvisoryMiddleware(Starlette(routes=routes), surfaces=surfaces)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        await c.post("/api/list_creative_formats")  # shared: no partition, no warning
        await c.post("/api/get_products", headers={"authorization": "Bearer a"})
        await c.post("/api/get_products")  # no credential at all: a public caller, quiet
        assert "partition_ignores_credential" not in caplog.text
        for _ in range(3):
            await c.post("/api/get_products", headers={"x-auth-token": "t"})
            await c.post("/api/get_products", json={"principal_id": "p"})
    assert caplog.text.count("partition_ignores_credential") == 1
    assert "header x-auth-token" in caplog.text
