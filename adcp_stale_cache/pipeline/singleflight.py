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
            asyncio.AbstractEventLoop, dict[Hashable, asyncio.Task[T]]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # a new loop's first flight, from any thread

    def __len__(self) -> int:
        return sum(len(flights) for flights in list(self._by_loop.values()))

    def flights(self) -> dict[Hashable, asyncio.Task[T]]:
        """The flights of the running loop, by key."""
        loop = asyncio.get_running_loop()
        flights = self._by_loop.get(loop)
        if flights is None:
            with self._lock:
                flights = self._by_loop.setdefault(loop, {})
        return flights

    async def run(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        """Join the flight for ``key``, starting it with ``call`` if there is none."""
        flights = self.flights()
        task = flights.get(key)
        if task is None:
            task = asyncio.ensure_future(call())
            flights[key] = task
            task.add_done_callback(lambda done: _land(flights, key, done))
        return await asyncio.shield(task)


def _land(flights: dict[Hashable, asyncio.Task[T]], key: Hashable, task: asyncio.Task[T]) -> None:
    if flights.get(key) is task:
        del flights[key]
    if not task.cancelled():
        task.exception()  # retrieved: no "never retrieved" warning when all callers left


async def call_with_deadline(
    call: Callable[[], Awaitable[T]], timeout: float, on: CallLoop | None = None
) -> T:
    """Await ``call()`` for at most ``timeout`` seconds, then raise :class:`TimeoutError`.

    On timeout the call is cancelled but not awaited: a client's cleanup against a frozen
    upstream must not hold the answer. With ``on``, the call runs on that loop.
    """
    if on is not None and not on.runs_here():
        task: asyncio.Future[T] = asyncio.wrap_future(on.submit(call))
    else:
        task = asyncio.ensure_future(call())
    # asyncio.wait's own waiter, timer and callback, without its sets and second coroutine:
    # every upstream call waits here.
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout, wake)
    task.add_done_callback(wake)
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


_abandoned: set[asyncio.Future[Any]] = set()


def _abandon(task: asyncio.Future[T]) -> None:
    task.cancel()
    _abandoned.add(task)  # keep a reference until it winds down

    def _forget(done: asyncio.Future[T]) -> None:
        _abandoned.discard(done)
        if not done.cancelled():
            done.exception()

    task.add_done_callback(_forget)
