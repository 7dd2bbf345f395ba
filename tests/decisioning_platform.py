"""A signals agent's decisioning platform in a process of its own: ``POST /segments`` answers
each principal's own segments, numbered by the call (so a test tells fresh from cached).
Started, killed, frozen and restarted on its port by the tests."""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from adcp_stale_cache.demo.processes import App, free_port


class Platform(App):
    """The platform's process: its URL stays the same across restarts."""

    def __init__(self) -> None:
        super().__init__("decisioning-platform", free_port(), quiet=True)
        self.command = (sys.executable, __file__, "--port", str(self.port))

    def start(self) -> Platform:
        from .servers import START_SECONDS  # here: the module also runs as a script

        super().start()
        self.wait(START_SECONDS)
        return self


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
