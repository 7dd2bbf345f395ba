"""Compliance-test hooks: the spec's ``force_upstream_unavailable`` as a one-shot outage of the
next affected response. Only ``UpstreamCache(test_mode=True)`` loads this: sandboxes only.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .core.decision import whole_seconds
from .core.failures import (
    MAX_STATED_SECONDS,
    Failure,
    UpstreamUnavailable,
    classify,
    stated_seconds,
)
from .core.policy import FailureKind, SurfacePolicy, Upstream
from .core.values import JSON, Codec
from .pipeline.admission import InjectedOutage, OutageInjector
from .pipeline.cache import UpstreamCache
from .pipeline.collector import AdvisoryCollector, current_collector
from .pipeline.lookup import Lookup

__all__ = ["FORCED_FAILURE", "ComplianceFetch", "ForcedOutage", "ForcedOutages", "in_test_mode"]

T = TypeVar("T")

#: What an injected outage reports as its upstream's failure.
FORCED_FAILURE = Failure(
    FailureKind.UPSTREAM_ERROR,
    "SERVICE_UNAVAILABLE",
    "Upstream forced unavailable by the compliance test controller",
)


@dataclass
class ForcedOutage:
    """One ``force_upstream_unavailable`` call, until a response has used it."""

    tool: str
    upstream_name: str | None = None
    cache_age_seconds: int | None = None
    empty_cache: bool = False
    claimed_by: object | None = field(default=None, repr=False)

    def matches(self, policy: SurfacePolicy, upstream: Upstream) -> bool:
        """True when a call of ``upstream`` for ``policy``'s surface is affected."""
        if self.tool not in ("*", policy.name):
            return False
        if self.upstream_name is not None:
            return self.upstream_name == upstream.name
        # No upstream named: the tool's default (its first), else any.
        return not policy.upstreams or policy.upstreams[0] == upstream.name

    def affects(
        self, policy: SurfacePolicy, upstream: Upstream, collector: AdvisoryCollector | None
    ) -> bool:
        """True when this call is affected, by its own surface or by the tool the request
        answers."""
        asked = collector.context.surface if collector is not None else None
        return self.matches(policy, upstream) or (
            asked is not None and asked is not policy and self.matches(asked, upstream)
        )


class ForcedOutages:
    """The outages forced so far, each used up by the response it affects."""

    def __init__(self) -> None:
        self._outages: list[ForcedOutage] = []

    def force(
        self,
        tool: str,
        upstream_name: str | None = None,
        cache_age_seconds: int | None = None,
        empty_cache: bool = False,
    ) -> ForcedOutage:
        """Record an outage; a later force of the same tool and upstream replaces it."""
        if not tool:
            raise ValueError("tool is required ('*' for every tool)")
        if cache_age_seconds is not None:
            cache_age_seconds = _forced_age(cache_age_seconds)
        outage = ForcedOutage(tool, upstream_name, cache_age_seconds, empty_cache)
        self._outages = [
            o for o in self._outages if (o.tool, o.upstream_name) != (tool, upstream_name)
        ]
        self._outages.append(outage)
        return outage

    def claim(
        self, policy: SurfacePolicy, upstream: Upstream, collector: AdvisoryCollector | None
    ) -> ForcedOutage | None:
        """The outage affecting this call, claimed for the current response."""
        owner: object = collector if collector is not None else object()
        for outage in list(self._outages):
            if not outage.affects(policy, upstream, collector):
                continue
            if outage.claimed_by is None:
                outage.claimed_by = owner
                return outage
            if outage.claimed_by is owner:  # the same response, another key
                return outage
            self._outages.remove(outage)  # used up by an earlier response
        return None

    def reset(self) -> None:
        """Forget every forced outage."""
        self._outages.clear()

    def __len__(self) -> int:
        return len(self._outages)


def in_test_mode(cache: UpstreamCache, outages: OutageInjector | None = None) -> OutageInjector:
    """Put ``cache`` in test mode: its fetch answers what ``outages`` (new
    :class:`ForcedOutages` unless given) injects first. Returns the injector."""
    injector = outages if outages is not None else ForcedOutages()
    # Test mode goes between a subclass and the hub, so a subclass's fetch (keying by tenant,
    # say) runs first, as it does for every real fetch.
    cache.__class__ = _in_test_mode(type(cache))
    pipeline = types.MethodType(UpstreamCache.fetch, cache)  # the hub's own, under the subclass
    object.__setattr__(cache, "_compliance", ComplianceFetch(cache, injector, pipeline))
    return injector


class _TestMode(UpstreamCache):
    _compliance: ComplianceFetch

    async def fetch(self, *args: Any, **options: Any) -> Any:
        return await self._compliance.fetch(*args, **options)


_MADE: dict[type[UpstreamCache], type[UpstreamCache]] = {}


def _in_test_mode(cls: type[UpstreamCache]) -> type[UpstreamCache]:
    if issubclass(cls, _TestMode):
        return cls
    if cls not in _MADE:
        bases = (_TestMode,) if cls is UpstreamCache else (cls, _TestMode)
        _MADE[cls] = type(cls.__name__, bases, {"__module__": cls.__module__})
    return _MADE[cls]


class ComplianceFetch:
    """A cache's fetch in test mode: injected outages here, all else by ``fetch``."""

    def __init__(
        self, cache: UpstreamCache, outages: OutageInjector, fetch: Callable[..., Awaitable[Any]]
    ) -> None:
        self.cache, self.outages, self.pipeline = cache, outages, fetch

    async def fetch(
        self, upstream: Upstream, key: object, call: Callable[[], Awaitable[T]], **options: Any
    ) -> T:
        """:meth:`~adcp_stale_cache.UpstreamCache.fetch` (its keywords as ``options``), an
        injected outage first."""
        lookups, collector = self.cache.lookups, current_collector()
        surface, codec = options.get("surface"), options.get("codec", JSON)
        # Claimed before the store is read: the outage belongs to this response.
        outage = self.outages.claim(lookups.policy(surface, collector)[0], upstream, collector)
        if outage is None:
            answer: T = await self.pipeline(upstream, key, call, **options)
            return answer
        # No codec: the entry as held, fresh or not (the outage serves it aged).
        found = await lookups.look_up(upstream, key, surface, options.get("tags", ()), None)
        return await self.injected(found, outage, call, codec)

    async def injected(
        self,
        found: Lookup,
        outage: InjectedOutage,
        call: Callable[[], Awaitable[T]],
        codec: Codec[T],
    ) -> T:
        """Serve the entry aged as asked (a cold key seeded for real first), or fail as if
        nothing were cached."""
        cache, upstream, policy = self.cache, found.upstream, found.policy
        if outage.empty_cache:  # as if nothing were cached: the failure stays a failure
            cache.metrics.unavailable(policy.name, upstream.name, FORCED_FAILURE.code)
            raise UpstreamUnavailable(upstream, FORCED_FAILURE)
        entry, now = found.entry, cache.clock()
        if entry is None:
            try:
                entry = await cache.flights.seed(found, call, codec)
            except Exception as exc:
                failure = classify(exc, found.timeout, cache.failure_types)
                raise UpstreamUnavailable(upstream, failure) from exc
            if entry is None:  # nothing to age: the injected outage stays a failure
                raise UpstreamUnavailable(upstream, FORCED_FAILURE)
        age = outage.cache_age_seconds
        if age is None:
            age = max(whole_seconds(entry.age(now)), policy.freshness_target_seconds)
        # The aged copy is served, never stored: the real entry keeps its real age.
        terms = None if entry.terms is None else dataclasses.replace(entry.terms, age=0)
        aged = dataclasses.replace(entry, stored_at=now - age, terms=terms)
        return cache.serving.from_cache(found, aged, FORCED_FAILURE, codec)


def _forced_age(value: object) -> int:
    """The age a buyer forced: whole seconds (``120.0`` too) up to 2^31, else ValueError."""
    seconds = stated_seconds(value)
    if seconds is None or seconds != value or not seconds.is_integer():
        raise ValueError(f"cache_age_seconds must be a whole number from 0 to {MAX_STATED_SECONDS}")
    return int(seconds)
