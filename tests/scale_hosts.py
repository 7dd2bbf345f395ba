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

from .netns import Namespaces

FRONT, BACK = "10.77.11", "10.77.12"


class ScaleNetwork(Namespaces):
    """``hosts`` seller hosts ``h1``..``hN`` (front ``10.77.11.1N``, back ``10.77.12.1N``),
    ``up`` (the upstreams, ``10.77.12.2``) and ``redis`` (``10.77.12.1``)."""

    def __init__(self, hosts: int = 2) -> None:
        self.sellers = [f"h{i}" for i in range(1, hosts + 1)]
        addresses = {("redis", "back"): f"{BACK}.1", ("up", "back"): f"{BACK}.2"}
        for index, host in enumerate(self.sellers, start=11):
            addresses[(host, "front")] = f"{FRONT}.{index}"
            addresses[(host, "back")] = f"{BACK}.{index}"
        super().__init__("adcps", "sc", addresses, {"front": f"{FRONT}.254", "back": f"{BACK}.254"})
        self.root = self.roots
