"""What the pipeline reports every decision to, as events: :class:`CacheMetrics` (a no-op),
several sinks as one, and the hub's :class:`Fanout` (Prometheus: ``ops.metrics``)."""

from __future__ import annotations


class CacheMetrics:
    """The events the cache reports; this base class ignores them all."""

    def hit(self, surface: str, upstream: str) -> None:
        """A fresh hit."""

    def miss(self, surface: str, upstream: str) -> None:
        """No entry for the key."""

    def refresh(self, surface: str, upstream: str, seconds: float, ok: bool) -> None:
        """An upstream call finished."""

    def upstream_failure(self, upstream: str, code: str) -> None:
        """An outage failure of an upstream call."""

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        """An entry served past its target; ``advisory``: the request's first from ``upstream``,
        and its answer carried the ``STALE_RESPONSE`` (reported once that answer is written)."""

    def advisory_lost(self, surface: str, upstream: str) -> None:
        """An entry served stale whose advisory no answer carried: no request collector, or an
        answer that could not carry it (not JSON, an error, a stream already started)."""

    def unavailable(self, surface: str, upstream: str, code: str) -> None:
        """An upstream failed and no usable entry existed."""

    def breaker(self, upstream: str, is_open: bool) -> None:
        """The upstream's breaker state, after a call."""

    def invalidation(self, action: str, entries: int) -> None:
        """An operator's action (``soft``, ``hard``, ``refresh``) and the entries it took."""


class CombinedMetrics(CacheMetrics):
    """Several sinks as one: every event goes to each, in order (Prometheus and spans, say)."""

    def __init__(self, *sinks: CacheMetrics) -> None:
        self.sinks = sinks

    def hit(self, surface: str, upstream: str) -> None:
        for sink in self.sinks:
            sink.hit(surface, upstream)

    def miss(self, surface: str, upstream: str) -> None:
        for sink in self.sinks:
            sink.miss(surface, upstream)

    def refresh(self, surface: str, upstream: str, seconds: float, ok: bool) -> None:
        for sink in self.sinks:
            sink.refresh(surface, upstream, seconds, ok)

    def upstream_failure(self, upstream: str, code: str) -> None:
        for sink in self.sinks:
            sink.upstream_failure(upstream, code)

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        for sink in self.sinks:
            sink.stale_serve(surface, upstream, code, advisory)

    def advisory_lost(self, surface: str, upstream: str) -> None:
        for sink in self.sinks:
            sink.advisory_lost(surface, upstream)

    def unavailable(self, surface: str, upstream: str, code: str) -> None:
        for sink in self.sinks:
            sink.unavailable(surface, upstream, code)

    def breaker(self, upstream: str, is_open: bool) -> None:
        for sink in self.sinks:
            sink.breaker(upstream, is_open)

    def invalidation(self, action: str, entries: int) -> None:
        for sink in self.sinks:
            sink.invalidation(action, entries)


class Fanout(CombinedMetrics):
    """What a cache's stages report to: its ``metrics`` and the sinks attached since. A lone
    sink's ``hit`` is read when it is given or attached: patch it before (a test's mock)."""

    def __init__(self, *sinks: CacheMetrics) -> None:
        super().__init__(*sinks)
        self._bind_hit()

    def attach(self, sink: CacheMetrics) -> None:
        """Send every event to ``sink`` too, from now on."""
        self.sinks = (*self.sinks, sink)
        self._bind_hit()

    def _bind_hit(self) -> None:
        # Every fresh hit reports: straight to a lone sink, with no loop of ours between.
        hit = self.sinks[0].hit if len(self.sinks) == 1 else super().hit
        self.hit = hit  # type: ignore[method-assign]
