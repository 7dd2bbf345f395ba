"""``SingleFlight``: one call per key however many callers join, each caller woken the turn
after it ends, a caller that leaves never cancelling it for the others."""

from __future__ import annotations

import asyncio
import gc
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


async def test_a_failure_reaches_every_caller_and_none_is_left_unretrieved() -> None:
    flight: SingleFlight[str] = SingleFlight()
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        raise ConnectionRefusedError("refused")

    try:
        callers = [asyncio.ensure_future(flight.run("k", call)) for _ in range(3)]
        alone = asyncio.ensure_future(flight.run("left", call))
        await asyncio.sleep(0)
        alone.cancel()  # its flight fails with no caller left to hear it
        release.set()
        outcomes = await asyncio.gather(*callers, return_exceptions=True)
        assert all(isinstance(outcome, ConnectionRefusedError) for outcome in outcomes)
        for _ in range(3):
            await asyncio.sleep(0)
        del callers, outcomes, alone
        gc.collect()
        assert reported == []  # no "exception was never retrieved"
    finally:
        loop.set_exception_handler(None)


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
