"""Hosts that really are apart: Linux network namespaces joined by veth pairs on bridges.

Two networks: ``front`` (the test driver in the root namespace, the sellers, the inventory
service) and ``back`` (the sellers and Redis). Cutting one seller's back link leaves it
reachable by buyers and upstreams, and cut off from Redis only. Needs root (CI runs as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import pytest


def ip(*args: str, namespace: str | None = None) -> None:
    command = (
        ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    )
    subprocess.run(command, check=True, capture_output=True, timeout=10)


class Network:
    """Namespaces ``redis``, ``h1``, ``h2`` on ``10.77.1.0/24`` (front) and ``10.77.2.0/24``
    (back); the root namespace is ``10.77.1.254`` on the front."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("needs root and iproute2 to create network namespaces (CI runs as root)")
        tag = str(os.getpid() % 100000)
        self.ns = {name: f"adcp-{name}-{tag}" for name in ("redis", "h1", "h2")}
        self.bridges = {"front": f"brf{tag}", "back": f"brb{tag}"}
        self.links: dict[tuple[str, str], str] = {}  # (host, network) -> root-side veth
        self.addresses = {
            ("h1", "front"): "10.77.1.2", ("h2", "front"): "10.77.1.3",
            ("h1", "back"): "10.77.2.2", ("h2", "back"): "10.77.2.3", ("redis", "back"): "10.77.2.1",
        }  # fmt: skip
        self.root = "10.77.1.254"

    def up(self) -> Network:
        try:
            for name in self.ns.values():
                ip("netns", "add", name)
                ip("link", "set", "lo", "up", namespace=name)
            for bridge in self.bridges.values():
                ip("link", "add", bridge, "type", "bridge")
                ip("link", "set", bridge, "up")
            ip("addr", "add", f"{self.root}/24", "dev", self.bridges["front"])
            for index, ((host, network), address) in enumerate(self.addresses.items()):
                outer, inner = f"vo{index}{self.bridges['front'][3:]}", f"vi{index}"
                ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                ip("link", "set", inner, "netns", self.ns[host])
                ip("link", "set", outer, "master", self.bridges[network])
                ip("link", "set", outer, "up")
                ip("addr", "add", f"{address}/24", "dev", inner, namespace=self.ns[host])
                ip("link", "set", inner, "up", namespace=self.ns[host])
                self.links[(host, network)] = outer
        except (subprocess.CalledProcessError, OSError) as exc:
            self.down()
            pytest.skip(f"network namespaces are not available here: {exc}")
        return self

    def exec(self, host: str, command: Sequence[str]) -> list[str]:
        """``command`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns[host], *command]

    def cut(self, host: str, network: str) -> None:
        """Silently drop ``host``'s traffic on ``network`` (its bridge-side link goes down)."""
        ip("link", "set", self.links[(host, network)], "down")

    def heal(self, host: str, network: str) -> None:
        ip("link", "set", self.links[(host, network)], "up")

    def down(self) -> None:
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        for bridge in self.bridges.values():
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)
