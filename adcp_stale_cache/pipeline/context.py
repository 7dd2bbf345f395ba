"""A request's context: what its front door (the middleware, an SDK hook) knows of it and
alone writes: its surface, its caller's partition, the fields that pin a release, its budget."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..codecs.json import Untouched, dumps_text
from ..core.policy import SurfacePolicy


class Budget:
    """The library's own waiting in one request, from its first fetch (not the seller's queue)."""

    __slots__ = ("started_at",)

    def __init__(self) -> None:
        self.started_at: float | None = None

    def spent(self) -> float:
        """Seconds since the request's first fetch asked (this one, if none did before)."""
        now = time.monotonic()
        if self.started_at is None:
            self.started_at = now
        return now - self.started_at


class RequestContext:
    """One request's surface, partition, pins and budget: the front door alone writes them.

    The middleware's context is its :class:`~adcp_stale_cache.asgi.peek.RequestPeek`, which
    reads the partition and fields off the request itself."""

    __slots__ = ("_budget", "_fields", "_partition", "_partition_of", "in_flight", "surface")

    def __init__(
        self,
        surface: SurfacePolicy | None = None,
        partition: str | None = None,
        partition_of: Callable[[], str | None] | None = None,
        request_field: Callable[[str], Any] | None = None,
        budget: Budget | None = None,
        *,
        in_flight: bool = False,
    ) -> None:
        self.surface = surface  # the middleware names it once it reads the call (see peek)
        self._partition = partition
        self._partition_of = partition_of  # computed on first use: most requests never need it
        self._fields = request_field if request_field is not None else no_field
        self._budget = budget  # made on first use: most requests never spend one
        self.in_flight = in_flight  # a flight's (see within): its request warned already

    @property
    def budget(self) -> Budget:
        """The library's waiting in this request (shared with its flights)."""
        if self._budget is None:
            self._budget = Budget()
        return self._budget

    def within(self) -> RequestContext:
        """The context of a flight from this request: same surface, partition, pins, budget."""
        return RequestContext(
            self.surface,
            None,
            lambda: self.partition,
            self.request_field,
            self.budget,
            in_flight=True,
        )

    def as_made(self) -> Callable[[], RequestContext]:
        """A maker of this context for a later re-run: the partition left unasked (asking may
        warn), the release pinned as read now, a budget of its own."""
        pins = {name: self.request_field(name) for name in PIN_FIELDS}
        partition, partition_of = self._partition_unasked()
        return functools.partial(RequestContext, self.surface, partition, partition_of, pins.get)

    def partition_from(self, partition_of: Callable[[], str | None]) -> None:
        """Compute the partition with ``partition_of`` on first use (the call is read later)."""
        self._partition, self._partition_of = None, partition_of

    @property
    def partition(self) -> str | None:
        """The cache partition of the request's caller."""
        if self._partition_of is not None:
            self._partition, self._partition_of = self._partition_of(), None
        return self._partition

    def _partition_unasked(self) -> tuple[str | None, Callable[[], str | None] | None]:
        """The partition if asked already, else how to ask it."""
        return self._partition, self._partition_of

    def request_field(self, name: str) -> Any:
        """A field of the AdCP request: None when absent, :data:`UNREAD` when unreadable."""
        return self._fields(name)

    def pinned_release(self) -> Any:
        """The release the request pins as a key part (``adcp_version``, else
        ``adcp_major_version``, as sent); None if none; :data:`UNREAD` if unreadable."""
        for name in PIN_FIELDS:
            pinned = self.request_field(name)
            if pinned is UNREAD:
                return UNREAD
            if pinned is not None:
                try:
                    return f"{name}={dumps_text(pinned, sort_keys=True, default=str)}"
                except Untouched:  # nested past what encodes: read as unreadable
                    return UNREAD
        return None

    def budget_left(self, policy: SurfacePolicy) -> float | None:
        """Seconds left of the surface's request budget, or None without a budget."""
        if policy.request_budget_seconds is None:
            return None
        return policy.request_budget_seconds - self.budget.spent()


#: The request fields that pin an AdCP release, first the one that wins.
PIN_FIELDS = ("adcp_version", "adcp_major_version")

#: What :meth:`RequestContext.request_field` gives when the request could not be read.
UNREAD: Any = type("Unread", (), {"__repr__": lambda self: "UNREAD"})()


def no_field(name: str) -> Any:
    """The fields of no known request (``collect_advisories`` without one): it pins nothing."""
    return None


def _unread(name: str) -> Any:
    return UNREAD


def request_fields(request: object) -> Callable[[str], Any]:
    """How to read the fields of an AdCP request (a mapping or a pydantic model; None pins
    nothing, anything else reads :data:`UNREAD`)."""
    if request is None:
        return no_field
    if isinstance(request, BaseModel):
        request = request.model_dump(mode="json", exclude_none=True)
    if isinstance(request, Mapping):
        return request.get
    return _unread
