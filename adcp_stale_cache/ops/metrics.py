"""Prometheus metrics of the cache's events (names and labels: docs/operations.md, Metrics),
with the ``metrics`` extra; the events themselves are ``pipeline.metrics``'s."""

from __future__ import annotations

import functools
from typing import Any

from ..pipeline.metrics import CacheMetrics, CombinedMetrics
from ..stores import Bounded, FailureCounting, Store
from ..stores.tiered import tiers

__all__ = ["CacheMetrics", "CombinedMetrics", "PrometheusMetrics"]


class PrometheusMetrics(CacheMetrics):
    """Prometheus counters, gauges and a histogram (``pip install 'adcp-stale-cache[metrics]'``).

    The first ``max_codes`` distinct ``code`` labels are kept, later ones count as ``OTHER``."""

    def __init__(
        self, registry: Any = None, store: Store | None = None, max_codes: int = 64
    ) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        self.max_codes = max_codes
        self._codes: set[str] = set()

        registry = registry if registry is not None else REGISTRY

        def counter(name: str, doc: str, *labels: str) -> Any:
            return Counter(f"adcp_stale_cache_{name}", doc, labels, registry=registry)

        self._hits = counter("hits", "Fresh hits, no upstream call.", "surface", "upstream")
        self._misses = counter("misses", "Lookups with no entry.", "surface", "upstream")
        self._refreshes = counter("refreshes", "Upstream calls.", "surface", "upstream", "outcome")
        self._failures = counter("upstream_failures", "Outage failures.", "upstream", "code")
        self._stale = counter(
            "stale_serves", "Answers served stale.", "surface", "upstream", "code"
        )
        self._advisories = counter(
            "advisories", "STALE_RESPONSE advisories delivered.", "surface", "upstream"
        )
        self._lost = counter(
            "advisories_lost", "STALE_RESPONSE advisories no answer carried.", "surface", "upstream"
        )
        self._unavailable = counter(
            "unavailable", "Failures without entry.", "surface", "upstream", "code"
        )
        self._actions = counter("invalidations", "Operator actions on entries.", "action")
        self._taken = counter("invalidated_entries", "Entries operator actions took.", "action")
        self._latency = Histogram(
            "adcp_stale_cache_refresh_seconds",
            "Upstream call latency.",
            ["upstream"],
            registry=registry,
        )
        self._breaker = Gauge(
            "adcp_stale_cache_breaker_open",
            "1 while the breaker is open.",
            ["upstream"],
            registry=registry,
        )
        walked = tiers(store) if store is not None else []
        memory = next((tier for tier in walked if isinstance(tier, Bounded)), None)
        if memory is not None:
            entries = Gauge(
                "adcp_stale_cache_store_entries", "Entries in the memory store.", registry=registry
            )
            size = Gauge(
                "adcp_stale_cache_store_bytes", "Bytes in the memory store.", registry=registry
            )
            entries.set_function(lambda: memory.entries)
            size.set_function(lambda: memory.bytes)
        counted = {type(t).__name__: t for t in walked if isinstance(t, FailureCounting)}
        if counted:
            failures = Gauge(
                "adcp_stale_cache_store_failures",
                "Store operations that failed and were answered as 'no entry' (file, Redis).",
                ["store"],
                registry=registry,
            )
            for name, tier in counted.items():
                failures.labels(name).set_function(functools.partial(_failures, tier))

    def hit(self, surface: str, upstream: str) -> None:
        self._hits.labels(surface, upstream).inc()

    def miss(self, surface: str, upstream: str) -> None:
        self._misses.labels(surface, upstream).inc()

    def refresh(self, surface: str, upstream: str, seconds: float, ok: bool) -> None:
        self._refreshes.labels(surface, upstream, "ok" if ok else "failed").inc()
        self._latency.labels(upstream).observe(seconds)

    def _code(self, code: str) -> str:
        if code in self._codes:
            return code
        if len(self._codes) < self.max_codes:
            self._codes.add(code)
            return code
        return "OTHER"

    def upstream_failure(self, upstream: str, code: str) -> None:
        self._failures.labels(upstream, self._code(code)).inc()

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        self._stale.labels(surface, upstream, self._code(code)).inc()
        if advisory:
            self._advisories.labels(surface, upstream).inc()

    def advisory_lost(self, surface: str, upstream: str) -> None:
        self._lost.labels(surface, upstream).inc()

    def unavailable(self, surface: str, upstream: str, code: str) -> None:
        self._unavailable.labels(surface, upstream, self._code(code)).inc()

    def breaker(self, upstream: str, is_open: bool) -> None:
        self._breaker.labels(upstream).set(1 if is_open else 0)

    def invalidation(self, action: str, entries: int) -> None:
        self._actions.labels(action).inc()
        self._taken.labels(action).inc(entries)


def _failures(store: FailureCounting) -> int:
    return store.failures
