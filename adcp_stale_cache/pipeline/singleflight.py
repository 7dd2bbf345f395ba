"""One in-flight upstream call per key, shielded from any one caller's cancellation."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from .call_loop import CallLoop

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Coalesce concurrent calls for the same key into one, per event loop; a cancelled caller
    stops waiting while the call goes on for the others."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Hashable, _Flight[T]]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # a new loop's first flight, from any thread

    def __len__(self) -> int:
        return sum(len(flights) for flights in list(self._by_loop.values()))

    def flights(self) -> dict[Hashable, asyncio.Task[None]]:
        """The flights of the running loop, by key: each one's task (cancelling it ends the
        flight, its callers cancelled; it settles them, and itself returns None)."""
        return {key: flight.task for key, flight in self._flights().items()}

    def _flights(self) -> dict[Hashable, _Flight[T]]:
        loop = asyncio.get_running_loop()
        flights = self._by_loop.get(loop)
        if flights is None:
            with self._lock:
                flights = self._by_loop.setdefault(loop, {})
        return flights

    async def run(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        """Join the flight for ``key``, starting it with ``call`` if there is none."""
        flights = self._flights()
        flight = flights.get(key)
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if flight is None:
            flight = _Flight(flights, key, waiter)
            flight.start(call)
        else:
            flight.waiters[waiter] = None
        try:
            return await waiter
        except asyncio.CancelledError:  # this caller's future alone: the call goes on
            flight.waiters.pop(waiter, None)
            raise


class _Flight(Generic[T]):
    """One call and the futures of the callers waiting on it. It settles each itself as it
    ends: a done-callback would wake them a turn of the loop later."""

    __slots__ = ("flights", "key", "task", "waiters")

    task: asyncio.Task[None]

    def __init__(
        self, flights: dict[Hashable, _Flight[T]], key: Hashable, first: asyncio.Future[T]
    ) -> None:
        self.flights, self.key = flights, key
        self.waiters: dict[asyncio.Future[T], None] = {first: None}  # a leaver's goes at once
        flights[key] = self

    def start(self, call: Callable[[], Awaitable[T]]) -> None:
        """Start the call; joinable already (an eager task may end it before this returns)."""
        self.task = asyncio.ensure_future(self._fly(call))
        self.task.add_done_callback(self._ended)

    async def _fly(self, call: Callable[[], Awaitable[T]]) -> None:
        try:
            result = await call()
        except GeneratorExit:  # closed unfinished, its loop gone: nothing left to settle
            raise
        except BaseException as exc:
            self._land()
            if isinstance(exc, StopIteration):  # no future takes it: as a coroutine says it
                exc = RuntimeError("the flight's call raised StopIteration")
            for waiter in self._waiting():
                if isinstance(exc, asyncio.CancelledError):  # only its loop ending cancels it
                    waiter.cancel()
                else:
                    waiter.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            self._settled()
            return
        self._land()
        for waiter in self._waiting():
            waiter.set_result(result)
        self._settled()

    def _settled(self) -> None:
        """Every caller settled, the task ending with nothing to retrieve: ``_ended`` would
        only cost the loop a callback."""
        task = asyncio.current_task()
        if task is not None:
            task.remove_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Retrieve what the task raised past its callers; cancel the callers of a task
        cancelled before it started, which never ran to settle them."""
        if not task.cancelled():
            task.exception()
        self._land()
        for waiter in self._waiting():
            waiter.cancel()

    def _waiting(self) -> list[asyncio.Future[T]]:
        waiting = [waiter for waiter in self.waiters if not waiter.done()]
        self.waiters.clear()
        return waiting

    def _land(self) -> None:
        if self.flights.get(self.key) is self:
            del self.flights[self.key]


async def call_with_deadline(
    call: Callable[[], Awaitable[T]], timeout: float, on: CallLoop | None = None
) -> T:
    """Await ``call()`` for at most ``timeout`` seconds, then raise :class:`TimeoutError`.

    On timeout the call is cancelled but not awaited: a client's cleanup against a frozen
    upstream must not hold the answer. With ``on``, the call runs on that loop.
    """
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    # asyncio.wait's own waiter and timer, without its sets and second coroutine: every
    # upstream call waits here.
    if on is not None and not on.runs_here():
        task: asyncio.Future[T] = asyncio.wrap_future(on.submit(call))
    else:
        task = asyncio.ensure_future(_waking(call, wake))
    task.add_done_callback(wake)  # (a task cancelled before it started never ran _waking)
    timer = loop.call_later(timeout, wake)
    try:
        await waiter
    except asyncio.CancelledError:
        _abandon(task)
        raise
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
    if not task.done():
        _abandon(task)
        raise TimeoutError(f"no answer within {timeout:g}s")
    if task.cancelled():
        # The client gave up on its own: a cancellation would look like the callers' own.
        raise ConnectionError("upstream call was cancelled by its client")
    return task.result()


async def _waking(call: Callable[[], Awaitable[T]], wake: Callable[[object], None]) -> T:
    """``call()``, waking its waiter as it ends: a done-callback would take a turn more (and
    the one kept for a task cancelled before it started goes, woken already)."""
    try:
        return await call()
    finally:
        wake(None)
        task = asyncio.current_task()
        if task is not None:
            task.remove_done_callback(wake)


_abandoned: set[asyncio.Future[Any]] = set()


def _abandon(task: asyncio.Future[T]) -> None:
    task.cancel()
    _abandoned.add(task)  # keep a reference until it winds down

    def _forget(done: asyncio.Future[T]) -> None:
        _abandoned.discard(done)
        if not done.cancelled():
            done.exception()

    task.add_done_callback(_forget)
