"""UpstreamCache.fetch: fresh hits, refreshes, stale serves, failures, single-flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adcp_stale_cache import (
    InvalidPayload,
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamError,
    UpstreamUnavailable,
    collect_advisories,
    service_unavailable,
)

from ..conftest import FakeClock

FORMATS = SurfacePolicy(
    name="list_creative_formats",
    field="formats",
    freshness_target_seconds=10,
    max_stale_seconds=100,
    upstream_timeout_seconds=0.2,
)
AGENT = Upstream(name="creative-agent-a", url="https://creative.example.com/mcp")


class Upstreamish:
    """An upstream call whose behaviour the test sets, counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail: BaseException | None = None
        self.value: Any = {"formats": [{"format_id": {"id": "f1"}}]}
        self.delay = 0.0

    async def __call__(self) -> Any:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return self.value


def cache_with(clock: FakeClock, **options: Any) -> UpstreamCache:
    return UpstreamCache(
        MemoryStore(clock=clock), surfaces=Surfaces.of(FORMATS), clock=clock, **options
    )


@pytest.fixture
def cache(clock: FakeClock) -> UpstreamCache:
    return cache_with(clock)


async def fetch(cache: UpstreamCache, up: Upstreamish, key: str = "k") -> Any:
    """The entry ``key`` of ``AGENT``, loaded by ``up`` when it must be."""
    return await cache.fetch(AGENT, key, up, surface="list_creative_formats")


async def warmed(cache: UpstreamCache, clock: FakeClock, age: float) -> Upstreamish:
    """An upstream whose entry ``k`` the cache holds, ``age`` seconds old."""
    up = Upstreamish()
    await fetch(cache, up)
    clock.advance(age)
    return up


async def test_fresh_hit_skips_upstream_and_records_nothing(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    up = await warmed(cache, clock, 9.9)
    with collect_advisories() as advisories:
        value = await fetch(cache, up)
    assert value == up.value
    assert up.calls == 1
    assert not advisories


async def test_successful_refresh_records_nothing(cache: UpstreamCache, clock: FakeClock) -> None:
    up = await warmed(cache, clock, 10)
    up.value = {"formats": []}
    with collect_advisories() as advisories:
        value = await fetch(cache, up)
    assert value == {"formats": []}
    assert up.calls == 2
    assert not advisories


async def test_failed_refresh_serves_stale_with_one_advisory(
    cache: UpstreamCache, clock: FakeClock, assert_valid_advisory: Any
) -> None:
    up = await warmed(cache, clock, 42.6)
    up.fail = ConnectionRefusedError(111, "Connection refused to 10.0.0.5:8080")
    with collect_advisories() as advisories:
        value = await fetch(cache, up)
    assert value == up.value
    [error] = advisories.errors()
    assert_valid_advisory(error)
    assert error["field"] == "formats"
    assert error["recovery"] == "transient"
    assert error["details"] == {
        "served_from_cache": True,
        "cache_age_seconds": 42,
        "freshness_target_seconds": 10,
        "upstream": {"name": "creative-agent-a", "url": "https://creative.example.com/mcp"},
        "original_error": {
            "code": "CONNECTION_REFUSED",
            "message": "Upstream refused the connection",
        },
    }
    assert "10.0.0.5" not in str(error)


async def test_timeout_serves_stale_with_timeout_code(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    up = await warmed(cache, clock, 11)
    up.delay = 5
    with collect_advisories() as advisories:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await fetch(cache, up)
        elapsed = loop.time() - started
    [error] = advisories.errors()
    assert error["details"]["original_error"] == {
        "code": "TIMEOUT",
        "message": "Upstream did not answer within 0.2s",
    }
    assert elapsed < 1.0


async def test_no_entry_failure_stays_a_failure(cache: UpstreamCache) -> None:
    up = Upstreamish()
    up.fail = UpstreamError("SERVICE_UNAVAILABLE", "db at internal-db-3 down")
    with collect_advisories() as advisories, pytest.raises(UpstreamUnavailable) as raised:
        await fetch(cache, up)
    assert not advisories
    assert raised.value.failure.code == "SERVICE_UNAVAILABLE"
    fatal = service_unavailable(raised.value, field="formats").to_dict()
    assert fatal["code"] == "SERVICE_UNAVAILABLE"
    assert fatal["recovery"] == "transient"
    assert fatal["details"]["upstream"]["name"] == "creative-agent-a"
    assert "internal-db-3" not in str(fatal)


async def test_never_serves_past_max_stale(cache: UpstreamCache, clock: FakeClock) -> None:
    up = await warmed(cache, clock, 110.5)  # target 10 + max-stale 100, and a little more
    up.fail = TimeoutError()
    with collect_advisories() as advisories, pytest.raises(UpstreamUnavailable):
        await fetch(cache, up)
    assert not advisories


async def test_exactly_at_max_stale_still_serves(cache: UpstreamCache, clock: FakeClock) -> None:
    up = await warmed(cache, clock, 110)
    up.fail = TimeoutError()
    with collect_advisories() as advisories:
        await fetch(cache, up)
    assert advisories.errors()[0]["details"]["cache_age_seconds"] == 110


async def test_several_stale_keys_of_one_upstream_give_one_advisory_with_oldest_age(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    up = Upstreamish()
    await fetch(cache, up, "old")
    clock.advance(5)
    await fetch(cache, up, "young")
    clock.advance(20)
    up.fail = TimeoutError()
    other = Upstream(name="creative-agent-b")
    with collect_advisories() as advisories:
        await fetch(cache, up, "young")
        await fetch(cache, up, "old")
        with pytest.raises(UpstreamUnavailable):
            await cache.fetch(other, "old", up, surface="list_creative_formats")
    [error] = advisories.errors()
    assert error["details"]["cache_age_seconds"] == 25


async def test_one_advisory_per_upstream(cache: UpstreamCache, clock: FakeClock) -> None:
    a, b = Upstreamish(), Upstreamish()
    agent_b = Upstream(name="creative-agent-b")
    await cache.fetch(AGENT, "k", a, surface="list_creative_formats")
    await cache.fetch(agent_b, "k", b, surface="list_creative_formats")
    clock.advance(30)
    a.fail = TimeoutError()
    b.fail = ConnectionResetError()
    with collect_advisories() as advisories:
        await asyncio.gather(
            cache.fetch(AGENT, "k", a, surface="list_creative_formats"),
            cache.fetch(agent_b, "k", b, surface="list_creative_formats"),
        )
    errors = advisories.errors()
    assert [e["details"]["upstream"]["name"] for e in errors] == [
        "creative-agent-a",
        "creative-agent-b",
    ]
    assert "url" not in errors[1]["details"]["upstream"]  # internal upstream: no url
    assert errors[1]["details"]["original_error"]["code"] == "CONNECTION_RESET"


async def test_unexpected_exception_is_not_an_outage_by_default(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    up = await warmed(cache, clock, 30)
    up.fail = KeyError("bug in seller code")
    with pytest.raises(KeyError):
        await fetch(cache, up)


async def test_invalid_payload_is_never_cached_and_serves_stale(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    def validate(value: Any) -> None:
        if not isinstance(value, dict) or "formats" not in value:
            raise InvalidPayload("no formats")

    up = Upstreamish()
    await cache.fetch(AGENT, "k", up, surface="list_creative_formats", validate=validate)
    clock.advance(30)
    up.value = {"garbage": True}
    with collect_advisories() as advisories:
        value = await cache.fetch(
            AGENT, "k", up, surface="list_creative_formats", validate=validate
        )
    assert value == {"formats": [{"format_id": {"id": "f1"}}]}
    assert advisories.errors()[0]["details"]["original_error"]["code"] == "INVALID_PAYLOAD"
    # The good entry is still there, with its old age: the failed refresh wrote nothing.
    with collect_advisories() as again:
        await cache.fetch(AGENT, "k", up, surface="list_creative_formats", validate=validate)
    assert again.errors()[0]["details"]["cache_age_seconds"] == 30


async def test_callers_get_independent_copies(cache: UpstreamCache) -> None:
    up = Upstreamish()
    first = await fetch(cache, up)
    first["formats"].clear()
    assert (await fetch(cache, up))["formats"]


async def test_single_flight_coalesces_concurrent_refreshes(cache: UpstreamCache) -> None:
    up = Upstreamish()
    up.delay = 0.05
    results = await asyncio.gather(*(fetch(cache, up) for _ in range(100)))
    assert up.calls == 1
    assert all(r == up.value for r in results)


async def test_cancelled_caller_never_fails_the_others(cache: UpstreamCache) -> None:
    up = Upstreamish()
    up.delay = 0.1
    first = asyncio.create_task(fetch(cache, up))
    others = [asyncio.create_task(fetch(cache, up)) for _ in range(5)]
    await asyncio.sleep(0.02)
    first.cancel()
    results = await asyncio.gather(*others)
    assert first.cancelled()
    assert up.calls == 1
    assert all(r == up.value for r in results)


async def test_client_side_cancellation_is_a_connection_error_not_a_caller_cancel(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    up = await warmed(cache, clock, 30)
    up.fail = asyncio.CancelledError()  # what a dead MCP session does to its pending calls
    with collect_advisories() as advisories:
        await fetch(cache, up)
    assert advisories.errors()[0]["details"]["original_error"]["code"] == "CONNECTION_ERROR"


async def test_surface_from_current_request_and_default(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(FORMATS), clock=clock)
    up = Upstreamish()
    with collect_advisories(FORMATS):
        await cache.fetch(AGENT, "k", up)
    clock.advance(30)
    up.fail = TimeoutError()
    with collect_advisories(FORMATS) as advisories:
        await cache.fetch(AGENT, "k", up)
    assert advisories.errors()[0]["field"] == "formats"
    with pytest.raises(KeyError, match="unknown surface 'nope'"):
        await cache.fetch(AGENT, "k", up, surface="nope")


async def test_decorator(cache: UpstreamCache, clock: FakeClock) -> None:
    calls = []

    @cache.cached(AGENT, surface="list_creative_formats")
    async def list_formats(kind: str) -> dict[str, Any]:
        calls.append(kind)
        if len(calls) > 2:
            raise TimeoutError
        return {"formats": [kind]}

    assert await list_formats("video") == {"formats": ["video"]}
    assert await list_formats("video") == {"formats": ["video"]}
    assert await list_formats("audio") == {"formats": ["audio"]}
    assert calls == ["video", "audio"]
    clock.advance(11)
    with collect_advisories() as advisories:
        assert await list_formats("video") == {"formats": ["video"]}
    assert len(advisories) == 1


async def test_broken_store_degrades_to_no_cache(clock: FakeClock) -> None:
    class BrokenStore:
        async def get(self, key: str) -> None:
            raise ConnectionError("store down")

        async def set(self, key: str, entry: object, ttl_seconds: float) -> None:
            raise ConnectionError("store down")

        async def delete(self, key: str) -> None:
            raise ConnectionError("store down")

    cache = UpstreamCache(BrokenStore(), surfaces=Surfaces.of(FORMATS), clock=clock)
    up = Upstreamish()
    assert await fetch(cache, up) == up.value


async def test_stale_serves_log_and_count_once_per_upstream_per_request(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from adcp_stale_cache.ops.metrics import CacheMetrics

    class Counting(CacheMetrics):
        def __init__(self) -> None:
            self.serves: list[bool] = []

        def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
            self.serves.append(advisory)

    counting = Counting()
    cache = cache_with(clock, metrics=counting)
    up = Upstreamish()
    for key in ("a", "b", "c"):
        await cache.fetch(AGENT, key, up, surface="list_creative_formats")
    clock.advance(20)
    up.fail = TimeoutError()
    with caplog.at_level("DEBUG", logger="adcp_stale_cache"), collect_advisories():
        for key in ("a", "b", "c"):
            await cache.fetch(AGENT, key, up, surface="list_creative_formats")
    warnings = [
        r for r in caplog.records if r.levelname == "WARNING" and "stale_serve" in r.message
    ]
    assert len(warnings) == 1
    assert "upstream=creative-agent-a" in warnings[0].message
    assert "example.com" not in warnings[0].message  # the URL stays out of logs
    assert counting.serves == [True, False, False]  # three serves, one advisory


async def test_a_stale_serve_no_collector_carries_is_an_advisory_lost(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Served stale outside any request collector (a server started without the middleware):
    its own WARNING and counter, apart from the stale serves whose advisory was delivered."""
    from prometheus_client import CollectorRegistry

    from adcp_stale_cache.ops.metrics import PrometheusMetrics

    registry = CollectorRegistry()
    cache = cache_with(clock, metrics=PrometheusMetrics(registry))
    up = await warmed(cache, clock, 20)
    up.fail = ConnectionRefusedError("creative.example.com:443 refused, token=secret")
    with caplog.at_level("DEBUG", logger="adcp_stale_cache"):
        await fetch(cache, up)  # no collector: lost
        with collect_advisories() as collector:
            await fetch(cache, up)  # delivered
    assert len(collector) == 1
    [lost] = [r for r in caplog.records if r.message.startswith("advisory_lost")]
    assert lost.levelname == "WARNING"
    assert "upstream=creative-agent-a surface=list_creative_formats" in lost.message
    assert "code=CONNECTION_REFUSED" in lost.message
    assert "example.com" not in lost.message and "secret" not in lost.message
    labels = {"surface": "list_creative_formats", "upstream": "creative-agent-a"}
    assert registry.get_sample_value("adcp_stale_cache_advisories_lost_total", labels) == 1
    assert registry.get_sample_value("adcp_stale_cache_advisories_total", labels) == 1
    stale = {**labels, "code": "CONNECTION_REFUSED"}
    assert registry.get_sample_value("adcp_stale_cache_stale_serves_total", stale) == 2


async def test_a_value_built_on_stale_data_for_no_collector_is_an_advisory_lost(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The stale serve happened in a nested fetch (the flight's own collector carried it), but
    the caller has no collector to hand the advisory on to: lost all the same."""
    from adcp_stale_cache.ops.metrics import CacheMetrics

    class Lost(CacheMetrics):
        def __init__(self) -> None:
            self.lost: list[tuple[str, str]] = []

        def advisory_lost(self, surface: str, upstream: str) -> None:
            self.lost.append((surface, upstream))

    metrics = Lost()
    cache = cache_with(clock, metrics=metrics)
    inner = Upstreamish()
    catalogue = Upstream(name="catalogue")

    async def outer() -> Any:
        return {"page": await cache.fetch(AGENT, "k", inner, surface="list_creative_formats")}

    await fetch(cache, inner)
    clock.advance(20)
    inner.fail = TimeoutError()
    with caplog.at_level("WARNING", logger="adcp_stale_cache"):
        value = await cache.fetch(catalogue, "page", outer, surface="list_creative_formats")
    assert value == {"page": inner.value}
    assert metrics.lost == [("list_creative_formats", "creative-agent-a")]
    [lost] = [r.message for r in caplog.records if r.message.startswith("advisory_lost")]
    assert "upstream=creative-agent-a" in lost and "code=TIMEOUT" in lost


async def test_shared_codec_decodes_once_and_shares_the_value(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    from adcp_stale_cache import SharedJsonCodec

    codec: SharedJsonCodec[Any] = SharedJsonCodec(max_values=2)
    up = Upstreamish()
    first = await cache.fetch(AGENT, "k", up, surface="list_creative_formats", codec=codec)
    second = await cache.fetch(AGENT, "k", up, surface="list_creative_formats", codec=codec)
    assert first == up.value and first is not up.value  # never the caller's own object
    assert second is first  # a hit is a lookup, no decode
    clock.advance(10)
    up.value = {"formats": []}
    refreshed = await cache.fetch(AGENT, "k", up, surface="list_creative_formats", codec=codec)
    assert refreshed == {"formats": []}
    for key in ("a", "b", "c"):
        up.value = {"formats": [key]}
        await cache.fetch(AGENT, key, up, surface="list_creative_formats", codec=codec)
    assert len(codec._values) == 2  # bounded
    with pytest.raises(ValueError):
        SharedJsonCodec(max_values=0)
