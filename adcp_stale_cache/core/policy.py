"""Caching policy per tool surface (one AdCP tool a seller answers), and the upstreams a
seller calls to build its answers."""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from .keys import digest

if TYPE_CHECKING:
    import httpx
    from pydantic import AnyUrl


class FailureKind(str, enum.Enum):
    """The classes of upstream failure; a policy chooses which ones count as an outage."""

    TIMEOUT = "timeout"
    CONNECTION = "connection"
    HTTP_5XX = "http_5xx"
    RATE_LIMITED = "rate_limited"
    INVALID_PAYLOAD = "invalid_payload"
    UPSTREAM_ERROR = "upstream_error"
    UNEXPECTED = "unexpected"


#: The longest deadline a setting takes (a day): lease and store expiries must stay finite.
MAX_SECONDS = 86_400.0

#: Failures that serve stale by default: not ``UNEXPECTED`` (a bug must not hide behind data).
DEFAULT_STALE_ON: frozenset[FailureKind] = frozenset(FailureKind) - {FailureKind.UNEXPECTED}


class SurfacePolicy(BaseModel):
    """Freshness contract and outage rules for one tool surface."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="Tool name, e.g. 'get_products'.")
    field: str | None = Field(
        default=None, description="Payload path the advisory names, e.g. 'products'."
    )
    paths: tuple[str, ...] = Field(
        default=(), description="Plain-JSON route paths of this surface (not MCP/A2A endpoints)."
    )
    upstreams: tuple[str, ...] = Field(
        default=(), description="Names of the upstreams this surface calls, its default first."
    )
    freshness_target_seconds: int = Field(
        default=60, ge=0, description="Age up to which an entry is served without calling."
    )
    max_stale_seconds: int = Field(
        default=3600,
        ge=0,
        description="How far past the target an entry may still be served (RFC 9111 max-stale).",
    )
    upstream_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Deadline of one upstream call (an Upstream may override).",
    )
    stale_on: frozenset[FailureKind] = Field(
        default=DEFAULT_STALE_ON, description="Failure kinds that fall back to a stale entry."
    )
    request_budget_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Deadline of a whole request: no upstream call outlives it.",
    )
    stale_while_revalidate: bool = Field(
        default=False,
        description="Serve a past-target entry at once (with its advisory), refresh behind.",
    )
    shared_across_callers: bool = Field(
        default=False,
        description="Public data: one cache entry for every caller instead of one per caller.",
    )
    honor_cache_control: bool = Field(
        default=False,
        description="Let HTTP upstreams' Cache-Control, Age and Vary set each entry's terms, "
        "within this policy's bounds (CachingTransport).",
    )
    min_freshness_seconds: int = Field(
        default=0, ge=0, description="Honoured max-age: the shortest freshness target allowed."
    )
    max_freshness_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Honoured max-age: the longest freshness target allowed (default: the "
        "freshness target).",
    )
    varies_by_version: bool = Field(
        default=False,
        description="Answers differ by AdCP release: entries are keyed by the release the "
        "request pins (adcp_version, else adcp_major_version), never served across them.",
    )
    keep_seconds: int = Field(
        default=0,
        ge=0,
        description="How long past max-stale an entry is kept for revalidation only (its "
        "ETag), never served (Varnish's keep).",
    )

    @property
    def ttl_seconds(self) -> int:
        """How long a store keeps an entry: its longest target, max-stale, and ``keep``."""
        target = max(self.freshness_target_seconds, self.max_freshness_seconds or 0)
        return target + self.max_stale_seconds + self.keep_seconds


class Upstream(BaseModel):
    """One dependency a seller calls. ``url`` reaches buyers without userinfo, path parameters,
    query or fragment (:attr:`key_url` tells them apart); ``credentials`` are never shown."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    name: str = Field(min_length=1, max_length=200, description="Name buyers and logs see.")
    url: str | None = Field(
        default=None, description="Public URL reported to buyers; unset for internal services."
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Deadline of one call (unset: the surface's).",
    )
    credentials: SecretStr | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="The caller's own credentials for this upstream (a tenant's token): they "
        "join its cache keys, hashed, so calls made with different ones never share an entry.",
    )

    if TYPE_CHECKING:  # what the validators take (the fields hold str)

        def __init__(
            self,
            *,
            name: str,
            url: str | AnyUrl | httpx.URL | None = None,
            timeout_seconds: float | None = None,
            credentials: SecretStr | str | None = None,
        ) -> None: ...

    # A field, not a property: a hit reads it as cheaply as ``url``.
    url_digest: str | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description=(
            "Set from url: a digest of the userinfo, path parameters and query it leaves out."
        ),
    )

    @property
    def identity(self) -> tuple[str, str | None]:
        """What tells two upstreams apart (breakers, keys, advisories): name and URL."""
        return (self.name, self.key_url)

    @property
    def key_url(self) -> str | None:
        """The URL as keys and breakers know it: the public one, ``#<digest>`` of the rest."""
        return self.url if self.url_digest is None else f"{self.url}#{self.url_digest}"

    @field_validator("url", mode="before")
    @classmethod
    def _public_url(cls, value: object) -> str | None:
        return None if value is None else _split_url(value)[0]

    @model_validator(mode="before")
    @classmethod
    def _digest_hidden_url(cls, data: Any) -> Any:
        given = data.get("url") if isinstance(data, dict) else None
        try:
            hidden = _split_url(given)[1] if given is not None else ()
        except ValueError:  # the url field's own check says so, naming the field
            return data
        return {**data, "url_digest": digest(hidden)} if any(hidden) else data


def _split_url(value: object) -> tuple[str, tuple[str, str, str]]:
    """A URL's public form, and the userinfo, parametered path and query it leaves out."""
    # pydantic's and httpx's URLs are not str, but their str() is.
    parts = urlsplit(value if isinstance(value, str) else str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        given = "" if isinstance(value, str) else f" (got {type(value).__name__})"
        raise ValueError(f"must be an absolute http(s) URL{given}")
    userinfo, _, netloc = parts.netloc.rpartition("@")
    path = "/".join(segment.split(";")[0] for segment in parts.path.split("/"))
    hidden = (userinfo, parts.path if path != parts.path else "", parts.query)
    return urlunsplit((parts.scheme, netloc, path, "", "")), hidden


class Surfaces(BaseModel):
    """The surfaces of one seller, looked up by tool name or by route path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policies: tuple[SurfacePolicy, ...] = ()
    default: SurfacePolicy = SurfacePolicy(name="default")

    @model_validator(mode="after")
    def _unique(self) -> Surfaces:
        names = [p.name for p in self.policies]
        if len(set(names)) != len(names):
            raise ValueError(f"surface names must be unique: {names}")
        paths = [path for p in self.policies for path in p.paths]
        if len(set(paths)) != len(paths):
            raise ValueError(f"a route path belongs to one surface only: {paths}")
        return self

    @classmethod
    def of(cls, *policies: SurfacePolicy, default: SurfacePolicy | None = None) -> Surfaces:
        """Build a registry from policies (``default`` serves unknown tools)."""
        return cls(policies=policies, default=default or SurfacePolicy(name="default"))

    @functools.cached_property
    def by_name(self) -> dict[str, SurfacePolicy]:
        """The policies by tool name."""
        return {policy.name: policy for policy in self.policies}

    def find(self, name: str | None) -> SurfacePolicy | None:
        """The policy of a tool name, or None."""
        return self.by_name.get(name) if name is not None else None

    def for_tool(self, name: str | None) -> SurfacePolicy:
        """The policy of a tool name, or the default one."""
        return self.find(name) or self.default

    def for_path(self, path: str) -> SurfacePolicy | None:
        """The policy whose route paths include ``path`` (a trailing slash is ignored)."""
        path = path.rstrip("/") or "/"
        for policy in self.policies:
            if any(path == (p.rstrip("/") or "/") for p in policy.paths):
                return policy
        return None

    def get(self, name: str) -> SurfacePolicy:
        """The policy named ``name``; KeyError naming the known ones."""
        policy = self.find(name)
        if policy is not None:
            return policy
        known = ", ".join(p.name for p in self.policies) or "none"
        raise KeyError(f"unknown surface {name!r} (known: {known})")
