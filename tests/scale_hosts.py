"""Hosts for the at-scale run (issue 26): seller hosts, an upstreams host and a Redis host in
network namespaces of their own, on addresses of their own (``10.77.11.0/24`` front,
``10.77.12.0/24`` back), so that they never meet tests/netns.py's if both run at once.

The front network joins the buyers (the root namespace, ``10.77.11.254``) to the seller
hosts; the back network joins the seller hosts to the upstreams and to Redis (the root
namespace is on it too, ``10.77.12.254``, to build the cluster and read its statistics).
Cutting a seller host's back link partitions it from everything it depends on while buyers
still reach it. Needs root (CI runs as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import pytest

from .netns import ip

FRONT, BACK = "10.77.11", "10.77.12"


class ScaleNetwork:
    """``hosts`` seller hosts ``h1``..``hN`` (front ``10.77.11.1N``, back ``10.77.12.1N``),
    ``up`` (the upstreams, ``10.77.12.2``) and ``redis`` (``10.77.12.1``)."""

    def __init__(self, hosts: int = 2) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("needs root and iproute2 to create network namespaces (CI runs as root)")
        tag = str(os.getpid() % 100000)
        self.sellers = [f"h{i}" for i in range(1, hosts + 1)]
        self.ns = {name: f"adcps-{name}-{tag}" for name in ("redis", "up", *self.sellers)}
        self.bridges = {"front": f"bsf{tag}", "back": f"bsb{tag}"}
        self.links: dict[tuple[str, str], str] = {}  # (host, network) -> root-side veth
        self.addresses: dict[tuple[str, str], str] = {("redis", "back"): f"{BACK}.1",
                                                      ("up", "back"): f"{BACK}.2"}  # fmt: skip
        for index, host in enumerate(self.sellers, start=11):
            self.addresses[(host, "front")] = f"{FRONT}.{index}"
            self.addresses[(host, "back")] = f"{BACK}.{index}"
        self.root = {"front": f"{FRONT}.254", "back": f"{BACK}.254"}

    def up(self) -> ScaleNetwork:
        try:
            for name in self.ns.values():
                ip("netns", "add", name)
                ip("link", "set", "lo", "up", namespace=name)
            for network, bridge in self.bridges.items():
                ip("link", "add", bridge, "type", "bridge")
                ip("link", "set", bridge, "up")
                ip("addr", "add", f"{self.root[network]}/24", "dev", bridge)
            for index, ((host, network), address) in enumerate(self.addresses.items()):
                outer, inner = f"vs{index}{self.bridges['front'][3:]}", f"vs{index}"
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
