"""Blocking upstream calls from sync code: the fetch runs on the library's call loop, the call
in its upstream's :class:`Lane` of daemon threads, so a frozen upstream holds only its own."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from ..core.policy import Upstream
from .call_loop import CallLoop

T = TypeVar("T")
P = ParamSpec("P")

#: Default ``UpstreamCache(blocking_threads=)``.
DEFAULT_BLOCKING_THREADS = 8


#: Set while a breaker's probe runs (see :func:`as_probe`): its lane gives it a thread.
_probing: contextvars.ContextVar[bool] = contextvars.ContextVar("probing", default=False)


def as_probe(refresh: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """``refresh`` run as a breaker's probe: its blocking call gets a thread at once, even when
    abandoned calls hold every one, so a recovered upstream is asked within one deadline."""

    @functools.wraps(refresh)
    async def probe(*args: P.args, **kwargs: P.kwargs) -> T:
        marked = _probing.set(True)  # the flight's own task: its calls only
        try:
            return await refresh(*args, **kwargs)
        finally:
            _probing.reset(marked)

    return probe


@dataclass(slots=True, eq=False)  # one call is itself only (a queue's remove)
class _Work(Generic[T]):
    call: Callable[[], T]
    context: contextvars.Context
    future: concurrent.futures.Future[T]
    probe: bool
    abandoned: bool = False  # its caller left at its deadline while it ran

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # abandoned while it waited for a thread
        try:
            result = self.context.run(self.call)
        except BaseException as exc:  # as ThreadPoolExecutor does: the caller sees it
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class Lane:
    """At most ``threads`` blocking calls at once that a caller waits for, the others waiting
    in order; abandoned calls stop counting (up to ``threads`` more threads). Not a
    ``ThreadPoolExecutor``: one thread stuck there would hold the interpreter's exit."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads, self.name = threads, name
        self.running = 0  # threads serving this lane
        self.stranded = 0  # of them, those running a call its caller abandoned
        self._waiting: collections.deque[_Work[Any]] = collections.deque()
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``call()`` in this lane, in a copy of the current context."""
        return self._submit(call).future

    def calling(self, fn: Callable[P, T]) -> Callable[P, Awaitable[T]]:
        """``fn`` as an async function run in this lane (cancelling it frees its place)."""

        def call(*args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
            work = self._submit(functools.partial(fn, *args, **kwargs))
            waited = asyncio.wrap_future(work.future)
            waited.add_done_callback(functools.partial(self._abandoned, work))
            return waited

        return call

    def _submit(self, call: Callable[[], T]) -> _Work[T]:
        context = contextvars.copy_context()
        context.run(_probing.set, False)  # what the call fetches itself is no probe
        work = _Work(call, context, concurrent.futures.Future(), _probing.get())
        with self._lock:
            # Waiting calls take the room abandoned ones made first (their order is kept).
            starting = self._take_waiting()
            now = work.probe or (not self._waiting and self._has_room())
            self.running += now
        for waiting in starting:
            self._start(waiting, again=True)
        if now:
            self._start(work, again=False)
        else:
            with self._lock:
                self._waiting.append(work)
            work.future.add_done_callback(functools.partial(self._forget, work))
        return work

    def _has_room(self) -> bool:
        return self.running - self.stranded < self.threads and self.running < 2 * self.threads

    def _take_waiting(self) -> list[_Work[Any]]:
        taken = []
        while self._waiting and self._has_room():
            taken.append(self._waiting.popleft())
            self.running += 1
        return taken

    def _start(self, work: _Work[Any], *, again: bool) -> None:
        try:
            threading.Thread(target=self._serve, args=(work,), name=self.name, daemon=True).start()
        except BaseException:  # no thread to be had (a container's pids.max): none runs
            with self._lock:
                self.running -= 1
                if again:  # it waits on, for a thread to free up
                    self._waiting.appendleft(work)
            if not again:
                raise

    def _serve(self, work: _Work[Any] | None) -> None:
        while work is not None:
            work.run()
            with self._lock:
                self.stranded -= work.abandoned
                # A thread a probe or a stranded call added ends once the lane is full again.
                full = self.running - self.stranded > self.threads
                work = self._waiting.popleft() if self._waiting and not full else None
                if work is None:
                    self.running -= 1

    def _abandoned(self, work: _Work[Any], waited: asyncio.Future[Any]) -> None:
        if waited.cancelled():
            with self._lock:
                if work.future.running() and not work.abandoned:  # (not if it returned)
                    work.abandoned = True
                    self.stranded += 1

    def _forget(self, work: _Work[Any], future: concurrent.futures.Future[Any]) -> None:
        # Now, not when a thread frees: a lane frozen for an hour would keep every call.
        if future.cancelled():
            with self._lock, contextlib.suppress(ValueError):  # a thread took it: it skips it
                self._waiting.remove(work)


class Lanes:
    """One :class:`Lane` of ``threads`` per upstream identity."""

    def __init__(self, threads: int = DEFAULT_BLOCKING_THREADS) -> None:
        if threads < 1:
            raise ValueError("blocking_threads must be at least 1")
        self.threads = threads
        self._lanes: dict[tuple[str, str | None], Lane] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def of(self, upstream: Upstream) -> Lane:
        """The lane of ``upstream``."""
        lane = self._lanes.get(upstream.identity)
        if lane is None or self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():  # a fork's child: the parent's threads are not here
                    self._lanes, self._pid = {}, os.getpid()
                lane = self._lanes.get(upstream.identity)
                if lane is None:
                    name = f"adcp-stale-cache-blocking:{upstream.name}"
                    lane = self._lanes[upstream.identity] = Lane(self.threads, name)
        return lane


def wait_for(pipeline: Callable[[], Awaitable[T]], on: CallLoop) -> T:
    """Run ``pipeline()`` on ``on`` in a copy of this context, blocking until it answers."""
    if on.runs_here():
        raise RuntimeError("fetch_blocking on the call loop's own thread would wait on itself")
    future = on.submit(pipeline)
    try:
        return future.result()
    finally:
        future.cancel()  # done: nothing; interrupted (KeyboardInterrupt): the pipeline stops
