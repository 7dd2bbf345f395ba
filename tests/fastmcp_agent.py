"""A creative agent in the reference seller's style, for the fastmcp tests: a fastmcp 3.2
(or 4) server whose ``list_creative_formats`` answers the ``adcp`` package's own
``ListCreativeFormatsResponse`` (the 50 reference formats the package ships) through
``ToolResult(structured_content=model)``, so its answers carry ``"adcp_error": null`` and
the rest of the model's unset fields. A tenant's token (``x-adcp-auth``) is echoed in every
format's name, so a test can tell whose entry it was served.

Run in a process of its own (the tests freeze and kill it)::

    python tests/fastmcp_agent.py --port 9001 --name agent-a [--formats 16:28]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.resources import files
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.dependencies import get_http_headers
from fastmcp.tools import ToolResult

from adcp_stale_cache.demo.processes import free_port, wait_for_port

try:  # adcp 6.x, what the reference seller pins
    from adcp.types import Format, ListCreativeFormatsResponse
except ImportError:  # adcp 9.x: list_creative_formats is a legacy task since AdCP 3.2
    from adcp.types import LegacyListCreativeFormatsResponse as ListCreativeFormatsResponse
    from adcp.types.domains.core.format import Format  # type: ignore[no-redef]


def reference_formats() -> list[dict[str, Any]]:
    """The v1 reference formats the ``adcp`` package ships (real data, not ours)."""
    fixture = files("adcp.canonical_formats") / "_fixtures" / "v1-reference-formats.json"
    formats: list[dict[str, Any]] = json.loads(fixture.read_text(encoding="utf-8"))
    return formats


def build_agent(name: str, public_url: str, formats: slice = slice(None)) -> Any:
    agent = FastMCP(name)
    catalogue = reference_formats()[formats]

    @agent.tool
    def list_creative_formats() -> ToolResult:
        token = get_http_headers(include={"x-adcp-auth"}).get("x-adcp-auth", "public")
        formats = []
        for item in catalogue:
            item = {**item, "format_id": {**item["format_id"], "agent_url": public_url}}
            item["name"] = f"{item['name']} [{name}/{token}]"
            formats.append(Format.model_validate(item))
        response = ListCreativeFormatsResponse(formats=formats)
        return ToolResult(content=f"{len(formats)} formats", structured_content=response)

    return agent.http_app(path="/mcp")


class Agent:
    """A creative agent in a process of its own (started from the tests)."""

    def __init__(self, name: str, formats: str = ":") -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        # What it says, for a start that fails (closed by stop()).
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--port", str(self.port),
             "--name", name, "--formats", formats],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait(self) -> None:
        """Wait until it listens; if it does not, fail with what it said."""
        from .servers import START_SECONDS  # here: the module also runs as a script

        try:
            wait_for_port(self.port, START_SECONDS, process=self.process)
        except (RuntimeError, TimeoutError) as exc:
            self.log.seek(0)
            said = self.log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"creative agent {self.name} did not start: {exc}\n{said}") from exc

    def kill(self) -> None:
        from .servers import reap

        reap(self.process, stop=signal.SIGKILL)

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def stop(self) -> None:
        from .servers import reap

        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        reap(self.process, stop=signal.SIGKILL)
        self.log.close()


@contextlib.contextmanager
def agents(*names: str, formats: str = ":") -> Iterator[dict[str, Agent]]:
    started: dict[str, Agent] = {}
    try:
        for name in names:  # one at a time: a start that fails still stops those before it
            started[name] = Agent(name, formats)
        for agent in started.values():
            agent.wait()
        yield started
    finally:
        for agent in started.values():
            agent.stop()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--formats", default=":", help="which reference formats: START:STOP")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}/mcp"
    start, _, stop = args.formats.partition(":")
    formats = slice(int(start) if start else None, int(stop) if stop else None)
    app = build_agent(args.name, url, formats)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
