"""Work behind an answer (a breaker's probe, a revalidation) finishes whatever the runtime:
``asyncio.run`` per request, a loop per worker thread, one long-lived loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from adcp_stale_cache import (
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.pipeline.breaker import BreakerPolicy

COOLDOWN, DEADLINE = 0.3, 0.5
SETTLED = COOLDOWN + DEADLINE + 0.1  # by then a recovered upstream has been asked again
AGENT = Upstream(name="signals-platform")
Answered = tuple[Any, list[dict[str, Any]]]
Run = Callable[[Callable[[], Coroutine[Any, Any, Answered]]], Answered]


def policy(**update: Any) -> SurfacePolicy:
    return SurfacePolicy(
        name="get_signals", field="signals", freshness_target_seconds=0, max_stale_seconds=3600,
        upstream_timeout_seconds=DEADLINE, shared_across_callers=True,
    ).model_copy(update=update)  # fmt: skip


class Platform:
    """An upstream that can go down and come back, counting its calls."""

    def __init__(self) -> None:
        self.up, self.calls = True, 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(0.01)
        if not self.up:
            raise ConnectionRefusedError
        return {"signals": [self.calls]}


@contextmanager
def loop_per_call() -> Iterator[Run]:
    with concurrent.futures.ThreadPoolExecutor(2) as workers:
        yield lambda request: workers.submit(asyncio.run, request()).result(timeout=10)


@contextmanager
def loop_per_call_closed() -> Iterator[Run]:
    """A new loop per call, closed without asyncio.run's cancelling of what it left."""

    def run(request: Callable[[], Coroutine[Any, Any, Answered]]) -> Answered:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(request())
        finally:
            loop.close()

    with concurrent.futures.ThreadPoolExecutor(2) as workers:
        yield lambda request: workers.submit(run, request).result(timeout=10)


@contextmanager
def loops(count: int) -> Iterator[Run]:
    """``count`` worker threads, each with a loop of its own for as long as it lives."""
    running = [asyncio.new_event_loop() for _ in range(count)]
    threads = [threading.Thread(target=loop.run_forever, daemon=True) for loop in running]
    for thread in threads:
        thread.start()
    turn = iter(range(1_000_000))

    def run(request: Callable[[], Coroutine[Any, Any, Answered]]) -> Answered:
        loop = running[next(turn) % count]
        return asyncio.run_coroutine_threadsafe(request(), loop).result(timeout=10)

    try:
        yield run
    finally:
        for loop, thread in zip(running, threads, strict=True):
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()


RUNTIMES = {
    "asyncio.run per request": loop_per_call,
    "a loop per request, closed": loop_per_call_closed,
    "a loop per worker thread": lambda: loops(2),
    "one long-lived loop": lambda: loops(1),
}


@pytest.mark.parametrize("detached", [True, False], ids=["detached", "on the caller's loop"])
@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_recovered_upstream_is_asked_again_within_cooldown_and_deadline(
    runtime: str, detached: bool
) -> None:
    surface = policy()
    cache = UpstreamCache(
        surfaces=Surfaces.of(surface), detach_calls=detached,
        breaker=BreakerPolicy(failure_threshold=1, cooldown_seconds=COOLDOWN),
    )  # fmt: skip
    platform = Platform()

    async def request() -> Answered:
        with collect_advisories() as advisories:
            value = await cache.fetch(AGENT, "segments", platform, surface=surface)
        return value, advisories.errors()

    with RUNTIMES[runtime]() as run:
        assert run(request)[1] == []  # warm
        platform.up = False
        assert run(request)[1][0]["code"] == "STALE_RESPONSE"
        assert cache.breaker_open(AGENT)
        platform.up, recovered = True, time.monotonic()
        answers: list[tuple[float, Any, Any]] = []
        # Asked until five answers started past the cooldown and the deadline: how many fit
        # in a second depends on the machine's load, not on the cache.
        while sum(at > SETTLED for at, _, _ in answers) < 5 and time.monotonic() < recovered + 60:
            started = time.monotonic()
            answers.append((started - recovered, *run(request)))
            time.sleep(0.05)
    settled = [(at, errors) for at, _, errors in answers if at > SETTLED]
    assert len(settled) >= 5
    assert all(errors == [] for _, errors in settled), settled[0]
    assert not cache.breaker_open(AGENT)


def test_a_revalidation_behind_an_answer_lands_with_a_loop_per_call() -> None:
    surface = policy(stale_while_revalidate=True)
    cache = UpstreamCache(surfaces=Surfaces.of(surface))
    platform = Platform()

    async def request() -> Answered:
        with collect_advisories() as advisories:
            value = await cache.fetch(AGENT, "segments", platform, surface=surface)
        return value, advisories.errors()

    with loop_per_call() as run:
        run(request)
        served = [run(request) for _ in range(4)]
    # The first revalidation behind an answer died with its loop; from then on they run in
    # front of the answer, and each lands.
    assert platform.calls >= 4 and served[-1][1] == []


def test_an_abandoned_detached_call_that_fails_later_logs_no_unretrieved_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    surface = policy(upstream_timeout_seconds=0.1)
    cache = UpstreamCache(surfaces=Surfaces.of(surface), detach_calls=True, breaker=None)
    ended = threading.Event()

    async def dead_agent() -> dict[str, Any]:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # a client cleaning up against the dead agent
        ended.set()
        raise ConnectionResetError

    async def request() -> None:
        with collect_advisories(), pytest.raises(UpstreamUnavailable):
            await cache.fetch(AGENT, "cold", dead_agent, surface=surface)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for _ in range(3):
            asyncio.run(request())
        assert ended.wait(5)
        time.sleep(0.2)
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
