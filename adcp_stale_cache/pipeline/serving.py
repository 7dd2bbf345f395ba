"""Stage 4 of a fetch, **serve**: the value, or the stale entry with one ``STALE_RESPONSE``
in the request's collector, or :class:`~adcp_stale_cache.UpstreamUnavailable`; decided only here.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple, TypeVar

from ..core.advisory import AdcpError, stale_response
from ..core.decision import Fail, Fresh, ServeStale, fresh_until, on_failure
from ..core.entry import Entry
from ..core.failures import UNKNOWN_FAILURE, Failure, UpstreamUnavailable
from ..core.labels import built_from
from ..core.policy import SurfacePolicy, Upstream
from ..core.values import Codec, Unreadable, content_of, decode
from .collector import (
    AdvisoryCollector,
    AdvisoryLost,
    Composed,
    current_collector,
    say_lost,
    stated,
)
from .flight import Refreshed
from .lookup import Hit, Lookup
from .settings import Settings

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")


class StaleServe(NamedTuple):
    """One stale serve, as counted and logged."""

    surface: str
    upstream: str
    age: int
    code: str


_NO_COLLECTOR = (
    "no_collector",
    "no request collector carried it (a server started without the advisory middleware, as "
    "fastmcp run serves it, or a thread the request's context did not reach: carry_context)",
)


class Serving:
    """Serves what the earlier stages found, reporting to the cache's metrics."""

    def __init__(self, settings: Settings) -> None:
        self.clock, self.metrics = settings.clock, settings.metrics
        self.strict_advisories = settings.strict_advisories

    def hit(self, found: Hit[T], codec: Codec[T]) -> T:
        """A fresh hit's value, counted and told to the request."""
        self.metrics.hit(found.surface.name, found.upstream.name)
        if found.collector is not None:  # (as _composed checks: most hits stop here)
            _composed(found, found.entry, codec, fresh=True)
        return found.value

    def behind(self, found: Lookup, failure: Failure | None, codec: Codec[T]) -> T:
        """The entry held, served while its refresh flies behind it (or raises ``Unreadable``)."""
        return self._served(found, found.fallback, failure, codec, None)

    def from_cache(
        self,
        found: Lookup,
        latest: Entry | None,
        failure: Failure | None,
        codec: Codec[T],
        exc: Exception | None = None,
    ) -> T:
        """Serve ``latest`` stale (recording the advisory), as a plain hit, or fail."""
        try:
            return self._served(found, latest, failure, codec, exc)
        except Unreadable:
            pass
        raise self._unavailable(found, failure) from exc

    def _served(
        self,
        found: Lookup,
        latest: Entry | None,
        failure: Failure | None,
        codec: Codec[T],
        exc: Exception | None,
    ) -> T:
        """``latest`` stale (recording the advisory), or fresh if refreshed meanwhile."""
        upstream, policy = found.upstream, found.policy
        outcome = on_failure(latest, self.clock(), policy)
        if isinstance(outcome, Fail):
            raise self._unavailable(found, failure) from exc
        value = decode(codec, outcome.entry, upstream)
        if isinstance(outcome, ServeStale):
            self.record_stale(
                upstream, policy, outcome.age_seconds, failure, outcome.target_seconds
            )
        _composed(found, outcome.entry, codec, fresh=isinstance(outcome, Fresh))
        return value

    def _unavailable(self, found: Lookup, failure: Failure | None) -> UpstreamUnavailable:
        failure = failure or UNKNOWN_FAILURE  # revalidating an entry that just expired
        upstream, policy = found.upstream, found.policy
        self.metrics.unavailable(policy.name, upstream.name, failure.code)
        logger.warning(
            "upstream_unavailable upstream=%s surface=%s code=%s",
            upstream.name,
            policy.name,
            failure.code,
        )
        return UpstreamUnavailable(upstream, failure)

    def record_stale(
        self,
        upstream: Upstream,
        policy: SurfacePolicy,
        age: int,
        failure: Failure | None,
        target: int | None = None,
    ) -> None:
        """One stale serve: the request's advisory, the metrics and the log line."""
        collector = current_collector()
        code = failure.code if failure else "REVALIDATING"
        advisory = stale_response(upstream, policy, age, failure, target)
        serve = StaleServe(policy.name, upstream.name, age, code)
        first = self.told(collector, upstream.identity, advisory, serve)
        # Once per upstream per request at WARNING: a page of 50 stale keys is one event.
        logger.log(
            logging.WARNING if first and collector is not None else logging.DEBUG,
            "stale_serve upstream=%s surface=%s age_seconds=%d code=%s collected=%s",
            upstream.name,
            policy.name,
            age,
            code,
            collector is not None,
        )

    def told(
        self,
        collector: AdvisoryCollector | None,
        key: Hashable,
        advisory: AdcpError,
        serve: StaleServe,
    ) -> bool:
        """Record a stale ``serve``'s ``advisory`` in ``collector`` and count it (now, or as
        delivered or lost once its answer is written); True when it is the request's first
        for ``key``. Raises :class:`AdvisoryLost` with no collector in strict mode."""
        if collector is None:
            if self.strict_advisories:
                raise AdvisoryLost(
                    f"{serve.upstream!r} would be served stale with no request collector: carry "
                    "the request's context into this thread or loop (carry_context, "
                    "use_collector)"
                )
            self._settled(serve, _NO_COLLECTOR)
            return True
        counted_later = collector.unsettled is not None
        report = functools.partial(self._settled, serve) if counted_later else None
        first = collector.record(key, advisory, report)
        if not (first and counted_later):
            self.metrics.stale_serve(serve.surface, serve.upstream, serve.code, first)
        return first

    def _settled(self, serve: StaleServe, lost: tuple[str, str] | None) -> None:
        """One advisory's fate, counted: delivered (``lost`` None) or lost, and why."""
        surface, upstream, age, code = serve
        if lost is not None:
            self.metrics.advisory_lost(surface, upstream)
            say_lost(upstream, surface, age, code, lost)
        self.metrics.stale_serve(surface, upstream, code, lost is None)

    def flown(self, found: Lookup, refreshed: Refreshed[T], codec: Codec[T]) -> T:
        """A flight's answer to one caller sharing it: its stale serves recorded in this
        caller's collector, and a copy of a stored value of its own."""
        collector = found.collector
        stale = refreshed.at_source
        if stale is not None:
            self.record_stale(found.upstream, found.policy, stale.age, stale.failure, stale.target)
        for name, advisory in refreshed.advisories:  # built on stale data: told here
            upstream, surface, age, code = stated(advisory, found.policy.name)
            serve = StaleServe(surface, upstream, age, code)
            self.told(collector, name, advisory, serve)
        if collector is None:
            return refreshed.own(codec)
        # Not stored: encoded once, for both a conditional answer and the context search.
        data = refreshed.data if refreshed.data is not None else _encoded(refreshed.value, codec)
        trace = collector.trace
        if trace.compositions or trace.labels is not None:
            labels = (*refreshed.labels, built_from(found.store_key))
            stored = refreshed.entry
            if trace.compositions:
                if stored is not None:
                    trace.composed(_part(found, stored, codec, fresh=True), labels)
                else:  # its content all the same, never remembered
                    content = (
                        content_of(codec, data)
                        if data is not None
                        else repr(refreshed.value).encode()
                    )
                    trace.composed(Composed(content), labels)
            trace.read(labels, _at_source(stored) if stored is not None else None)
        if _CONTEXT in data if data is not None else _names_context(refreshed.value):
            collector.traced().served_context = True  # another caller's flight's, maybe
        return refreshed.own(codec)


def _encoded(value: T, codec: Codec[T]) -> bytes | None:
    """``value`` as ``codec`` writes it, or None (the flight logged why already)."""
    try:
        return codec.dumps(value)
    except Exception:
        return None


def _names_context(value: Any) -> bool:
    """What can be read of a value no codec writes: a ``context`` in it."""
    return isinstance(value, (Mapping, str)) and "context" in value


def _part(found: Lookup | Hit[Any], entry: Entry, codec: Codec[Any], *, fresh: bool) -> Composed:
    """``entry`` as a part of a conditional answer."""
    until = fresh_until(entry, found.policy) if fresh else -math.inf
    return Composed(content_of(codec, entry.data), found.store_key, entry.stored_at, until)


def _composed(found: Lookup | Hit[Any], entry: Entry, codec: Codec[Any], *, fresh: bool) -> None:
    """Trace an entry served to the request: a part of a conditional answer, its labels, and
    whether it holds a ``context`` (another request's must not reach this answer)."""
    collector = found.collector
    if collector is None:
        return
    trace = collector.trace
    if trace.compositions or trace.labels is not None:
        labels = (*entry.labels, built_from(found.store_key))
        if trace.compositions:
            trace.composed(_part(found, entry, codec, fresh=fresh), labels)
        trace.read(labels, _at_source(entry))
    if _CONTEXT in entry.data:  # a byte search: a false alarm only costs the answer a check
        collector.traced().served_context = True


def _at_source(entry: Entry) -> float:
    """When ``entry``'s data was read at its source."""
    return entry.stored_at - (entry.terms.age if entry.terms is not None else 0.0)


# Unquoted: a JSON string value holds it escaped, as \"context\".
_CONTEXT = b"context"
