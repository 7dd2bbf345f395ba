"""``call_with_deadline``, the wait every upstream call goes through: an answer, a timeout
that abandons the call (its cleanup never holds the answer), a caller that leaves, a client
that cancels its own call. Each leaves no timer on the loop and no callback on the call."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from adcp_stale_cache.core.callables import bounded
from adcp_stale_cache.pipeline import singleflight
from adcp_stale_cache.pipeline.singleflight import call_with_deadline


def timers() -> int:
    """Timers still due on the running loop (a cancelled one no longer counts)."""
    loop: Any = asyncio.get_running_loop()
    return sum(1 for handle in loop._scheduled if not handle.cancelled())


async def test_an_answer_in_time_leaves_no_timer_and_no_callback() -> None:
    started: list[asyncio.Future[Any]] = []

    async def call() -> str:
        task = asyncio.current_task()
        assert task is not None
        started.append(task)
        await asyncio.sleep(0)
        return "answer"

    before = timers()
    assert await call_with_deadline(call, 5.0) == "answer"
    assert timers() == before
    assert started[0].done() and not started[0]._callbacks  # type: ignore[attr-defined]


async def test_a_timeout_abandons_the_call_without_awaiting_its_cleanup() -> None:
    cleaned = asyncio.Event()
    release = asyncio.Event()

    async def frozen() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await release.wait()  # a client's cleanup against a frozen upstream
            cleaned.set()

    loop = asyncio.get_running_loop()
    before, started = timers(), loop.time()
    with pytest.raises(TimeoutError, match=r"no answer within 0\.05s"):
        await call_with_deadline(frozen, 0.05)
    assert loop.time() - started < 1.0  # the cleanup did not hold it
    assert not cleaned.is_set() and len(singleflight._abandoned) >= 1
    release.set()
    await asyncio.wait_for(cleaned.wait(), 5)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not singleflight._abandoned  # forgotten once wound down
    assert timers() == before  # the deadline's timer went with it


async def test_a_caller_that_leaves_cancels_the_call_and_its_timer() -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow() -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    before = timers()
    waiting = asyncio.ensure_future(call_with_deadline(slow, 60.0))
    await entered.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(cancelled.wait(), 5)
    assert timers() == before


async def test_a_call_its_client_cancelled_is_a_connection_error() -> None:
    async def gives_up() -> None:
        raise asyncio.CancelledError

    with pytest.raises(ConnectionError, match="cancelled by its client"):
        await call_with_deadline(gives_up, 5.0)


async def test_a_failing_call_raises_its_own_error() -> None:
    async def refused() -> None:
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        await call_with_deadline(refused, 5.0)


async def test_bounded_awaits_in_the_callers_own_task() -> None:
    caller = asyncio.current_task()
    ran_in: list[object] = []

    async def answer() -> str:
        ran_in.append(asyncio.current_task())
        await asyncio.sleep(0)
        return "answer"

    before = timers()
    assert await bounded(answer(), 5.0) == "answer"
    if sys.version_info >= (3, 11):  # before, asyncio.wait_for's task of its own
        assert ran_in == [caller]
    assert timers() == before  # its timer went with it


async def test_bounded_times_out_and_cancels_what_it_awaited() -> None:
    cancelled = asyncio.Event()

    async def frozen() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(asyncio.TimeoutError):  # TimeoutError itself from 3.11
        await bounded(frozen(), 0.05)
    assert cancelled.is_set()


async def test_a_bounded_caller_cancelled_is_cancelled_not_timed_out() -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        entered.set()
        await asyncio.sleep(3600)

    waiting = asyncio.ensure_future(bounded(slow(), 60.0))
    await entered.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
