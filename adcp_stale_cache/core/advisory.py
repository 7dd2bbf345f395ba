"""The AdCP error model, and the one place that builds ``STALE_RESPONSE`` advisories
(``core/error.json``, ``error-details/stale-response.json``; never an empty object)."""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from .failures import Failure, UpstreamUnavailable
from .policy import SurfacePolicy, Upstream

STALE_RESPONSE = "STALE_RESPONSE"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"

#: Tools whose answers allow no ``errors[]`` (AdCP 3.2): staleness goes in ``incomplete[]``.
NO_ERRORS_MEMBER = frozenset({"list_products"})

Recovery = Literal["transient", "correctable", "terminal"]


class UpstreamRef(BaseModel):
    """``details.upstream``: which upstream failed (``url`` omitted for internal ones)."""

    model_config = ConfigDict(extra="allow")

    url: str | None = None
    name: str | None = None


class OriginalError(BaseModel):
    """``details.original_error``: the sanitised failure that triggered the fallback."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class StaleResponseDetails(BaseModel):
    """``error-details/stale-response.json``."""

    model_config = ConfigDict(extra="allow")

    served_from_cache: Literal[True] = True
    cache_age_seconds: int = Field(ge=0)
    freshness_target_seconds: int | None = Field(default=None, ge=0)
    upstream: UpstreamRef | None = None
    original_error: OriginalError | None = None


class AdcpError(BaseModel):
    """``core/error.json``: one entry of a payload's ``errors[]``."""

    # Frozen: advisories are memoised and shared by every request.
    model_config = ConfigDict(extra="allow", frozen=True)

    code: str = Field(min_length=1, max_length=64)
    message: str
    field: str | None = None
    suggestion: str | None = None
    recovery: Recovery | None = None
    retry_after: int | None = Field(default=None, ge=1, le=3600)
    details: dict[str, Any] | None = None

    @functools.cached_property
    def wire(self) -> bytes:
        """The wire form as JSON bytes (no null members), serialised once."""
        return orjson.dumps(self.model_dump(mode="json", exclude_none=True))

    def to_dict(self) -> dict[str, Any]:
        """The wire form: no null members (a new dict on each call, free to change)."""
        result: dict[str, Any] = orjson.loads(self.wire)
        return result


def stale_response(
    upstream: Upstream,
    policy: SurfacePolicy,
    age_seconds: int,
    failure: Failure | None,
    target_seconds: int | None = None,
) -> AdcpError:
    """The advisory for one upstream served from an entry ``age_seconds`` old; memoised, so
    frozen. ``failure`` is None for stale-while-revalidate (no ``original_error``)."""
    return _stale_response(
        upstream.name,
        upstream.url,
        policy.field,
        policy.freshness_target_seconds if target_seconds is None else target_seconds,
        age_seconds,
        failure.code if failure else None,
        failure.message if failure else None,
    )


# Memoised on strings and numbers: they hash far faster than the models they come from.
@functools.lru_cache(maxsize=4096)
def _stale_response(
    name: str,
    url: str | None,
    field: str | None,
    target: int,
    age_seconds: int,
    code: str | None,
    reason: str | None,
) -> AdcpError:
    details = StaleResponseDetails(
        cache_age_seconds=age_seconds,
        freshness_target_seconds=target,
        upstream=UpstreamRef(name=name, url=url),
        original_error=OriginalError(code=code, message=reason) if code and reason else None,
    )
    why = reason.lower() if reason else "refreshing in the background"
    return AdcpError(
        code=STALE_RESPONSE,
        message=(
            f"Served cached {field or 'data'} from upstream '{name}' ({age_seconds}s old, "
            f"freshness target {target}s): {why}."
        ),
        field=field,
        recovery="transient",
        suggestion="Retry later for fresh data, or accept the cached data.",
        details=details.model_dump(mode="json", exclude_none=True),
    )


def service_unavailable(error: UpstreamUnavailable, field: str | None = None) -> AdcpError:
    """The fatal ``SERVICE_UNAVAILABLE`` error for an upstream with no usable cache entry."""
    failure = error.failure
    return AdcpError(
        code=SERVICE_UNAVAILABLE,
        message=f"Upstream '{error.upstream.name}' is unavailable: {failure.message.lower()}.",
        field=field,
        recovery="transient",
        retry_after=_retry_after(failure.retry_after),
        details={
            "upstream": UpstreamRef(name=error.upstream.name, url=error.upstream.url).model_dump(
                exclude_none=True
            ),
            "original_error": {"code": failure.code, "message": failure.message},
        },
    )


def failed_payload(errors: list[dict[str, Any]], context: Any = None) -> dict[str, Any]:
    """A failed task's payload: ``adcp_error``, ``errors[]`` and the request's ``context``."""
    payload: dict[str, Any] = {"adcp_error": errors[0], "errors": errors}
    if context is not None:
        payload["context"] = context
    return payload


def _retry_after(seconds: float | None) -> int | None:
    # AdCP 3.2: a whole number from 1 to 3600, rounded up; an adopter's hint may be NaN.
    if seconds is None or not seconds > 0:  # NaN compares false
        return None
    return 3600 if seconds >= 3600 else max(1, math.ceil(seconds))
