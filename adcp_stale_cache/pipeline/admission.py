"""Stage 2 of a fetch, **admit**: may this fetch call its upstream now (budget, breakers)?
Injected outages are only declared here: the harness answers them around the pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.failures import BUDGET_SPENT, CIRCUIT_OPEN, Failure
from ..core.policy import SurfacePolicy, Upstream
from .breaker import (
    Admission,
    Breaker,
    BreakerKey,
    about_credentials,
    breaker_keys,
)
from .collector import AdvisoryCollector
from .lookup import Lookup
from .settings import Settings


class InjectedOutage(Protocol):
    """One outage injected for the next response it affects."""

    @property
    def tool(self) -> str:
        """The tool whose next response it affects ("*": any tool's)."""

    @property
    def upstream_name(self) -> str | None:
        """The upstream it fails (None: the tool's first)."""

    @property
    def cache_age_seconds(self) -> int | None:
        """The age to serve the entry at (None: its real age, at least the target)."""

    @property
    def empty_cache(self) -> bool:
        """Answer as if nothing were cached: the failure stays a failure."""


class OutageInjector(Protocol):
    """Where injected outages come from (see :mod:`adcp_stale_cache.testing`)."""

    def force(
        self,
        tool: str,
        upstream_name: str | None = None,
        cache_age_seconds: int | None = None,
        empty_cache: bool = False,
    ) -> InjectedOutage:
        """Inject an outage of ``upstream_name`` for the next response of ``tool``."""

    def claim(
        self, policy: SurfacePolicy, upstream: Upstream, collector: AdvisoryCollector | None
    ) -> InjectedOutage | None:
        """The outage affecting this call, claimed for the current response."""

    def __len__(self) -> int:
        """How many injected outages are waiting for the response they affect."""


@dataclass(slots=True)
class Admitted:
    """Call the upstream within ``timeout``; ``probe``: the breaker this call probes."""

    timeout: float
    probe: Breaker | None = None
    in_front: bool = False  # the probe before it was abandoned: run this one in front

    @property
    def last_failure(self) -> Failure | None:
        """The probing breaker's last failure (None when this call is no probe)."""
        return self.probe.last_failure if self.probe is not None else None


@dataclass(slots=True)
class Refused:
    """Do not call: answer from cache, reporting ``failure``."""

    failure: Failure


class Breakers:
    """The circuit breakers of one cache: one per upstream and one per set of credentials
    (see :func:`~adcp_stale_cache.pipeline.breaker.breaker_keys`)."""

    def __init__(self, settings: Settings) -> None:
        self.policy, self.clock = settings.breaker, settings.breaker_clock
        self.metrics, self.shared = settings.metrics, settings.shared_breakers
        self._breakers: dict[BreakerKey, Breaker] = {}

    def _of(self, key: BreakerKey) -> Breaker | None:
        if self.policy is None:
            return None
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = Breaker(self.policy)
        return breaker

    def is_open(self, upstream: Upstream | str) -> bool:
        """True while a breaker of ``upstream`` (or of any upstream so named) holds calls back."""
        if isinstance(upstream, Upstream):
            keys = breaker_keys(upstream)
            return any(key in self._breakers and self._breakers[key].is_open for key in keys)
        return any(b.is_open for key, b in list(self._breakers.items()) if key[0] == upstream)

    async def admit(self, found: Lookup) -> Admitted | Refused:
        """The answer for a fetch that found no fresh hit."""
        timeout = found.timeout
        collector = found.collector
        budget = collector.context.budget_left(found.policy) if collector is not None else None
        # With nothing to serve instead, the call is the only answer: no budget applies.
        if budget is not None and found.fallback is not None:
            if budget <= 0:  # before the breaker: a caller that will not call takes no probe
                return Refused(BUDGET_SPENT)
            timeout = min(timeout, budget)
        keys = breaker_keys(found.upstream)
        probe: Breaker | None = None
        for key in dict.fromkeys(keys):  # the upstream's, then its credentials'
            breaker = self._of(key)
            if breaker is None:
                break
            admission = breaker.admit(self.clock())
            if admission is Admission.REJECT:  # open: answer at once
                if probe is not None:
                    probe.release_probe()
                return Refused(breaker.last_failure or CIRCUIT_OPEN)
            if admission is Admission.PROBE and probe is None:
                probe = breaker
            elif admission is Admission.PROBE:  # one call probes both: one slot is held
                breaker.release_probe()
        if probe is None and self.shared is not None:
            for key in dict.fromkeys(keys):
                elsewhere = await self.shared.open_elsewhere(key)
                if elsewhere is not None:
                    return Refused(elsewhere)
        abandoned = probe is not None and probe.abandoned
        if probe is not None:
            probe.abandoned = False
        return Admitted(timeout, probe, abandoned)

    async def report(self, upstream: Upstream, failure: Failure | None, outage: bool) -> None:
        """A call's verdict: ``failure`` None for an answer; ``outage`` whether it counts as
        one. A rate limit counts against the credentials' breaker, other outages the upstream's."""
        if self.policy is None:
            return
        host, own = breaker_keys(upstream)
        failed = None
        if failure is not None and outage:
            failed = own if about_credentials(failure) else host
        for key in dict.fromkeys((host, own) if failed != host else (host,)):
            breaker = self._of(key)
            assert breaker is not None  # (breakers are on)
            if key == failed and failure is not None:
                breaker.on_failure(self.clock(), failure)
            else:
                breaker.on_success()
            await self._share(key, breaker, failure if key == failed else None)
        self.metrics.breaker(upstream.name, self.is_open(upstream.name))

    async def _share(self, key: BreakerKey, breaker: Breaker, failure: Failure | None) -> None:
        if self.shared is None:
            return
        if failure is None:
            await self.shared.closed(key)
        elif breaker.is_open and not breaker.probing:
            await self.shared.opened(key, failure, breaker.policy.cooldown_seconds)
