"""OpenTelemetry span events for cache decisions, when ``opentelemetry-api`` is installed.

Each decision is an event on the current span (the list: docs/operations.md, Tracing); a stale
serve also sets ``adcp_stale_cache.stale``. Attributes hold names and codes only."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from .metrics import CacheMetrics, CombinedMetrics

PREFIX = "adcp_stale_cache"


def available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no ``opentelemetry`` namespace at all
        return False


class SpanEvents(CacheMetrics):
    """Cache events as events (and a ``stale`` attribute) on the current OpenTelemetry span."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self._current_context = _current_context_getter(context)
        self._current_span = trace.get_current_span

    def _event(self, name: str, **attributes: Any) -> Any:
        current = self._current_context()
        if not current:  # an empty context holds no span: the one check of every hit then
            return None
        span = self._current_span(current)
        if not span.is_recording():
            return None
        span.add_event(
            f"{PREFIX}.{name}", {f"{PREFIX}.{key}": value for key, value in attributes.items()}
        )
        return span

    def hit(self, surface: str, upstream: str) -> None:
        if self._current_context():  # (as _event checks: every hit pays this alone)
            self._event("hit", surface=surface, upstream=upstream)

    def miss(self, surface: str, upstream: str) -> None:
        if self._current_context():
            self._event("miss", surface=surface, upstream=upstream)

    def refresh(self, surface: str, upstream: str, seconds: float, ok: bool) -> None:
        if self._current_context():  # (as hit: every refresh pays this alone)
            self._event(
                "refresh",
                surface=surface,
                upstream=upstream,
                outcome="ok" if ok else "failed",
                duration_ms=round(seconds * 1000, 3),
            )

    def upstream_failure(self, upstream: str, code: str) -> None:
        self._event("upstream_failure", upstream=upstream, code=code)

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        span = self._event(
            "stale_serve", surface=surface, upstream=upstream, code=code, advisory=advisory
        )
        if span is not None:
            span.set_attribute(f"{PREFIX}.stale", True)

    def advisory_lost(self, surface: str, upstream: str) -> None:
        self._event("advisory_lost", surface=surface, upstream=upstream)

    def unavailable(self, surface: str, upstream: str, code: str) -> None:
        self._event("unavailable", surface=surface, upstream=upstream, code=code)

    def breaker(self, upstream: str, is_open: bool) -> None:
        if is_open:  # reported after every call: only the open state is news
            self._event("breaker_open", upstream=upstream)


def with_tracing(metrics: CacheMetrics | None, tracing: bool | None) -> CacheMetrics:
    """``metrics`` plus span events when ``tracing`` (None: when the API is installed)."""
    base = metrics or CacheMetrics()
    if tracing is False or (tracing is None and not available()):
        return base
    spans = SpanEvents()
    return spans if type(base) is CacheMetrics else CombinedMetrics(base, spans)


def _current_context_getter(context: Any) -> Callable[[], Any]:
    """``context.get_current``, or with the default runtime context (exactly: a subclass may
    read its context otherwise) its variable's own ``get``: every hit asks it, and the two
    calls between cost a hit 4% of its time."""
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    if type(runtime) is ContextVarsRuntimeContext and type(variable) is ContextVar:
        return variable.get
    get_current: Callable[[], Any] = context.get_current
    return get_current
