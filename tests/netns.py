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


class Namespaces:
    """Hosts in namespaces ``<name>-<host>-<pid>``, each joined to the networks it has an
    address on by a veth pair on that network's bridge; the root namespace joins the networks
    given ``roots`` (network -> its address there). ``short`` (two letters) begins the names
    of its bridges and links: two sets of hosts of one process never share one."""

    def __init__(
        self, name: str, short: str, addresses: dict[tuple[str, str], str], roots: dict[str, str]
    ) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("needs root and iproute2 to create network namespaces (CI runs as root)")
        self.tag = tag = str(os.getpid() % 100000)
        hosts = dict.fromkeys(host for host, _ in addresses)
        self.ns = {host: f"{name}-{host}-{tag}" for host in hosts}
        # Interface names are at most 15 characters: two letters, then the pid.
        self.bridges = {network: f"{short}{network[0]}{tag}" for network in ("front", "back")}
        self.links: dict[tuple[str, str], str] = {}  # (host, network) -> root-side veth
        self.addresses, self.roots = addresses, roots

    def up(self) -> Namespaces:
        try:
            for name in self.ns.values():
                ip("netns", "add", name)
                ip("link", "set", "lo", "up", namespace=name)
            for network, bridge in self.bridges.items():
                ip("link", "add", bridge, "type", "bridge")
                ip("link", "set", bridge, "up")
                if network in self.roots:
                    ip("addr", "add", f"{self.roots[network]}/24", "dev", bridge)
            for index, ((host, network), address) in enumerate(self.addresses.items()):
                outer, inner = f"{self.bridges['front'][:2]}o{index}{self.tag}", f"vi{index}"
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


class Network(Namespaces):
    """Namespaces ``redis``, ``h1``, ``h2`` on ``10.77.1.0/24`` (front) and ``10.77.2.0/24``
    (back); the root namespace is ``10.77.1.254`` on the front."""

    def __init__(self) -> None:
        addresses = {
            ("h1", "front"): "10.77.1.2", ("h2", "front"): "10.77.1.3",
            ("h1", "back"): "10.77.2.2", ("h2", "back"): "10.77.2.3", ("redis", "back"): "10.77.2.1",
        }  # fmt: skip
        super().__init__("adcp", "nt", addresses, {"front": "10.77.1.254"})
        self.root = self.roots["front"]
