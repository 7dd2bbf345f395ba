"""Per-upstream circuit breaker, sans-I/O: a failure detector and a cooldown. Times are
monotonic readings: a wall clock stepped back would hold a breaker open."""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from ..core.failures import Failure
from ..core.keys import digest
from ..core.policy import FailureKind, Upstream

#: Upstream name, URL, and a digest of its credentials (None: the upstream itself).
BreakerKey = tuple[str, str | None, str | None]


class BreakerPolicy(BaseModel):
    """When to stop calling a failing upstream, and for how long."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failure_threshold: int = Field(default=3, ge=1, description="Failures that open the breaker.")
    window_seconds: float = Field(
        default=30.0, gt=0, allow_inf_nan=False, description="Window the failures count in."
    )
    cooldown_seconds: float = Field(
        default=5.0, gt=0, allow_inf_nan=False, description="Open time before a probe."
    )


DEFAULT_BREAKER = BreakerPolicy()


class Admission(str, enum.Enum):
    """What the breaker lets a caller do now."""

    CALL = "call"  # closed: call the upstream
    PROBE = "probe"  # cooldown over: this caller's call is the one probe
    REJECT = "reject"  # open: do not call


class Breaker:
    """The state of one upstream."""

    __slots__ = (
        "_failures",
        "_probe_alive",
        "abandoned",
        "last_failure",
        "opened_at",
        "policy",
        "probing",
    )

    def __init__(self, policy: BreakerPolicy) -> None:
        self.policy = policy
        self._failures: deque[float] = deque()
        self.opened_at: float | None = None
        self.probing = False
        self.last_failure: Failure | None = None
        self._probe_alive: Callable[[], bool] | None = None
        # The last probe's loop closed under it: the next one runs in front of the answer.
        self.abandoned = False

    @property
    def is_open(self) -> bool:
        """True while calls are held back (half-open included)."""
        return self.opened_at is not None

    def admit(self, now: float) -> Admission:
        """May a call be made now?"""
        if self.opened_at is None:
            return Admission.CALL
        if self.probing and self._probe_alive is not None and not self._probe_alive():
            self.probing, self.abandoned = False, True
        if not self.probing and now - self.opened_at >= self.policy.cooldown_seconds:
            self.probing, self._probe_alive = True, None
            return Admission.PROBE
        return Admission.REJECT

    def probe_runs_while(self, alive: Callable[[], bool]) -> None:
        """The probe holds its slot only while ``alive()`` (its event loop is open)."""
        self._probe_alive = alive

    def release_probe(self) -> None:
        """A probe ended without a verdict: free the slot, or no caller would probe again."""
        self.probing = False

    def on_success(self) -> None:
        """A call succeeded: close."""
        self._failures.clear()
        self.opened_at = None
        self.probing = False

    def on_failure(self, now: float, failure: Failure) -> None:
        """An outage failure: count it, open past the threshold (or re-open after a probe)."""
        self.last_failure = failure
        if self.opened_at is not None:
            if self.probing:  # the probe failed: another cooldown
                self.opened_at = now
                self.probing = False
            return
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.policy.window_seconds:
            self._failures.popleft()
        if len(self._failures) >= self.policy.failure_threshold:
            self.opened_at = now
            self._failures.clear()


def breaker_keys(upstream: Upstream) -> tuple[BreakerKey, BreakerKey]:
    """The breakers a call to ``upstream`` answers to: the upstream's, then its credentials'
    (the same key again without credentials)."""
    host: BreakerKey = (upstream.name, upstream.key_url, None)
    if upstream.credentials is None:
        return host, host
    return host, (
        upstream.name,
        upstream.key_url,
        digest([upstream.credentials.get_secret_value()]),
    )


def about_credentials(failure: Failure) -> bool:
    """Whether ``failure`` is about the caller's credentials (a rate limit, an auth, account,
    scope or budget code) rather than the upstream being down."""
    if failure.kind is FailureKind.RATE_LIMITED:
        return True
    return failure.code in _ABOUT_THE_CALLER or failure.code.startswith(_CALLER_PREFIXES)


#: AdCP error codes that speak of who calls, not of the upstream.
_ABOUT_THE_CALLER = frozenset(
    {
        "RATE_LIMITED",
        "AUTHORIZATION_REQUIRED",
        "AGENT_SUSPENDED",
        "AGENT_BLOCKED",
        "PERMISSION_DENIED",
        "SCOPE_INSUFFICIENT",
        "READ_ONLY_SCOPE",
        "CREDENTIAL_IN_ARGS",
    }
)
_CALLER_PREFIXES = ("AUTH_", "ACCOUNT_", "BUDGET_", "BILLING_")
