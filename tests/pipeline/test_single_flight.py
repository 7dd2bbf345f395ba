"""``SingleFlight``: one call per key however many callers join, each caller woken the turn
after it ends, a caller that leaves never cancelling it for the others."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adcp_stale_cache.pipeline.singleflight import SingleFlight, call_with_deadline


async def next_turns(order: list[str], turns: int) -> None:
    """Mark each of the next ``turns`` turns of the loop in ``order``."""
    loop = asyncio.get_running_loop()

    def mark(turn: int) -> None:
        order.append(f"turn {turn}")
        if turn < turns:
            loop.call_soon(mark, turn + 1)

    loop.call_soon(mark, 1)


async def test_every_caller_wakes_the_turn_after_the_call_ends() -> None:
    flight: SingleFlight[str] = SingleFlight()
    order: list[str] = []
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        await next_turns(order, 3)  # marked from the turn after this one ends
        return "answer"

    async def caller(name: str) -> None:
        assert await flight.run("k", call) == "answer"
        order.append(name)

    callers = [asyncio.ensure_future(caller(name)) for name in ("first", "joiner")]
    await asyncio.sleep(0)
    assert len(flight) == 1
    release.set()
    await asyncio.gather(*callers)
    # Woken in the turn after the call's last step ("turn 1": marked in that step, so first);
    # a done-callback between (asyncio.shield's) would wake them after "turn 2".
    assert order[:4] == ["turn 1", "first", "joiner", "turn 2"]


async def test_a_deadline_wakes_its_caller_the_turn_after_the_call_ends() -> None:
    order: list[str] = []

    async def call() -> str:
        await asyncio.sleep(0)
        await next_turns(order, 3)
        return "answer"

    assert await call_with_deadline(call, 5.0) == "answer"
    order.append("caller")
    assert order == ["turn 1", "caller"]  # a done-callback between: after "turn 2"


async def test_one_call_for_every_caller_of_a_key_and_a_new_one_once_it_ended() -> None:
    flight: SingleFlight[int] = SingleFlight()
    calls = 0
    release = asyncio.Event()

    async def call() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    callers = [asyncio.ensure_future(flight.run("k", call)) for _ in range(5)]
    other = asyncio.ensure_future(flight.run("other", call))
    await asyncio.sleep(0)
    release.set()
    assert sorted(await asyncio.gather(*callers, other)) in ([1, 1, 1, 1, 1, 2], [2, 2, 2, 2, 2, 1])
    assert calls == 2 and len(flight) == 0
    assert await flight.run("k", call) == 3  # ended: never joined again


async def test_a_caller_that_leaves_does_not_cancel_the_call_for_the_others() -> None:
    flight: SingleFlight[str] = SingleFlight()
    release = asyncio.Event()
    cancelled = False

    async def call() -> str:
        nonlocal cancelled
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled = True
            raise
        return "answer"

    leaving = asyncio.ensure_future(flight.run("k", call))
    staying = asyncio.ensure_future(flight.run("k", call))
    await asyncio.sleep(0)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    release.set()
    assert await staying == "answer"
    assert not cancelled


@pytest.fixture
async def loop_reports() -> AsyncIterator[list[dict[str, Any]]]:
    """What the running loop's exception handler is told ("exception was never retrieved")."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        yield reported
    finally:
        loop.set_exception_handler(None)


async def collected() -> None:
    """A few turns for done-callbacks, then a collection: an unread exception is told then."""
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()


async def test_a_failure_reaches_every_caller_and_none_is_left_unretrieved(
    loop_reports: list[dict[str, Any]],
) -> None:
    flight: SingleFlight[str] = SingleFlight()
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        raise ConnectionRefusedError("refused")

    callers = [asyncio.ensure_future(flight.run("k", call)) for _ in range(3)]
    alone = asyncio.ensure_future(flight.run("left", call))
    await asyncio.sleep(0)
    alone.cancel()  # its flight fails with no caller left to hear it
    release.set()
    outcomes = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(outcome, ConnectionRefusedError) for outcome in outcomes)
    del callers, outcomes, alone
    await collected()
    assert loop_reports == []  # no "exception was never retrieved"


@pytest.mark.parametrize("started", [True, False], ids=["started", "before it started"])
async def test_a_flight_cancelled_under_its_callers_cancels_them(started: bool) -> None:
    flight: SingleFlight[str] = SingleFlight()

    async def call() -> str:
        await asyncio.sleep(3600)
        return "never"

    callers = [asyncio.ensure_future(flight.run("k", call)) for _ in range(2)]
    for _ in range(2 if started else 1):
        await asyncio.sleep(0)
    for task in flight.flights().values():
        task.cancel()  # as a loop shutting down does
    for caller in callers:
        with pytest.raises(asyncio.CancelledError):
            await caller
    assert len(flight) == 0


class Abort(BaseException):
    """Not an Exception: what a task re-raises past its callers."""


@pytest.mark.parametrize(
    "raised, told",
    [(Abort, Abort), (StopIteration, RuntimeError)],
    ids=["a BaseException", "StopIteration"],
)
async def test_what_no_exception_handler_catches_still_reaches_every_caller(
    raised: type[BaseException], told: type[BaseException], loop_reports: list[dict[str, Any]]
) -> None:
    flight: SingleFlight[str] = SingleFlight()

    def call() -> Any:
        raise raised()  # at once: a future cannot hold a StopIteration, a coroutine says so

    callers = [asyncio.ensure_future(flight.run("k", call)) for _ in range(2)]
    outcomes = await asyncio.gather(*callers, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [told, told]
    del callers, outcomes
    await collected()
    assert loop_reports == []  # the task's own exception retrieved too


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks are Python 3.12's (CI's lanes)")
async def test_a_flight_ended_by_an_eager_task_at_once_answers_every_caller() -> None:
    flight: SingleFlight[str] = SingleFlight()
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined,unused-ignore]

    async def answer() -> str:
        return "answer"  # no await: its task ends as it is made

    async def refused() -> str:
        raise ConnectionRefusedError("refused")

    try:
        assert await asyncio.gather(*(flight.run("k", answer) for _ in range(3))) == ["answer"] * 3
        outcomes = await asyncio.gather(
            *(flight.run("k", refused) for _ in range(3)), return_exceptions=True
        )
        assert [type(outcome) for outcome in outcomes] == [ConnectionRefusedError] * 3
    finally:
        loop.set_task_factory(None)
    assert len(flight) == 0


async def test_callers_that_leave_are_let_go_of_while_the_call_goes_on() -> None:
    flight: SingleFlight[str] = SingleFlight()
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        return "answer"

    staying = asyncio.ensure_future(flight.run("k", call))
    leaving = [asyncio.ensure_future(flight.run("k", call)) for _ in range(100)]
    await asyncio.sleep(0)
    for caller in leaving:
        caller.cancel()
    await asyncio.gather(*leaving, return_exceptions=True)
    assert len(flight._flights()["k"].waiters) == 1  # the one still waiting
    release.set()
    assert await staying == "answer"


async def test_a_deadlines_call_cancelled_before_it_started_answers_at_once() -> None:
    async def call() -> str:
        await asyncio.sleep(0)
        return "never"

    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(call_with_deadline(call, 30.0))
    await asyncio.sleep(0)  # the deadline made its call's task, which has not started
    (task,) = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "_waking"]  # type: ignore[union-attr]
    task.cancel()  # as a shutdown cancelling every task does
    started = loop.time()
    with pytest.raises(ConnectionError):
        await waiting
    assert loop.time() - started < 5.0  # not the deadline's 30 s


def test_a_loop_closed_under_a_flight_leaves_it_quiet() -> None:
    flight: SingleFlight[str] = SingleFlight()
    unraisable: list[Any] = []
    pending: list[asyncio.Future[str]] = []

    async def frozen() -> str:
        await asyncio.sleep(3600)
        return "never"

    async def start() -> None:
        pending.append(asyncio.ensure_future(flight.run("k", frozen)))
        await asyncio.sleep(0.01)

    loop = asyncio.new_event_loop()
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        loop.run_until_complete(start())
        loop.close()  # its tasks never cancelled: closed as they are collected
        pending.clear()
        del loop
        gc.collect()
    finally:
        sys.unraisablehook = hook
    # (asyncio's own "Task was destroyed but it is pending" is logged, not unraisable.)
    assert [str(u.exc_value) for u in unraisable] == []
