"""HTTP's caching contract read from response headers, with no I/O (RFC 9111, RFC 5861)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .entry import Terms
from .failures import Failure, delta_seconds


@dataclass(frozen=True, slots=True)
class Directives:
    """What one response says about its own caching (None: nothing). ``max_age`` prefers
    ``s-maxage`` (a shared cache); ``stale_at_source`` is the failure a sub-agent's own
    stale serve named, ``age_known`` False when it gave no readable age."""

    max_age: float | None = None
    no_cache: bool = False
    no_store: bool = False
    private: bool = False
    stale_if_error: float | None = None
    stale_while_revalidate: float | None = None
    age: float = 0.0
    vary: tuple[str, ...] = ()
    stale_at_source: Failure | None = None
    age_known: bool = True

    @property
    def vary_any(self) -> bool:
        """``Vary: *``."""
        return "*" in self.vary

    def storable(self, shared: bool) -> bool:
        """False for ``no-store``, ``Vary: *``, or ``private`` when ``shared`` (RFC 9111 3.5)."""
        return not (self.no_store or self.vary_any or (self.private and shared))

    def terms(self) -> Terms | None:
        """The entry's terms (None when these say nothing of them)."""
        max_age = 0.0 if self.no_cache else self.max_age
        said = (max_age, self.stale_if_error, self.stale_while_revalidate)
        if all(value is None for value in said) and not self.age:
            return None
        return Terms(max_age, self.stale_if_error, self.stale_while_revalidate, self.age)


def parse(headers: Mapping[str, str]) -> Directives:
    """The directives of a response's ``Cache-Control``, ``Age`` and ``Vary`` headers
    (unknown ones ignored, a malformed number as if absent: RFC 9111 4.2.1)."""
    values: dict[str, str | None] = {}
    for part in headers.get("cache-control", "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            values.setdefault(name.lower(), value.strip().strip('"') if value else None)
    max_age = delta_seconds(values.get("s-maxage")) if "s-maxage" in values else None
    if max_age is None:
        max_age = delta_seconds(values.get("max-age"))
    return Directives(
        max_age=max_age,
        no_cache="no-cache" in values,
        no_store="no-store" in values,
        private="private" in values,
        stale_if_error=delta_seconds(values.get("stale-if-error")),
        stale_while_revalidate=delta_seconds(values.get("stale-while-revalidate")),
        age=delta_seconds(headers.get("age")) or 0.0,
        vary=vary_of(headers),
    )


def vary_of(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The request headers a response's ``Vary`` names, lower-cased (``*`` as it is)."""
    return tuple(
        name.strip().lower() for name in headers.get("vary", "").split(",") if name.strip()
    )
