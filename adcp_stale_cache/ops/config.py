"""Configuration from a TOML/YAML/JSON file and ``ADCP_STALE_CACHE_*`` environment variables,
through pydantic (docs/configuration.md); a bad value raises a one-line :class:`ConfigError`."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..core.policy import SurfacePolicy, Surfaces, Upstream
from ..pipeline.breaker import BreakerPolicy
from ..pipeline.cache import UpstreamCache
from ..stores import MemoryStore, Store, TieredStore
from ..stores.redis_urls import SCHEMES, redacted, url_problem

ENV_PREFIX = "ADCP_STALE_CACHE_"
ENV_FILE = "ADCP_STALE_CACHE_CONFIG"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is one line naming the field."""


class StoreSettings(BaseModel):
    """Where entries live."""

    # hide_input_in_errors: a redis_url's password never reaches a ValidationError's text.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    kind: Literal["memory", "redis", "tiered"] = Field(
        default="memory",
        description="memory: this process; redis: shared; tiered: memory in front of Redis.",
    )
    max_entries: int = Field(default=10_000, ge=1, description="Memory store: entry bound.")
    max_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1, description="Memory store: bound on stored bytes."
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        repr=False,  # it may hold a password
        description="Redis store: redis:// or rediss:// (TLS) for one server, "
        "redis+cluster://host:port,... for a Cluster, redis+sentinel://host:port,.../service.",
    )
    redis_socket_timeout_seconds: float = Field(
        default=0.25,
        gt=0,
        allow_inf_nan=False,
        description="Redis store: per-command deadline (then no cache).",
    )
    near_max_age_seconds: float = Field(
        default=1.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "Tiered store: how long the memory copy is used after it was stored or last "
            "matched the shared copy."
        ),
    )
    unheard_fresh_seconds: float = Field(
        default=5.0,
        gt=0,
        allow_inf_nan=False,
        description="Tiered store: while the shared tier cannot be read, memory copies older "
        "than this are refreshed (a purge missed is served fresh at most this long).",
    )
    file_path: str | None = Field(
        default=None,
        description="A file tier (SQLite) under memory: entries survive restarts and the "
        'workers of a host share them. Also: store = "sqlite:///path".',
    )
    file_max_entries: int = Field(default=100_000, ge=1, description="File tier: entry bound.")
    file_max_bytes: int = Field(
        default=512 * 1024 * 1024, ge=1, description="File tier: bound on stored bytes."
    )
    file_read_on_loop: bool = Field(
        default=True,
        description="File tier: read hits on the event loop (lock-free WAL reads; faster; "
        "a slow read sends reads to the store's thread for a second). false: every query "
        "in the store's thread.",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        # What redis-py's from_url takes; checked here so that `config check` catches it.
        found = url_problem(value)
        if found is not None:
            raise ValueError(found)
        return value


class BreakerSettings(BreakerPolicy):
    """The per-upstream circuit breaker (``enabled = false`` turns it off)."""

    enabled: bool = Field(default=True, description="Open the breaker on repeated failures.")

    def policy(self) -> BreakerPolicy | None:
        """The breaker policy the cache takes, None when disabled."""
        if not self.enabled:
            return None
        return BreakerPolicy(**self.model_dump(exclude={"enabled"}))


class StaleCacheConfig(BaseModel):
    """The whole configuration: cache, store, breaker, surfaces and upstreams."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str = Field(
        default="adcp-stale-cache", min_length=1, description="Prefix of every cache key."
    )
    stale_headers: bool = Field(
        default=True, description="Add Age and Cache-Status to stale plain-HTTP answers."
    )
    coordinate_refreshes: bool = Field(
        default=False, description="Processes sharing Redis refresh an expired key once."
    )
    share_breakers: bool = Field(
        default=False,
        description="Processes sharing Redis publish open breakers: the others answer from "
        "cache at once instead of timing out on the same dead upstream.",
    )
    tracing: bool | None = Field(
        default=None, description="OpenTelemetry span events (unset: when the API is installed)."
    )
    schema_version: str | None = Field(
        default=None,
        description="The shape of what is cached: entries of another version are never read.",
    )
    store: StoreSettings = StoreSettings()
    breaker: BreakerSettings = BreakerSettings()
    defaults: SurfacePolicy = Field(
        default=SurfacePolicy(name="default"),
        description="Values every surface starts from; also the policy of unnamed tools.",
    )
    surfaces: dict[str, SurfacePolicy] = Field(default_factory=dict)
    upstreams: dict[str, Upstream] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references(self) -> StaleCacheConfig:
        Surfaces.of(*self.surfaces.values())  # unique route paths
        if self.upstreams:
            for name, surface in self.surfaces.items():
                unknown = [u for u in surface.upstreams if u not in self.upstreams]
                if unknown:
                    known = ", ".join(self.upstreams)
                    raise ValueError(
                        f"surfaces.{name}.upstreams: unknown upstream {unknown[0]!r} "
                        f"(known: {known})"
                    )
        return self

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "config") -> StaleCacheConfig:
        """Validate a parsed file (surfaces and upstreams keyed by name)."""
        data = dict(data)
        if isinstance(data.get("store"), str):
            data["store"] = _store_from_url(data["store"], source)
        defaults = _as_table(data.get("defaults", {}), "defaults", source)
        defaults.setdefault("name", "default")
        try:
            SurfacePolicy.model_validate(defaults)
        except ValidationError as exc:
            raise _one_line(exc, source, ("defaults",)) from None
        data["defaults"] = defaults
        inherited = {k: v for k, v in defaults.items() if k not in ("name", "paths")}
        surfaces = _as_table(data.get("surfaces", {}), "surfaces", source)
        data["surfaces"] = {
            name: {**inherited, **_as_table(table, f"surfaces.{name}", source), "name": name}
            for name, table in surfaces.items()
        }
        upstreams = _as_table(data.get("upstreams", {}), "upstreams", source)
        data["upstreams"] = {
            name: {**_as_table(table, f"upstreams.{name}", source), "name": name}
            for name, table in upstreams.items()
        }
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _one_line(exc, source) from None

    def surface_registry(self) -> Surfaces:
        """The surfaces, for the cache and the middleware (one object both share)."""
        return self._registry

    @functools.cached_property
    def _registry(self) -> Surfaces:
        return Surfaces.of(*self.surfaces.values(), default=self.defaults)

    def upstream(self, name: str) -> Upstream:
        """The upstream named ``name`` (a plain one, no URL, when the file does not list it)."""
        return self.upstreams.get(name) or Upstream(name=name)

    def build_store(self) -> Store:
        """The store the settings describe: memory, then a file tier when ``file_path`` is
        set, then Redis for ``redis`` and ``tiered`` (Redis needs the ``redis`` extra)."""
        store = self.store
        memory = MemoryStore(max_entries=store.max_entries, max_bytes=store.max_bytes)
        file: Store | None = None
        if store.file_path:
            from ..stores.sqlite import SqliteStore

            file = SqliteStore(
                store.file_path,
                max_entries=store.file_max_entries,
                max_bytes=store.file_max_bytes,
                read_on_loop=store.file_read_on_loop,
            )
        if store.kind == "memory":
            if file is None:
                return memory
            return TieredStore(file, memory, unheard_fresh_seconds=store.unheard_fresh_seconds)
        from ..stores.redis import RedisStore

        shared: Store = RedisStore(
            url=store.redis_url,
            prefix=self.namespace,
            socket_timeout=store.redis_socket_timeout_seconds,
        )
        if file is not None:  # the file answers while Redis is down
            shared = TieredStore(shared, file)
        if store.kind == "redis":
            return shared
        return TieredStore(
            shared,
            memory,
            near_max_age_seconds=store.near_max_age_seconds,
            unheard_fresh_seconds=store.unheard_fresh_seconds,
        )

    def build_cache(self, **options: Any) -> UpstreamCache:
        """An :class:`UpstreamCache` from these settings; ``options`` override (metrics, say)."""
        settings: dict[str, Any] = {
            "surfaces": self.surface_registry(),
            "namespace": self.namespace,
            "breaker": self.breaker.policy(),
            "coordinate_refreshes": self.coordinate_refreshes,
            "share_breakers": self.share_breakers,
            "tracing": self.tracing,
            "schema_version": self.schema_version,
        }
        settings.update(options)
        store = settings.pop("store", None) or self.build_store()
        return UpstreamCache(store, **settings)

    def middleware_options(self) -> dict[str, Any]:
        """Keyword options for :class:`~adcp_stale_cache.StaleAdvisoryMiddleware`."""
        return {"surfaces": self.surface_registry(), "stale_headers": self.stale_headers}


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, Any] | None = None,
) -> StaleCacheConfig:
    """Read a TOML, YAML or JSON file (or none), apply environment overrides, validate.

    Each layer overrides the one before: ``base`` (settings from code, in the file's shape),
    the file (default ``$ADCP_STALE_CACHE_CONFIG``), the environment."""
    environ = os.environ if environ is None else environ
    path = path if path is not None else environ.get(ENV_FILE)
    data: dict[str, Any] = _merge({}, base or {})
    source = "settings"
    if path:
        data, source = _merge(data, read_file(Path(path))), str(path)
    overrides = env_overrides(data, environ)
    if overrides:
        source = f"{source} + {ENV_PREFIX}*"
    return StaleCacheConfig.from_mapping(_merge(data, overrides), source)


def read_file(path: Path) -> dict[str, Any]:
    """Parse a configuration file by its suffix; a clear error when it cannot be read."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - Python 3.10
                import tomli as tomllib
            data: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError(
                    f"{path}: YAML needs PyYAML: pip install 'adcp-stale-cache[yaml]'"
                ) from None
            data = yaml.safe_load(text) or {}
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"{path}: unknown format {suffix!r} (use .toml, .yaml or .json)")
    except ConfigError:
        raise
    except Exception as exc:  # each parser has its own error type; the message says where
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{path}: not valid {suffix[1:].upper()}: {detail}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings at the top level")
    return data


def env_overrides(data: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``ADCP_STALE_CACHE_*`` variables as a nested mapping (surface names must exist)."""
    result: dict[str, Any] = {}
    for variable, value in sorted(environ.items()):
        if not variable.startswith(ENV_PREFIX) or variable == ENV_FILE:
            continue
        parts = [p.lower() for p in variable[len(ENV_PREFIX) :].split("__")]
        if parts[0] in ("surfaces", "upstreams") and len(parts) == 3:
            parts[1] = _known_name(parts[1], data.get(parts[0]) or {}, parts[0], variable)
            model: type[BaseModel] = SurfacePolicy if parts[0] == "surfaces" else Upstream
        elif parts[0] == "defaults" and len(parts) == 2:
            model = SurfacePolicy
        elif parts[0] in ("store", "breaker") and len(parts) == 2:
            model = StoreSettings if parts[0] == "store" else BreakerSettings
        elif len(parts) == 1 and parts[0] in StaleCacheConfig.model_fields:
            model = StaleCacheConfig
        else:
            raise ConfigError(f"{variable}: not a setting (see the configuration reference)")
        field = model.model_fields.get(parts[-1])
        if field is None:
            raise ConfigError(f"{variable}: {model.__name__} has no field {parts[-1]!r}")
        target = result
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        if not value.strip():
            # A slip (an unset CI secret), never "none": an empty stale_on would end stale serving.
            raise ConfigError(f"{variable}: empty (unset it to keep the default)")
        target[parts[-1]] = _env_value(value, field.annotation)
    return result


def _known_name(upper: str, tables: Mapping[str, Any], kind: str, variable: str) -> str:
    """The surface or upstream an env var means (env names are upper case, '-' as '_')."""
    singular = kind[:-1]
    matches = [str(name) for name in tables if name.lower().replace("-", "_") == upper]
    if len(matches) > 1:
        raise ConfigError(
            f"{variable}: ambiguous: {singular}s {' and '.join(map(repr, matches))} have "
            "the same variable name (rename one)"
        )
    if matches:
        return matches[0]
    known = ", ".join(tables) or "none"
    raise ConfigError(f"{variable}: unknown {singular} {upper!r} (known: {known})")


def _env_value(value: str, annotation: Any) -> Any:
    """Strings for pydantic to coerce; comma-separated lists for sequence fields."""
    if getattr(annotation, "__origin__", None) in (tuple, frozenset, list, set):
        return [item.strip() for item in value.split(",") if item.strip()]
    if value.strip().lower() in ("none", "null") and "None" in repr(annotation):
        return None
    return value


def _store_from_url(url: str, source: str) -> dict[str, Any]:
    """``store = "sqlite:///path"``, ``"redis://..."`` or ``"memory://"`` as a store table."""
    scheme, _, rest = url.partition("://")
    if scheme == "sqlite" and rest.startswith("/") and len(rest) > 1:
        return {"file_path": rest[1:] if rest.startswith("//") else rest}
    if scheme in SCHEMES:  # one server, a Cluster, Sentinel: the redis_url forms
        return {"kind": "tiered", "redis_url": url}
    if scheme == "memory" and not rest:
        return {}
    raise ConfigError(
        f"{source}: store: {redacted(url)!r} is not a store URL (sqlite:///path, "
        "redis://host:port/db, redis+cluster://host:port,..., "
        "redis+sentinel://host:port,.../service, memory://)"
    )


def _as_table(value: Any, where: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {where}: expected a table, got {type(value).__name__}")
    return dict(value)


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _one_line(exc: ValidationError, source: str, prefix: tuple[Any, ...] = ()) -> ConfigError:
    """Pydantic's errors as one line: ``source: a.b.c: message (got value)``."""
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(p) for p in (*prefix, *error["loc"]))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "not a setting (a typo?)"
        got = error.get("input")
        if isinstance(got, str) and ("://" in got or "@" in got):
            got = redacted(got)  # a URL's password never reaches an error line
        shown = "" if isinstance(got, (dict, list)) or "got" in message else f" (got {got!r})"
        parts.append(f"{location}: {message}{shown}" if location else message)
    return ConfigError(f"{source}: " + "; ".join(parts))
