"""A real redis-server on loopback for the tests (CI installs the Debian package)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from adcp_stale_cache.demo.processes import free_port, wait_for_port

from .servers import START_SECONDS


class RedisServer:
    """One redis-server process on 127.0.0.1, no persistence; stop and start it at will."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip(
                "redis-server is not installed (apt-get install redis-server; CI installs it)"
            )
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        try:  # with process=: a server that exited fails the wait (the port may be another's)
            wait_for_port(self.port, START_SECONDS, process=self.process)
        except BaseException:  # the caller gets no server to stop: stop it here
            self.kill()
            raise
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def redis_cli(port: int, *args: str) -> str:
    """What ``redis-cli -p PORT ARGS...`` prints (bounded to 10 s)."""
    done = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, timeout=10)  # fmt: skip
    return done.stdout
