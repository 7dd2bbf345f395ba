"""Real uvicorn servers on 127.0.0.1, in a thread of the test process."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from adcp_stale_cache.demo.processes import App, free_port

#: How long any server the tests start may take to listen: a bound for a start that fails,
#: never a sleep. Measured cold on this 2-core machine kept busy (load 6 to 9): a fastmcp
#: creative agent's process 29 to 32 s, the SDK sellers 188 s (importing ``adcp`` alone
#: took 24 to 36 s per process); twice the worst, rounded.
START_SECONDS = 400.0
#: How long a stopping server or process may take before it is killed.
STOP_SECONDS = 10.0


@contextlib.contextmanager
def serve(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` on loopback (a free port by default); yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(STOP_SECONDS)


@contextlib.contextmanager
def inventory_service() -> Iterator[App]:
    """The demo's inventory service on a free loopback port, started and listening."""
    app = App("inventory-service", free_port(), quiet=True).start()
    try:
        yield app.wait(START_SECONDS)
    finally:
        app.stop()


def reap(process: subprocess.Popen[bytes], stop: int = signal.SIGTERM) -> None:
    """Stop ``process`` (``stop``, then SIGKILL past :data:`STOP_SECONDS`) and reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(stop)
        try:
            process.wait(STOP_SECONDS)
            return
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(STOP_SECONDS)
