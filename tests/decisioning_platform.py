"""A signals agent's decisioning platform in a process of its own: ``POST /segments`` answers
each principal's own segments, numbered by the call (so a test tells fresh from cached).
Started, killed, frozen and restarted on its port by the tests."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from adcp_stale_cache.demo.processes import free_port, wait_for_port


class Platform:
    """The platform's process: ``url`` stays the same across restarts."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Platform:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--port", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for_port(self.port, 60, process=self.process)
        return self

    def kill(self) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        self.process.kill()
        self.process.wait(timeout=10)

    def freeze(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
        self.log.close()


class Segments(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        asked: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
        Segments.calls += 1
        principal = asked.get("principal_id") or "public"
        segments = [{"id": f"{principal}-{asked.get('spec')}", "call": Segments.calls}]
        body = json.dumps({"segments": segments}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    server = ThreadingHTTPServer(("127.0.0.1", parser.parse_args().port), Segments)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
