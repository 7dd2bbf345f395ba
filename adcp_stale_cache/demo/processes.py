"""Start the example apps as real processes on loopback (the demo and the tests use this)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

# The kernel may hand a released ephemeral port out twice: apps started together would race.
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, never one this process handed out before."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


# A cold start (no bytecode yet, as uv installs) took over 20 s on a busy 2-core machine.
START_SECONDS = 120.0


def wait_for_port(
    port: int,
    timeout: float = START_SECONDS,
    host: str = "127.0.0.1",
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """Block until something accepts connections on ``host:port``; with ``process``,
    fail as soon as it exits (whatever listens then is not it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{host}:{port}: the app exited ({process.returncode})")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:g}s")


class App:
    """One example app in a process of its own: ``adcp-stale-cache example <app> ...``."""

    def __init__(self, app: str, port: int, *args: str, quiet: bool = False) -> None:
        self.port = port
        self.quiet = quiet
        self.command: Sequence[str] = (
            sys.executable,
            "-m",
            "adcp_stale_cache",
            "example",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The app's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> App:
        """Start the process (use :meth:`wait` before calling it)."""
        stderr = subprocess.DEVNULL if self.quiet else None
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stderr=stderr)
        return self

    def wait(self, timeout: float = START_SECONDS) -> App:
        """Wait until the app listens."""
        wait_for_port(self.port, timeout, process=self.process)
        return self

    def kill(self) -> None:
        """SIGKILL: the upstream disappears, connections are refused."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def freeze(self) -> None:
        """SIGSTOP: the upstream accepts connections but never answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: a frozen upstream answers again."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the process, frozen or not."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
