"""The settings of an :class:`~adcp_stale_cache.UpstreamCache`, fixed when it is built."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.failures import FailureTypes
from ..core.policy import Surfaces
from ..stores import Store
from .breaker import DEFAULT_BREAKER, BreakerPolicy
from .call_loop import CallLoop
from .metrics import Fanout
from .shared_breakers import SharedBreakers

#: The hub's stages: each built once from the settings, never replaced.
STAGES = ("lookups", "breakers", "flights", "serving", "lanes")
#: How to give a setting when assigning it raises, if not as the argument of its name (old
#: names included).
HOW_TO_GIVE = {
    "metrics": "pass it when building the cache, or add a sink with report_to()",
    "outages": "build the cache with test_mode=True (or outages=): only then does fetch ask it",
    "breaker_policy": "pass breaker= when building the cache",
    "refreshers": "call remember_refreshes(memory)",
    **dict.fromkeys(STAGES, "a stage, built once from the settings"),
}


@dataclass(frozen=True)
class Settings:
    """What an :class:`~adcp_stale_cache.UpstreamCache` was built with, its arguments resolved
    (``share_breakers`` as shared breakers, ``detach_calls`` as the call loop)."""

    store: Store
    clock: Callable[[], float]  # stamps entries and measures their ages
    surfaces: Surfaces = field(default_factory=Surfaces)
    metrics: Fanout = field(default_factory=Fanout)  # the given sink, and those attached since
    namespace: str = "adcp-stale-cache"
    schema_version: str | None = None
    failure_types: FailureTypes = field(default_factory=dict)
    breaker: BreakerPolicy | None = DEFAULT_BREAKER
    # Breakers are per process: monotonic unless the caller chose a clock (a test's).
    breaker_clock: Callable[[], float] = time.monotonic
    shared_breakers: SharedBreakers | None = None
    call_loop: CallLoop | None = None  # where upstream calls run (None: the caller's loop)
    coordinate_refreshes: bool = False
    strict_advisories: bool = False

    @property
    def keyspace(self) -> str:
        """What store keys start with: entries of another schema version are never read."""
        if self.schema_version is None:
            return self.namespace
        return f"{self.namespace}@{self.schema_version}"
