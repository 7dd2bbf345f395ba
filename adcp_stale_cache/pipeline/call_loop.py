"""An event loop of the library's own, in a daemon thread, for upstream calls: one abandoned
at its deadline winds down here, not on the request's loop (``asyncio.run`` would wait for it).
One loop serves the process: calls must not block it (use ``fetch_blocking``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CallLoop:
    """One daemon thread running an event loop, started on first use (again after a fork)."""

    def __init__(self, name: str = "adcp-stale-cache-calls") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or self._pid != os.getpid() or not alive:  # (a fork's child)
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    while True:
                        try:
                            loop.run_forever()  # returns only if stopped: never, here
                            return
                        except BaseException:  # a call's SystemExit or KeyboardInterrupt:
                            continue  # it reached that call's caller; the loop goes on

                self._thread = threading.Thread(target=run, name=self.name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, call: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run ``call()`` on this loop, in a copy of the current context."""

        async def run() -> T:
            task = asyncio.current_task()
            assert task is not None
            task.add_done_callback(_retrieve)  # a caller that abandoned it never will
            return await call()  # called here: whatever it creates belongs to this loop

        return asyncio.run_coroutine_threadsafe(run(), self._running())

    def runs_here(self) -> bool:
        """True on this loop's own thread."""
        return self._thread is threading.current_thread()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


#: The process's one loop for detached calls (every ``UpstreamCache(detach_calls=True)``).
CALLS = CallLoop()
