"""What real sellers hand the library (issue 21): the ``adcp`` package's own models, fastmcp's
null fields, exceptions of their own, tenants' credentials, a loop per call.

Runs in the dev environment (``adcp`` 9.2) and in CI's fastmcp environment (``adcp`` 6.6).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from importlib.resources import files
from typing import Any

import pytest

from adcp_stale_cache import (
    FailureKind,
    JsonCodec,
    PydanticCodec,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    classify,
    collect_advisories,
)
from adcp_stale_cache.buyer import payload_of
from adcp_stale_cache.codecs import inject_body, inject_json, parse_calls
from adcp_stale_cache.codecs.mcp import inject_tool_result
from adcp_stale_cache.core.values import encode

adcp_types = pytest.importorskip("adcp.types", reason="the adcp extra is needed")

try:  # adcp 6.x
    from adcp.types import Format, ListCreativeFormatsResponse

    LEGACY = False
except ImportError:  # adcp 9.x: list_creative_formats is legacy since AdCP 3.2
    from adcp.types import LegacyListCreativeFormatsResponse as ListCreativeFormatsResponse
    from adcp.types.domains.core.format import Format  # type: ignore[no-redef]

    LEGACY = True

FORMATS = SurfacePolicy(name="list_creative_formats", field="formats", freshness_target_seconds=0)
AGENT = Upstream(name="creative-agent", url="https://creative.example/mcp")
ADVISORY = {"code": "STALE_RESPONSE", "message": "stale", "recovery": "transient"}


@functools.lru_cache(maxsize=1)
def _reference_formats() -> str:
    fixture = files("adcp.canonical_formats") / "_fixtures" / "v1-reference-formats.json"
    return fixture.read_text(encoding="utf-8")


def reference_formats() -> list[dict[str, Any]]:
    """The 50 v1 reference formats the ``adcp`` package ships (a fresh copy per call)."""
    formats: list[dict[str, Any]] = json.loads(_reference_formats())
    return formats


def response_with_nulls() -> dict[str, Any]:
    """A seller's answer as fastmcp writes ``ToolResult(structured_content=model)`` on
    ``adcp`` 6.6: every unset field present as null (9.x models leave them out themselves,
    so they are written here as 6.6 writes them)."""
    model = ListCreativeFormatsResponse(formats=[Format.model_validate(reference_formats()[0])])
    payload: dict[str, Any] = json.loads(model.model_dump_json())
    payload = {**dict.fromkeys(type(model).model_fields), **payload}
    assert payload["adcp_error"] is None and payload["errors"] is None
    return payload


# 1. A null member is an absent member.


def test_json_payload_with_null_adcp_error_and_errors_takes_the_advisory() -> None:
    payload = response_with_nulls()
    body = json.dumps(payload).encode()
    out = json.loads(inject_json(body, [ADVISORY]))
    assert out["errors"] == [ADVISORY] and out["adcp_error"] is None
    assert out["formats"] == payload["formats"]


def test_mcp_result_with_null_members_takes_the_advisory() -> None:
    payload = response_with_nulls()
    result = {
        "content": [{"type": "text", "text": json.dumps(payload)}],
        "structuredContent": payload,
        "isError": None,
        "_meta": None,
    }
    inject_tool_result(result, [ADVISORY])
    assert result["structuredContent"]["errors"] == [ADVISORY]
    assert json.loads(result["content"][0]["text"])["errors"] == [ADVISORY]


@pytest.mark.parametrize("protocol", ["mcp", "a2a"])
def test_jsonrpc_answer_with_null_error_takes_the_advisory(protocol: str) -> None:
    payload = response_with_nulls()
    if protocol == "mcp":
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "list_creative_formats", "arguments": {}}}  # fmt: skip
        result: dict[str, Any] = {"structuredContent": payload, "content": [], "isError": False}
    else:
        request = {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                   "params": {"message": {"parts": [{"kind": "data", "data": {
                       "skill": "list_creative_formats"}}]}}}  # fmt: skip
        result = {"kind": "task", "id": "t", "status": {"state": "completed", "message": None},
                  "artifacts": [{"parts": [{"kind": "data", "data": payload}]}]}  # fmt: skip
    calls = parse_calls(json.dumps(request).encode())
    answer = {"jsonrpc": "2.0", "id": 1, "result": result, "error": None}
    out = json.loads(inject_body(json.dumps(answer).encode(), calls, [ADVISORY]))
    assert payload_of(out["result"])["errors"] == [ADVISORY]  # the buyer reads it back


def test_buyer_reads_a_payload_with_null_adcp_error() -> None:
    payload = response_with_nulls()
    assert payload_of(payload) is not None
    assert payload_of({**payload, "adcp_error": {"code": "X", "message": "x"}}) is None


async def test_a_real_failure_is_still_left_alone_and_said_loudly(caplog: Any) -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from adcp_stale_cache import StaleAdvisoryMiddleware

    surfaces = Surfaces.of(FORMATS.model_copy(update={"paths": ("/formats",)}))
    cache = UpstreamCache(surfaces=surfaces)
    down = False

    async def upstream_call() -> dict[str, Any]:
        if down:
            raise ConnectionRefusedError
        return {"formats": ["f1"]}

    async def handler(request: Any) -> JSONResponse:
        formats = await cache.fetch(AGENT, "k", upstream_call)
        payload = {**response_with_nulls(), "formats": formats["formats"]}
        if request.query_params.get("fail"):
            payload["adcp_error"] = {"code": "INTERNAL_ERROR", "message": "failed"}
        return JSONResponse(payload)

    app = StaleAdvisoryMiddleware(Starlette(routes=[Route("/formats", handler, methods=["POST"])]),
                                  surfaces=surfaces)  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as c:
        await c.post("/formats")
        down = True
        stale = (await c.post("/formats")).json()
        with caplog.at_level(logging.INFO, logger="adcp_stale_cache.middleware"):
            failed = (await c.post("/formats?fail=1")).json()
    assert [e["code"] for e in stale["errors"]] == ["STALE_RESPONSE"]
    assert failed["errors"] is None  # a failed task is never mixed with an advisory
    [record] = [r for r in caplog.records if "advisory_lost" in r.getMessage()]
    assert record.levelno == logging.WARNING


# 2. The adcp package's models through PydanticCodec, with real data.


def test_every_reference_format_round_trips() -> None:
    formats = [Format.model_validate(item) for item in reference_formats()]
    codec: PydanticCodec[list[Format]] = PydanticCodec(list[Format])
    back = codec.loads(codec.dumps(formats))
    assert back == formats and len(back) == 50
    assert [f.model_dump(mode="json", exclude_unset=True) for f in back] == [
        f.model_dump(mode="json", exclude_unset=True) for f in formats
    ]
    # The RootModel members (frame rates, sample rates) come back as numbers, not {"root":}.
    rates = [f for f in back if "frame_rates" in f.model_dump_json()]
    assert rates and '"root"' not in rates[0].model_dump_json()


def test_the_response_model_round_trips_or_is_never_stored_broken() -> None:
    """``adcp`` 6.6's ``ListCreativeFormatsResponse`` refuses, on validation, reference formats
    its own ``Format`` accepts (pixel tracker assets): a response holding them cannot be read
    back as that type, so it is served and not cached, never stored broken."""
    codec: PydanticCodec[Any] = PydanticCodec(ListCreativeFormatsResponse)
    readable, unreadable = [], []
    for item in reference_formats():
        try:
            ListCreativeFormatsResponse.model_validate({"formats": [item]})
            readable.append(item)
        except ValueError:
            unreadable.append(item)
    assert readable or unreadable
    if readable:
        response = ListCreativeFormatsResponse.model_validate(
            {"formats": readable, "errors": [ADVISORY]}
        )
        back = codec.loads(codec.dumps(response))
        assert back == response
        assert back.model_dump(mode="json", exclude_none=True) == response.model_dump(
            mode="json", exclude_none=True
        )
    if unreadable:
        held = ListCreativeFormatsResponse(formats=[Format.model_validate(unreadable[0])])
        assert encode(codec, held, AGENT) is None


async def test_a_healthy_agent_answers_whatever_the_codec_reads_back() -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    formats = [Format.model_validate(item) for item in reference_formats()]

    async def healthy() -> Any:
        return ListCreativeFormatsResponse(formats=formats)

    codec: PydanticCodec[Any] = PydanticCodec(ListCreativeFormatsResponse)
    answer = await cache.fetch(AGENT, "all", healthy, surface=FORMATS, codec=codec)
    assert len(answer.formats) == 50  # never 0 formats and a traceback


@pytest.mark.skipif(not LEGACY, reason="adcp 9.x ships the v2 Product fixtures")
def test_reference_products_round_trip() -> None:
    from adcp.canonical_formats.fixtures import REFERENCE_PRODUCT_NAMES, load_reference_product
    from adcp.types import Product

    products = []
    for name in REFERENCE_PRODUCT_NAMES:
        try:  # some name v1 formats, which 9.x refuses outside its Legacy* models
            products.append(Product.model_validate(load_reference_product(name)))
        except ValueError:
            continue
    assert len(products) >= 5
    codec: PydanticCodec[list[Product]] = PydanticCodec(list[Product])
    assert codec.loads(codec.dumps(products)) == products


hypothesis = pytest.importorskip("hypothesis", reason="hypothesis (dev extra) is needed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def formats_varied(draw: Any) -> list[Any]:
    """Reference formats with optional members dropped, values changed and extras added:
    instances of the model no fixture spells out."""
    catalogue = reference_formats()
    chosen = draw(st.lists(st.sampled_from(range(len(catalogue))), min_size=1, max_size=3))
    out = []
    for index in chosen:
        item = catalogue[index]
        for key in draw(st.lists(st.sampled_from(sorted(item)), max_size=3)):
            if key not in ("format_id", "name"):
                item.pop(key, None)
        item["name"] = draw(st.text(min_size=1, max_size=20))
        if draw(st.booleans()):
            item["vendor_extension"] = draw(
                st.dictionaries(
                    st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3
                )
            )
        try:
            out.append(Format.model_validate(item))
        except ValueError:
            continue
    hypothesis.assume(out)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formats_varied())
def test_varied_formats_round_trip(formats: list[Any]) -> None:
    codec: PydanticCodec[list[Format]] = PydanticCodec(list[Format])
    back = codec.loads(codec.dumps(formats))
    assert back == formats
    for copy, original in zip(back, formats, strict=True):
        assert copy.model_fields_set == original.model_fields_set


class Lossy(JsonCodec[Any]):
    """A codec that writes what it cannot read back."""

    def loads(self, data: bytes) -> Any:
        raise ValueError("cannot read this back")


async def test_a_codec_that_cannot_round_trip_serves_the_answer_uncached(caplog: Any) -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    calls = 0

    async def healthy() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"formats": ["f1"]}

    codec = Lossy()
    with caplog.at_level(logging.WARNING):
        first = await cache.fetch(AGENT, "k", healthy, surface=FORMATS, codec=codec)
        second = await cache.fetch(AGENT, "k", healthy, surface=FORMATS, codec=codec)
    assert first == second == {"formats": ["f1"]}  # the live answer, whatever the codec does
    assert calls == 2  # not cached
    assert await cache.store.get(cache.store_key(AGENT, "k")) is None
    warned = [r for r in caplog.records if "not_cacheable" in r.getMessage()]
    assert len(warned) == 1 and "round-trip" in warned[0].getMessage()  # one WARNING


# 3. A call abandoned at its deadline never holds the request's asyncio.run.


def _ignores_cancellation(released: threading.Event) -> Any:
    async def frozen() -> dict[str, Any]:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not released.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue  # as the mcp 1.x client's cleanup against a frozen agent does
        return {"formats": ["late"]}

    return frozen


@pytest.mark.parametrize("detach", [True, False])
def test_a_loop_per_call_is_released_at_the_deadline(detach: bool) -> None:
    policy = FORMATS.model_copy(update={"upstream_timeout_seconds": 0.5})
    cache = UpstreamCache(surfaces=Surfaces.of(policy), detach_calls=detach)
    released = threading.Event()

    async def healthy() -> dict[str, Any]:
        return {"formats": ["f1"]}

    async def request(call: Any) -> tuple[Any, list[str]]:
        async with collect_advisories() as advisories:
            value = await cache.fetch(AGENT, "k", call, surface=policy)
        return value, [e["code"] for e in advisories.errors()]

    def in_a_worker(call: Any) -> tuple[Any, float]:
        took: list[Any] = []

        def run() -> None:
            started = time.monotonic()
            took.append(asyncio.run(request(call)))
            took.append(time.monotonic() - started)

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(10)
        return took[0], took[1]

    in_a_worker(healthy)
    try:
        (value, codes), took = in_a_worker(_ignores_cancellation(released))
    finally:
        released.set()
    assert value == {"formats": ["f1"]} and codes == ["STALE_RESPONSE"]
    if detach:
        assert took < 0.5 + 0.5  # the worker is free at the deadline
    else:
        assert took > 1.5  # held by asyncio.run's wait for the abandoned call


async def test_a_detached_call_sees_the_request_context() -> None:
    import contextvars

    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS), detach_calls=True)
    seen = []

    async def call() -> dict[str, Any]:
        seen.append((tenant.get(), threading.current_thread().name))
        return {"formats": []}

    tenant.set("tenant-a")
    await cache.fetch(AGENT, "k", call, surface=FORMATS)
    assert seen == [("tenant-a", "adcp-stale-cache-calls")]


# 4. failure_types: a meaning where the chain says nothing more specific.


class AdCPServiceUnavailableError(Exception):
    """The reference seller's own."""


class AdCPAdapterError(Exception):
    """Raised by the reference seller for outages and permanent errors alike."""


def test_a_mapped_type_keeps_the_code_its_cause_gives() -> None:
    types = {AdCPServiceUnavailableError: "SERVICE_UNAVAILABLE"}
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as exc:
            raise AdCPServiceUnavailableError("agent down") from exc
    except AdCPServiceUnavailableError as wrapped:
        assert classify(wrapped, None, types).code == "CONNECTION_REFUSED"
    bare = classify(AdCPServiceUnavailableError("down"), None, types)
    assert (bare.code, bare.kind) == ("SERVICE_UNAVAILABLE", FailureKind.UPSTREAM_ERROR)


def test_a_mapping_can_be_a_function_of_the_exception() -> None:
    def meaning(exc: BaseException) -> str | None:
        return "SERVICE_UNAVAILABLE" if "unreachable" in str(exc) else None

    types = {AdCPAdapterError: meaning}
    outage = classify(AdCPAdapterError("signals agent unreachable"), None, types)
    assert outage.code == "SERVICE_UNAVAILABLE"
    permanent = classify(AdCPAdapterError("invalid targeting"), None, types)
    assert permanent.kind is FailureKind.UNEXPECTED  # not an outage: surfaces, never stale


async def test_a_lone_function_reads_every_exception() -> None:
    cache = UpstreamCache(
        surfaces=Surfaces.of(FORMATS),
        failure_types=lambda exc: "SERVICE_UNAVAILABLE" if "down" in str(exc) else None,
    )
    down = False

    async def call() -> dict[str, Any]:
        if down:
            raise AdCPAdapterError("agent down")
        return {"formats": ["f1"]}

    await cache.fetch(AGENT, "k", call, surface=FORMATS)
    down = True
    async with collect_advisories() as advisories:
        assert await cache.fetch(AGENT, "k", call, surface=FORMATS) == {"formats": ["f1"]}
    [advisory] = advisories.errors()
    assert advisory["details"]["original_error"]["code"] == "SERVICE_UNAVAILABLE"


# 6. Credentials join the key, and are never shown.


async def test_tenants_credentials_never_share_an_entry_on_a_shared_surface() -> None:
    shared = FORMATS.model_copy(update={"shared_across_callers": True,
                                        "freshness_target_seconds": 60})  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(shared))
    tenant_a = Upstream(name="private-agent", url="https://agent.example/mcp", credentials="tok-a")
    tenant_b = Upstream(name="private-agent", url="https://agent.example/mcp", credentials="tok-b")
    public = Upstream(name="private-agent", url="https://agent.example/mcp")

    def answer(who: str) -> Any:
        async def call() -> dict[str, Any]:
            return {"formats": [who]}

        return call

    assert await cache.fetch(tenant_a, "k", answer("a"), surface=shared) == {"formats": ["a"]}
    assert await cache.fetch(tenant_b, "k", answer("b"), surface=shared) == {"formats": ["b"]}
    assert await cache.fetch(public, "k", answer("p"), surface=shared) == {"formats": ["p"]}
    assert await cache.fetch(tenant_a, "k", answer("x"), surface=shared) == {"formats": ["a"]}
    assert len({cache.store_key(u, "k") for u in (tenant_a, tenant_b, public)}) == 3
    for shown in (
        repr(tenant_a),
        str(tenant_a),
        tenant_a.model_dump_json(),
        cache.store_key(tenant_a, "k"),
    ):
        assert "tok-a" not in shown


# 7. collect_advisories is a with and an async with.


async def test_collect_advisories_async_with() -> None:
    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    down = False

    async def call() -> dict[str, Any]:
        if down:
            raise ConnectionRefusedError
        return {"formats": ["f1"]}

    await cache.fetch(AGENT, "k", call, surface=FORMATS)
    down = True
    async with collect_advisories() as advisories:
        await cache.fetch(AGENT, "k", call, surface=FORMATS)
    with collect_advisories() as plain:
        await cache.fetch(AGENT, "k", call, surface=FORMATS)
    assert len(advisories) == 1 and len(plain) == 1


# Found by attacking the above (issue 21's hostile review).


def test_a_call_raising_system_exit_leaves_the_call_loop_running() -> None:
    policy = FORMATS.model_copy(update={"upstream_timeout_seconds": 2})
    cache = UpstreamCache(surfaces=Surfaces.of(policy), detach_calls=True)

    async def exits() -> dict[str, Any]:
        raise SystemExit(3)

    async def healthy() -> dict[str, Any]:
        return {"formats": ["f1"]}

    with pytest.raises(SystemExit):  # reaches its caller, as without detach_calls
        asyncio.run(cache.fetch(AGENT, "a", exits, surface=policy))
    started = time.monotonic()
    assert asyncio.run(cache.fetch(AGENT, "b", healthy, surface=policy)) == {"formats": ["f1"]}
    assert time.monotonic() - started < 1  # the loop still answers: no deadline waited out


def test_detached_caches_share_one_loop_thread() -> None:
    caches = [UpstreamCache(detach_calls=True) for _ in range(20)]

    async def call() -> dict[str, Any]:
        return {"thread": threading.current_thread().ident}

    threads = {asyncio.run(c.fetch(AGENT, "k", call))["thread"] for c in caches}
    assert len(threads) == 1


async def test_a_value_json_would_change_is_served_and_not_cached() -> None:
    from pydantic import BaseModel

    class Keyed(BaseModel):
        counts: dict[int | str, str]

    cache = UpstreamCache(surfaces=Surfaces.of(FORMATS))
    codec: PydanticCodec[Keyed] = PydanticCodec(Keyed)

    async def call() -> Keyed:
        return Keyed(counts={7: "seven", "x": "ex"})

    value = await cache.fetch(AGENT, "k", call, surface=FORMATS, codec=codec)
    assert value.counts == {7: "seven", "x": "ex"}  # never {"7": ...}
    assert await cache.store.get(cache.store_key(AGENT, "k")) is None


async def test_cached_keys_by_upstream_credentials() -> None:
    shared = FORMATS.model_copy(update={"shared_across_callers": True,
                                        "freshness_target_seconds": 60})  # fmt: skip
    cache = UpstreamCache(surfaces=Surfaces.of(shared))
    anyone = Upstream(name="registry")

    @cache.cached(anyone, surface=shared)
    async def formats_for(agent: Upstream) -> dict[str, Any]:
        assert agent.credentials is not None
        return {"for": agent.credentials.get_secret_value()}

    a = Upstream(name="agent", url="https://agent.example/mcp", credentials="tenant-a")
    b = Upstream(name="agent", url="https://agent.example/mcp", credentials="tenant-b")
    assert await formats_for(a) == {"for": "tenant-a"}
    assert await formats_for(b) == {"for": "tenant-b"}


def test_a_meaning_that_raises_says_nothing(caplog: Any) -> None:
    def broken(exc: BaseException) -> str | None:
        raise KeyError("bug in the adopter's classifier")

    failure = classify(ConnectionRefusedError(), None, {ConnectionRefusedError: broken})
    assert failure.code == "CONNECTION_REFUSED"
    assert "failure_types_error" in caplog.text


def test_a_mapped_exception_is_not_read_by_the_heuristics() -> None:
    from adcp_stale_cache import Failure

    class QuotaTimeout(Exception):
        """A name ending in Timeout, meaning a permanent refusal here."""

    refused = Failure(FailureKind.UPSTREAM_ERROR, "INVALID_REQUEST", "Upstream refused it")
    assert classify(QuotaTimeout("connection refused"), None, {QuotaTimeout: refused}) == refused


def test_an_a2a_part_with_null_kind_takes_the_advisory() -> None:
    from adcp_stale_cache.codecs.a2a import inject_result

    task = {"kind": "task", "status": {"state": "completed"},
            "artifacts": [{"parts": [{"kind": None, "data": {"formats": []}}]}]}  # fmt: skip
    inject_result(task, [ADVISORY])
    assert task["artifacts"][0]["parts"][0]["data"]["errors"] == [ADVISORY]


async def test_collect_advisories_decorates_functions() -> None:
    from adcp_stale_cache import current_collector

    seen: list[Any] = []

    @collect_advisories()
    async def handler() -> None:
        seen.append(current_collector())

    @collect_advisories()
    def sync_handler() -> None:
        seen.append(current_collector())

    await handler()
    await handler()
    sync_handler()
    assert all(c is not None for c in seen) and len({id(c) for c in seen}) == 3
    assert current_collector() is None


async def test_collect_advisories_decorates_an_async_function_behind_a_plain_decorator() -> None:
    """A seller's own ``functools.wraps`` decorator around an async handler: the collector
    is open while the handler runs, not closed when its coroutine is returned (review 31)."""
    import functools

    from adcp_stale_cache import current_collector

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    seen: list[Any] = []

    @collect_advisories()
    @logged
    async def handler() -> None:
        seen.append(current_collector())

    await handler()
    assert seen != [None] and len(seen) == 1


def test_bad_credentials_never_reach_an_error_message() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as raised:
        Upstream(name="a", credentials={"token": "s3cret-value"})  # type: ignore[arg-type]
    assert "s3cret-value" not in str(raised.value)
