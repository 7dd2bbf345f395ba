"""A request's state, split by owner, and how the cache finds the current request's."""

from __future__ import annotations

import contextvars
import functools
import logging
import math
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from ..core.advisory import AdcpError
from ..core.callables import awaited, is_async
from ..core.policy import SurfacePolicy
from .context import PIN_FIELDS as PIN_FIELDS  # (their home was here: importable still)
from .context import UNREAD as UNREAD
from .context import RequestContext, request_fields

logger = logging.getLogger("adcp_stale_cache")


@dataclass(frozen=True, slots=True)
class Composed:
    """One entry a conditional answer read (not stored: None, 0; not fresh: -inf)."""

    data: bytes
    store_key: str | None = None
    stored_at: float = 0.0
    fresh_until: float = float("-inf")


class AdvisoryLost(RuntimeError):
    """Raised with ``UpstreamCache(strict_advisories=True)`` when an entry would be served
    stale with no request collector to carry its advisory (see :func:`carry_context`)."""


class Trace:
    """What was served in one scope: a request, or a flight."""

    # Class defaults, no __init__: a trace is made on its first write (see traced).
    compositions: list[Composition] | None = None  # open: conditional answers being composed
    labels: set[str] | None = None  # a flight's, which its answer carries too
    #: Wall clock of the oldest data a flight read: the answer it stores is as old.
    read_since: float = math.inf
    #: A served value held a ``context``: the answer's must be checked to be its own.
    served_context: bool = False

    @classmethod
    def of_flight(cls) -> Trace:
        """A flight's trace: it gathers the labels its call reads."""
        trace = cls()
        trace.labels = set()
        return trace

    def read(self, labels: Iterable[str], read_at_source: float | None) -> None:
        """A flight read an entry with ``labels``, read at its source then (None: not stored)."""
        if self.labels is not None:
            self.labels.update(labels)
            if read_at_source is not None and read_at_source < self.read_since:
                self.read_since = read_at_source

    def composed(self, part: Composed, labels: tuple[str, ...]) -> None:
        """An entry read while conditional answers are composed: a part of the ones the
        reading context may compose (see :meth:`_composing`)."""
        for composition in self._composing():
            composition.parts.append(part)
            composition.labels.update(labels)

    def _composing(self) -> list[Composition]:
        """The compositions of this trace the current context may compose: its own, else every
        one open. A context naming none open (a task or thread started before, beside, or by
        one composed already, or given the collector by hand) may be reading for any: counted
        in each, a scope only widens and a token only moves more, where counted in none a
        per-caller answer would go out public and a changed one unchanged."""
        own = _composing.get()
        if own is not None and own.trace is self and not own.closed:
            return [own]
        return list(self.compositions or ())

    def open(self, composition: Composition) -> Token[Composition | None]:
        """Start composing ``composition`` in the current task (and the tasks it starts)."""
        if self.compositions is None:
            self.compositions = []
        self.compositions.append(composition)
        return _composing.set(composition)

    def close(self, composition: Composition, token: Token[Composition | None]) -> None:
        """``composition`` is composed: the one it was composed within holds its parts too."""
        _composing.reset(token)
        composition.closed = True
        if self.compositions is not None:
            self.compositions.remove(composition)
        for enclosing in self._composing():
            held = {id(part) for part in enclosing.parts}  # read by a thread: held already
            enclosing.parts.extend(part for part in composition.parts if id(part) not in held)
            enclosing.labels.update(composition.labels)


@dataclass(eq=False, slots=True)
class Composition:
    """A conditional answer being composed (``answer_wholesale``): the entries it read, and
    their labels. Concurrent ones in one request, under ``asyncio.gather``, keep their own."""

    trace: Trace
    parts: list[Composed] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)
    closed: bool = False  # composed: a task it started, reading on, reads for the others


#: The composition the current task reads into: a task's own, whatever its siblings compose.
_composing: ContextVar[Composition | None] = ContextVar("adcp_composing", default=None)


class _Untraced(Trace):
    """The trace of a collector nothing was traced in yet: shared, so never written."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("the shared blank trace: write to collector.traced()")


#: Every collector's trace until its first write: most requests never write one.
UNTRACED: Trace = _Untraced()


#: Reports an advisory's fate once its answer is written: None if carried, else why not.
Settle = Callable[[tuple[str, str] | None], None]


class AdvisoryCollector:
    """Advisories of one request, one per upstream (the oldest wins), with its :attr:`context`
    and :attr:`trace`. ``counted_at_delivery``: each is counted once the deliverer says
    whether the answer carried it (:meth:`delivered`, :meth:`lost`), else when recorded."""

    __slots__ = ("_by_upstream", "closed", "context", "trace", "unsettled")

    def __init__(
        self,
        surface: SurfacePolicy | None = None,
        partition: str | None = None,
        partition_of: Callable[[], str | None] | None = None,
        counted_at_delivery: bool = False,
        context: RequestContext | None = None,  # (positional too: a keyword costs a request)
        trace: Trace | None = None,
    ) -> None:
        self.context = (
            context if context is not None else RequestContext(surface, partition, partition_of)
        )
        self.trace = trace if trace is not None else UNTRACED
        self._by_upstream: dict[Hashable, AdcpError] = {}
        # Fate reports by upstream, until the answer is written; None: counted as recorded.
        self.unsettled: dict[Hashable, Settle | None] | None = {} if counted_at_delivery else None
        self.closed = False  # its request answered (see close)

    @classmethod
    def within(cls, parent: AdvisoryCollector | None) -> AdvisoryCollector:
        """A collector for one upstream flight from ``parent``'s request: its context, and
        advisories (counted by each caller the flight answers) and trace of its own."""
        context = RequestContext(in_flight=True) if parent is None else parent.context.within()
        return cls(counted_at_delivery=True, context=context, trace=Trace.of_flight())

    @property
    def surface(self) -> SurfacePolicy | None:
        """The surface of the request (see :attr:`context`)."""
        return self.context.surface

    @property
    def partition(self) -> str | None:
        """The cache partition of the request's caller (see :attr:`context`)."""
        return self.context.partition

    def traced(self) -> Trace:
        """The collector's own :attr:`trace`, to write to: made on first use."""
        if self.trace is UNTRACED:
            with _SETTLING:  # two threads of one request make one trace
                if self.trace is UNTRACED:
                    self.trace = Trace()
        return self.trace

    def record(self, upstream: Hashable, advisory: AdcpError, report: Settle | None = None) -> bool:
        """Keep the oldest advisory per ``upstream`` (``Upstream.identity``, or a name); True
        when it is the request's first for it. ``report`` counts its fate once answered."""
        kept = self._by_upstream.get(upstream)
        if kept is None or _age(advisory) > _age(kept):
            self._by_upstream[upstream] = advisory
        if kept is None and self.unsettled is not None:
            with _SETTLING:
                self.unsettled[upstream] = report
            if self.closed:  # its answer is gone: lost as it comes
                self._settle(_AFTER_ANSWER)
        return kept is None

    def __len__(self) -> int:
        return len(self._by_upstream)

    def __bool__(self) -> bool:
        return bool(self._by_upstream)

    def recorded(self) -> list[tuple[Hashable, AdcpError]]:
        """(upstream, advisory) pairs as recorded, to record again into another collector."""
        return list(self._by_upstream.items())

    def advisories(self) -> list[AdcpError]:
        """The recorded advisories, in the order their upstreams first went stale."""
        return list(self._by_upstream.values())

    def clear(self) -> None:
        """Forget what was recorded (once delivered by another path)."""
        self.delivered()
        self._by_upstream.clear()

    def delivered(self) -> None:
        """The answer carries every advisory recorded so far: count them delivered."""
        self._settle(None)

    def lost(self, reason: str, detail: str) -> None:
        """The answer goes without the advisories not yet delivered: count them lost, and say
        why (``reason`` in a word, ``detail`` in a sentence; never a host or credential)."""
        self._settle((reason, detail))

    def close(self) -> None:
        """The request is answered: what is recorded from now on counts as lost."""
        self.closed = True
        if self.unsettled:
            self._settle(_AFTER_ANSWER)

    def _settle(self, fate: tuple[str, str] | None) -> None:
        if not self.unsettled:
            return
        # A worker thread may record while the loop settles: swap, never iterate a growing dict.
        with _SETTLING:
            unsettled, self.unsettled = self.unsettled, {}
        for upstream, report in unsettled.items():
            if report is not None:
                report(fate)
            elif fate is not None:  # recorded by hand, not by a cache: said all the same
                surface = self.context.surface
                name = surface.name if surface is not None else "?"
                say_lost(*stated(self._by_upstream[upstream], name), fate)

    def errors(self) -> list[dict[str, Any]]:
        """The recorded advisories in wire form, ready for a payload's ``errors[]``."""
        return [advisory.to_dict() for advisory in self._by_upstream.values()]


#: Guards the reports awaiting settlement; rare (stale serves), so one lock serves all.
_SETTLING = threading.Lock()
_AFTER_ANSWER = ("after_answer", "recorded after its request was answered (a task outliving it)")


def stated(advisory: AdcpError, surface: str) -> tuple[str, str, int, str]:
    """What a ``STALE_RESPONSE`` says of its stale serve: upstream, ``surface``, age, code."""
    details = advisory.details or {}
    upstream = (details.get("upstream") or {}).get("name", "?")
    code = (details.get("original_error") or {}).get("code", "REVALIDATING")
    return upstream, surface, _age(advisory), code


def say_lost(upstream: str, surface: str, age: int, code: str, fate: tuple[str, str]) -> None:
    """Log a stale serve no answer told the buyer of, and why. Never a host or a credential."""
    logger.warning(
        "advisory_lost upstream=%s surface=%s age_seconds=%d code=%s reason=%s: served stale, "
        "and no STALE_RESPONSE told the buyer: %s",
        upstream,
        surface,
        age,
        code,
        *fate,
    )


def _age(advisory: AdcpError) -> int:
    return int((advisory.details or {}).get("cache_age_seconds", 0))


_current: ContextVar[AdvisoryCollector | None] = ContextVar(
    "adcp_stale_cache_collector", default=None
)
_flight: ContextVar[AdvisoryCollector | None] = ContextVar(
    "adcp_stale_cache_flight_collector", default=None
)


#: The ContextVar's own set and reset: a request passing through pays no call of ours.
enter_request = _current.set
leave_request = _current.reset
#: The same inside an upstream flight (the cache's own task): it comes before the request's.
enter_flight = _flight.set
leave_flight = _flight.reset

#: Where the middleware keeps a request's collector in ``scope["state"]`` (``request.state``).
STATE_KEY = "adcp_stale_cache"


def current_collector() -> AdvisoryCollector | None:
    """The collector of the request being handled, if any (under an ``mcp`` 1.x session,
    whose calls share one context, the SDK's request context names each call's request)."""
    found = _flight.get()  # an empty collector is falsy: compare with None
    if found is None and _MCP_V1_SERVER in _modules:  # only if the app imported it
        found = _from_mcp_v1_request()
    return found if found is not None else _current.get()


_MCP_V1_SERVER = "mcp.server.lowlevel.server"
_modules = sys.modules  # (a dict lookup of a name, cheaper than sys.modules.get per fetch)


def _from_mcp_v1_request() -> AdvisoryCollector | None:
    server = _modules.get(_MCP_V1_SERVER)
    request_ctx = getattr(server, "request_ctx", None)
    if request_ctx is None:
        return None
    scope = getattr(getattr(request_ctx.get(None), "request", None), "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    collector = state.get(STATE_KEY) if isinstance(state, dict) else None
    return collector if isinstance(collector, AdvisoryCollector) else None


class Collecting:
    """The block :func:`collect_advisories` opens: a ``with`` or an ``async with`` alike."""

    __slots__ = ("_partition", "_request", "_surface", "_token", "collector")

    def __init__(
        self,
        surface: SurfacePolicy | None,
        partition: str | None,
        request: object = None,
        *,
        counted_at_delivery: bool = False,
        context: RequestContext | None = None,
    ) -> None:
        self._surface, self._partition, self._request = surface, partition, request
        if context is None:
            context = RequestContext(surface, partition, request_field=request_fields(request))
        self.collector = AdvisoryCollector(counted_at_delivery=counted_at_delivery, context=context)
        self._token: contextvars.Token[AdvisoryCollector | None] | None = None

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``fn`` (sync or async): each call gets a collector of its own."""
        surface, partition, request = self._surface, self._partition, self._request
        if is_async(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with Collecting(surface, partition, request):
                    return await awaited(fn, *args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with Collecting(surface, partition, request):
                return fn(*args, **kwargs)

        return run

    def __enter__(self) -> AdvisoryCollector:
        if self._token is not None:
            raise RuntimeError("collect_advisories() blocks are entered once")
        self._token = _current.set(self.collector)
        return self.collector

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
        if exc_info and exc_info[0] is not None:  # the block raised: no answer carries them
            self.collector.lost("is_error", "the tool raised: its answer is an error")
            self.collector.close()

    async def __aenter__(self) -> AdvisoryCollector:
        # Awaited in the caller's own task: the context variable is set in its context.
        return self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


def collect_advisories(
    surface: SurfacePolicy | None = None, partition: str | None = None, request: object = None
) -> Collecting:
    """Open a collector for a ``with`` or ``async with`` block where no middleware runs (a
    worker, a test, an SDK hook). ``request``, the AdCP request answered (a mapping or a
    pydantic model), pins the release ``varies_by_version`` surfaces key by."""
    return Collecting(surface, partition, request)


@contextmanager
def use_collector(collector: AdvisoryCollector | None) -> Iterator[AdvisoryCollector | None]:
    """Make ``collector`` (a request's ``current_collector()``) the current one inside the
    block: carry it into a worker thread or a new event loop by hand. What is read in the
    block counts in every conditional answer the request is composing then
    (``carry_context`` keeps to the one the caller composes)."""
    token = _current.set(collector)
    try:
        yield collector
    finally:
        _current.reset(token)


P = ParamSpec("P")
R = TypeVar("R")


def carry_context(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, run in a copy of the current context: the request's collector follows it into
    a worker thread (``executor.submit(carry_context(asyncio.run), coro)``)."""
    context = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return context.run(fn, *args, **kwargs)

    return run
