"""The example deployment as real processes: creative agents, an inventory service, the seller."""

from __future__ import annotations

import time
from typing import Any

import httpx

from adcp_stale_cache.demo.processes import App, free_port
from adcp_stale_cache.demo.story import warm

from .servers import START_SECONDS


class Deployment:
    """``with Deployment(*seller_flags, agents="abc") as d:`` starts all and stops all."""

    def __init__(
        self,
        *seller_flags: str,
        agents: str = "abc",
        formats: int = 2,
        products: int = 4,
        inventory: tuple[str, ...] = (),
    ) -> None:
        self.agents = {
            n: App("creative-agent", free_port(), "--name", n, "--formats", str(formats))
            for n in agents
        }
        self.inventory = App(
            "inventory-service", free_port(), "--products", str(products), *inventory
        )
        self.seller = App(
            "seller", free_port(),
            *[f"--creative-agent={n}={a.url}/mcp" for n, a in self.agents.items()],
            "--inventory-service", self.inventory.url,
            *seller_flags,
        )  # fmt: skip
        self.apps = [*self.agents.values(), self.inventory, self.seller]

    @property
    def url(self) -> str:
        """The seller's base URL."""
        return self.seller.url

    def __enter__(self) -> Deployment:
        try:
            for app in self.apps:
                app.start()
            for app in self.apps:
                # A seller with sub-sellers imports the adcp client at start (7 to 20 s
                # here); with 2 workers at load 8 to 12 it took 61 s to listen.
                app.wait(START_SECONDS)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for app in self.apps:
            app.stop()

    def warm(self, *tools: str) -> None:
        """Ask each tool until it answers healthy: an upstream's first call can outlast the
        seller's short timeouts while the machine is busy, which is not what tests are about."""
        with httpx.Client(base_url=self.url, timeout=10) as buyer:
            unhealthy = warm(buyer, tools)
        if unhealthy is not None:
            raise AssertionError(f"a tool never answered healthy: {unhealthy.text[:500]}")

    def post(self, tool: str, **kwargs: Any) -> tuple[httpx.Response, float]:
        """POST /api/<tool>; the response and how long it took."""
        started = time.monotonic()
        response = httpx.post(f"{self.url}/api/{tool}", timeout=10, **kwargs)
        return response, time.monotonic() - started
