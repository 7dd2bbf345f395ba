"""Stage 1 of a fetch, **look up**: which policy applies, whose entry it is, what is held,
and what the decision core says to do with it. Nothing here calls an upstream.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from ..core.decision import Fresh, Refresh, fresh_as_stored, plan
from ..core.entry import Entry
from ..core.keys import cache_key
from ..core.labels import entry_labels
from ..core.policy import SurfacePolicy, Upstream
from ..core.values import Codec, unreadable
from ..stores.memory import MemoryStore
from .collector import AdvisoryCollector, current_collector
from .context import UNREAD
from .settings import Settings

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")

#: The longest text key, how many keys, and how many Upstream objects ``store_key`` remembers.
_MAX_REMEMBERED = 1024
_MAX_REMEMBERED_KEYS = 4096
_MAX_REMEMBERED_UPSTREAMS = 1024
#: Store keys by text key, or by (partition, text key).
_Keys = dict[str | tuple[str, str], str]

#: How far in the future (another host's clock running ahead) a stored time may be.
MAX_CLOCK_SKEW_SECONDS = 300.0


@dataclass(slots=True)
class Lookup:
    """One fetch as looked up: its policy, store key and labels, the entry held, the plan."""

    upstream: Upstream
    key: object
    policy: SurfacePolicy
    shared: bool  # entries shared across callers
    partition: str | None  # the caller partition the entry is keyed under (None: shared)
    store_key: str
    tags: tuple[str, ...]
    collector: AdvisoryCollector | None  # the current request's
    entry: Entry | None  # as held, even unreadable
    step: Fresh | Refresh
    private: bool  # this request's alone: a flight never stores it (see release_of)
    _labels: tuple[str, ...] | None = field(default=None, init=False)

    @property
    def labels(self) -> tuple[str, ...]:
        """What a purge selects the stored entry by (built lazily: a hit never needs them)."""
        if self._labels is None:
            self._labels = entry_labels(self.upstream, self.policy.name, self.partition, self.tags)
        return self._labels

    @property
    def timeout(self) -> float:
        """The upstream call's deadline."""
        return self.upstream.timeout_seconds or self.policy.upstream_timeout_seconds

    @property
    def fallback(self) -> Entry | None:
        """The entry to serve stale if the call fails (None: nothing held, or a fresh hit)."""
        return self.step.fallback if isinstance(self.step, Refresh) else None

    @property
    def previous(self) -> Entry | None:
        """The entry held, even past max-stale (its validators make a call conditional)."""
        return self.step.previous if isinstance(self.step, Refresh) else None

    @property
    def miss(self) -> bool:
        """Whether nothing readable is held."""
        return self.entry is None or self.previous is None

    @property
    def behind(self) -> bool:
        """Whether the entry may be served now, its refresh behind it (stale-while-revalidate)."""
        return (
            isinstance(self.step, Refresh)
            and self.step.fallback is not None
            and (self.step.background or self.policy.stale_while_revalidate)
        )


@dataclass(slots=True)
class Hit(Generic[T]):
    """A fresh hit: what serving it needs, with the entry's ``value`` decoded. Smaller than a
    :class:`Lookup`: every fresh fetch builds one, and serving it reads only these."""

    surface: PolicyFields
    upstream: Upstream
    store_key: str
    collector: AdvisoryCollector | None  # the current request's
    entry: Entry
    value: T

    @property
    def policy(self) -> SurfacePolicy:
        """The policy it was looked up under."""
        return self.surface.policy

    @property
    def step(self) -> Fresh:
        """The plan it followed: serve the entry as it is."""
        return Fresh(self.entry)


@dataclass(frozen=True, slots=True)
class PolicyFields:
    """What a look-up reads of a policy, read once per surface rather than on every fetch
    (a pydantic model's field costs more to read than a plain one): the decision's too."""

    policy: SurfacePolicy
    name: str
    shared: bool  # entries shared across callers
    varies_by_version: bool
    freshness_target_seconds: int
    max_stale_seconds: int
    min_freshness_seconds: int
    max_freshness_seconds: int | None

    @classmethod
    def of(cls, policy: SurfacePolicy, identified: bool) -> PolicyFields:
        """The fields of ``policy``; ``identified`` False for the default policy of a request
        that named no surface."""
        # Only a surface known by name may share entries: a misrouted request keys per caller.
        shared = policy.shared_across_callers and identified
        return cls(
            policy,
            policy.name,
            shared,
            policy.varies_by_version,
            policy.freshness_target_seconds,
            policy.max_stale_seconds,
            policy.min_freshness_seconds,
            policy.max_freshness_seconds,
        )


class Lookups:
    """Looks fetches up in the store, keyed by ``key_of`` (a cache subclass's ``store_key``)."""

    def __init__(
        self,
        settings: Settings,
        key_of: Callable[[Upstream, object, str | None], str] | None = None,
    ) -> None:
        self.store, self.surfaces = settings.store, settings.surfaces
        self.clock, self.keyspace = settings.clock, settings.keyspace
        self.key_of = key_of or self.store_key
        # The memory store read in place, with no coroutine (a subclass's get is awaited).
        self._get_now = self.store.get_now if type(self.store) is MemoryStore else None
        named = self.surfaces.policies
        self._named = {policy.name: PolicyFields.of(policy, True) for policy in named}
        self._default = PolicyFields.of(self.surfaces.default, False)
        # What store_key remembers: keys by what their upstream is made of, and by the
        # Upstream objects that made them (each held with its keys).
        self._by_made_of: dict[tuple[str, str | None, str | None], _Keys] = {}
        self._seen: dict[int, tuple[Upstream, _Keys]] = {}
        self._remembered = 0
        self._warned_default = False
        self._warned_unread = False

    @overload
    async def look_up(
        self,
        upstream: Upstream,
        key: object,
        surface: str | SurfacePolicy | None,
        tags: Iterable[str],
        codec: Codec[T],
    ) -> Hit[T] | Lookup: ...

    @overload
    async def look_up(
        self,
        upstream: Upstream,
        key: object,
        surface: str | SurfacePolicy | None,
        tags: Iterable[str],
        codec: None,
    ) -> Lookup: ...

    async def look_up(
        self,
        upstream: Upstream,
        key: object,
        surface: str | SurfacePolicy | None,
        tags: Iterable[str],
        codec: Codec[T] | None,
    ) -> Hit[T] | Lookup:
        """This fetch looked up: a :class:`Hit` when the entry is fresh and ``codec`` reads it
        (``codec`` None: never a hit, the entry as held, fresh or not)."""
        collector = current_collector()
        fields = self._named.get(surface) if type(surface) is str else None
        if fields is None:
            fields = self.fields(surface, collector)
        policy = fields.policy
        shared = fields.shared
        partition = None if shared or collector is None else collector.context.partition
        private = False
        if fields.varies_by_version:  # an answer shaped for one release is not another's
            release = self.release_of(collector)
            private = release is UNREAD
            key = ("adcp_version", f"unread-{uuid.uuid4()}" if private else release, key)
        store_key = self.key_of(upstream, key, partition)
        # read(), inlined: a hit awaits one coroutine less and reads the clock once.
        try:
            get_now = self._get_now
            entry = await self.store.get(store_key) if get_now is None else get_now(store_key)
        except Exception:
            logger.exception("store_error op=get")
            entry = None
        now = self.clock()
        if entry is not None and (
            entry.tombstone or not (entry.stored_at <= now + MAX_CLOCK_SKEW_SECONDS)
        ):
            entry = _unusable(entry)
        # Most hits are fresh as stored: no plan is built for them (plan decides the rest;
        # such an entry that fails to decode is a miss, as any other).
        if codec is not None and entry is not None and fresh_as_stored(entry, now, fields):
            held: Entry | None = entry
            step: Fresh | Refresh | None = None  # a hit, unless it cannot be read
        else:
            step = plan(entry, now, fields)
            held = step.entry if isinstance(step, Fresh) else None
        if codec is not None and held is not None:
            try:
                value = codec.loads(held.data)  # decode(), inlined
            except Exception as exc:  # a miss: refreshed and overwritten
                unreadable(codec, upstream, exc)
                step = Refresh(fallback=None)  # each its own: a Refresh is not frozen
            else:
                return Hit(fields, upstream, store_key, collector, held, value)
        assert step is not None  # (set above whenever the decode is not tried)
        tags = tags if isinstance(tags, tuple) else tuple(tags)  # as of the call, not later
        return Lookup(
            upstream,
            key,
            policy,
            shared,
            partition,
            store_key,
            tags,
            collector,
            entry,
            step,
            private,
        )

    def release_of(self, collector: AdvisoryCollector | None) -> Any:
        """The release a fetch's entry is keyed by, or ``UNREAD`` when the request's pin could
        not be read (its answer is then its own, never stored)."""
        pinned = None if collector is None else collector.context.pinned_release()
        if pinned is UNREAD and not self._warned_unread:
            self._warned_unread = True
            logger.warning(
                "adcp_version_unread: a surface varies by AdCP release but a "
                "request's pin could not be read (no body read, or too large for "
                "max_peek_bytes): its answers are its own, never stored"
            )
        return pinned

    def store_key(self, upstream: Upstream, key: object, partition: str | None = None) -> str:
        """The store key of ``key`` for ``upstream``, the caller partition and its credentials."""
        # Most fetches: a short text key (text and None only: 1 == True would mix two keys),
        # no credentials. Their keys are remembered by what the upstream is made of, and
        # through the Upstream object that made them (held, so its id stays its own): a
        # pydantic model's field costs more to read than the look-up it keys. Only a frozen
        # Upstream, not a subclass (which may be mutable: its credentials set per tenant).
        if (
            type(key) is not str
            or len(key) > _MAX_REMEMBERED
            or not (partition is None or type(partition) is str)
        ):
            return self._made_key(upstream, key, partition)
        seen = self._seen.get(id(upstream))
        if seen is not None and seen[0] is upstream:
            keys: _Keys | None = seen[1]
        elif type(upstream) is not Upstream:
            return self._made_key(upstream, key, partition)
        else:
            fields = upstream.__dict__  # (one read through pydantic's __getattr__, not four)
            if fields["credentials"] is not None:  # never remembered
                return self._made_key(upstream, key, partition)
            made_of = (fields["name"], fields["url"], fields["url_digest"])
            keys = self._by_made_of.get(made_of)
        remembered = key if partition is None else (partition, key)
        store_key = None if keys is None else keys.get(remembered)
        if store_key is None:
            store_key = self._made_key(upstream, key, partition)
            self._remember(upstream, remembered, store_key)
        return store_key

    def _remember(self, upstream: Upstream, remembered: str | tuple[str, str], key: str) -> None:
        """Remember ``key`` by what ``upstream`` is made of, and through ``upstream`` itself."""
        if self._remembered >= _MAX_REMEMBERED_KEYS:  # bounded: forget them all at once
            self._seen, self._by_made_of, self._remembered = {}, {}, 0
        fields = upstream.__dict__
        made_of = (fields["name"], fields["url"], fields["url_digest"])
        keys = self._by_made_of.setdefault(made_of, {})
        keys[remembered] = key
        self._remembered += 1
        if len(self._seen) >= _MAX_REMEMBERED_UPSTREAMS:
            self._seen = {}
        self._seen[id(upstream)] = (upstream, keys)

    def _made_key(self, upstream: Upstream, key: object, partition: str | None) -> str:
        parts: tuple[object, ...] = (upstream.url, partition, key)
        if upstream.url_digest is not None:  # what the public URL leaves out tells it apart
            parts = (*parts, ("url", upstream.url_digest))
        if upstream.credentials is not None:
            parts = (*parts, ("credentials", upstream.credentials.get_secret_value()))
        return cache_key(self.keyspace, upstream.name, parts)

    def policy(
        self, surface: str | SurfacePolicy | None, collector: AdvisoryCollector | None
    ) -> tuple[SurfacePolicy, bool]:
        """The policy of this call, and whether it was identified (not the default)."""
        if type(surface) is str:  # the common case first, by name (get: the unknown's error)
            return self.surfaces.by_name.get(surface) or self.surfaces.get(surface), True
        if isinstance(surface, SurfacePolicy):
            return surface, True
        if surface is not None:
            return self.surfaces.get(surface), True
        context = collector.context if collector is not None else None
        if context is not None and context.surface is not None:
            return context.surface, True
        if context is not None and not context.in_flight and not self._warned_default:
            self._warned_default = True  # once: a misrouted app would say it on every request
            logger.warning(
                "surface_unknown: a fetch in a request named no surface and the request "
                "matched none (route paths are matched without the app's root_path); the "
                "default policy applies, keyed per caller"
            )
        return self.surfaces.default, False

    def fields(
        self, surface: str | SurfacePolicy | None, collector: AdvisoryCollector | None
    ) -> PolicyFields:
        """The fields of this call's policy (a registered one's are read once)."""
        policy, identified = self.policy(surface, collector)
        if not identified:
            return self._default
        known = self._named.get(policy.name)
        if known is not None and known.policy is policy:
            return known
        return PolicyFields.of(policy, True)

    async def read(self, store_key: str) -> Entry | None:
        """The usable entry under ``store_key``; None when there is none or the store fails
        (a broken store is "no cache", never a failure)."""
        try:
            entry = await self.store.get(store_key)
        except Exception:
            logger.exception("store_error op=get")
            return None
        if entry is not None and (
            entry.tombstone or not (entry.stored_at <= self.clock() + MAX_CLOCK_SKEW_SECONDS)
        ):
            return _unusable(entry)
        return entry


def _unusable(entry: Entry) -> Entry | None:
    """No entry (None) for a hard-purged one, or one whose stored time is NaN, infinite or far
    ahead (it would look fresh forever); the latter logged."""
    if not entry.tombstone:
        logger.warning("unreadable_entry reason=stored_at %r", entry.stored_at)
    return None
