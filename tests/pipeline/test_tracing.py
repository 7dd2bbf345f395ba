"""OpenTelemetry span events: what a trace of a stale serve shows, and what it never shows."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.ops.metrics import CacheMetrics, CombinedMetrics
from adcp_stale_cache.pipeline.tracing import SpanEvents, with_tracing

from ..conftest import FakeClock

POLICY = SurfacePolicy(name="get_products", freshness_target_seconds=10, max_stale_seconds=100)
AGENT = Upstream(name="inventory", url="https://user:secret@inventory.internal:8443/api")


@pytest.fixture
def spans() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def events(exporter: InMemorySpanExporter) -> list[tuple[str, dict[str, Any]]]:
    [span] = exporter.get_finished_spans()
    return [(e.name, dict(e.attributes or {})) for e in span.events]


async def test_stale_serve_is_an_event_and_marks_the_span(
    spans: tuple[Any, InMemorySpanExporter], clock: FakeClock
) -> None:
    tracer, exporter = spans
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    calls = {"n": 0}

    async def call() -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionRefusedError("connect to inventory.internal:8443 refused")
        return {"products": []}

    with tracer.start_as_current_span("get_products"):
        await cache.fetch(AGENT, "k", call, surface="get_products")  # miss, refresh ok
        await cache.fetch(AGENT, "k", call, surface="get_products")  # hit
        clock.advance(20)
        await cache.fetch(AGENT, "k", call, surface="get_products")  # refresh fails, stale
    names = [name for name, _ in events(exporter)]
    assert names == [
        "adcp_stale_cache.miss",
        "adcp_stale_cache.refresh",
        "adcp_stale_cache.hit",
        "adcp_stale_cache.refresh",
        "adcp_stale_cache.upstream_failure",
        "adcp_stale_cache.advisory_lost",  # no request collector in this test
        "adcp_stale_cache.stale_serve",
    ]
    lost = dict(events(exporter))["adcp_stale_cache.advisory_lost"]
    assert lost == {
        "adcp_stale_cache.surface": "get_products",
        "adcp_stale_cache.upstream": "inventory",
    }
    stale = dict(events(exporter))["adcp_stale_cache.stale_serve"]
    assert stale == {
        "adcp_stale_cache.surface": "get_products",
        "adcp_stale_cache.upstream": "inventory",
        "adcp_stale_cache.code": "CONNECTION_REFUSED",
        "adcp_stale_cache.advisory": False,  # no request collector in this test
    }
    [span] = exporter.get_finished_spans()
    assert span.attributes == {"adcp_stale_cache.stale": True}
    text = repr([span.attributes, *(e.attributes for e in span.events)])
    assert "inventory.internal" not in text and "secret" not in text


async def test_tracing_false_adds_nothing(
    spans: tuple[Any, InMemorySpanExporter], clock: FakeClock
) -> None:
    tracer, exporter = spans
    cache = UpstreamCache(MemoryStore(clock=clock), clock=clock, tracing=False)

    async def call() -> int:
        return 1

    with tracer.start_as_current_span("request"):
        await cache.fetch(AGENT, "k", call)
    assert events(exporter) == []


def test_tracing_is_on_by_default_when_the_api_is_installed() -> None:
    [given] = UpstreamCache().settings.metrics.sinks  # what the stages report to, no sink added
    assert isinstance(given, SpanEvents)
    mine = CacheMetrics()
    combined = with_tracing(type("Mine", (CacheMetrics,), {})(), None)
    assert isinstance(combined, CombinedMetrics)
    assert with_tracing(mine, False) is mine


async def test_no_recording_span_is_a_no_op(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), clock=clock, tracing=True)

    async def call() -> int:
        return 1

    assert await cache.fetch(AGENT, "k", call) == 1  # no span open: nothing to record into


def test_the_current_context_is_read_as_opentelemetry_reads_it(
    spans: tuple[Any, InMemorySpanExporter],
) -> None:
    """Every hit asks for the current context: with the default runtime context, through its
    variable directly; with any other, through ``get_current`` as before."""
    import types

    from opentelemetry import context
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    from adcp_stale_cache.pipeline.tracing import _current_context_getter

    tracer, _ = spans
    getter = _current_context_getter(context)
    assert getter is not context.get_current  # the default runtime: its variable's get
    assert getter() == context.get_current() and not getter()
    with tracer.start_as_current_span("get_products"):
        assert getter() is context.get_current() and getter()
    other = types.SimpleNamespace(_RUNTIME_CONTEXT=object(), get_current=context.get_current)
    assert _current_context_getter(other) is context.get_current

    class Own(ContextVarsRuntimeContext):  # a runtime reading its context its own way
        def get_current(self) -> Any:
            return super().get_current()

    own = types.SimpleNamespace(_RUNTIME_CONTEXT=Own(), get_current=context.get_current)
    assert _current_context_getter(own) is context.get_current
    assert _current_context_getter(types.SimpleNamespace(get_current=len)) is len
