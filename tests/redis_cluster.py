"""A real 6-node Redis Cluster (3 masters, 3 replicas) on loopback, for the tests."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from adcp_stale_cache.demo.processes import wait_for_port


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


class RedisCluster:
    """Six redis-server processes joined by ``redis-cli --cluster create``; kill a master at
    will and wait for its replica to take over. ``host`` is the address they bind (loopback
    by default) and ``wrap`` the command that runs them (a network namespace's ``ip netns
    exec``, say: tests/scale_hosts.py)."""

    def __init__(
        self,
        nodes: int = 6,
        host: str = "127.0.0.1",
        wrap: Callable[[list[str]], Sequence[str]] = list,
    ) -> None:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            pytest.skip("redis-server and redis-cli are not installed (CI installs them)")
        self.dir = Path(tempfile.mkdtemp(prefix="adcp-cluster-"))
        ports = free_ports(nodes * 2)  # each node's port and its cluster bus port
        self.ports, self.bus_ports = ports[:nodes], ports[nodes:]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.host, self.wrap = host, wrap
        self.url = "redis+cluster://" + ",".join(f"{host}:{p}" for p in self.ports[:3])

    def cli(self, port: int, *args: str) -> str:
        """What ``redis-cli -h HOST -p PORT ARGS...`` prints (bounded to 10 s)."""
        done = subprocess.run(["redis-cli", "-h", self.host, "-p", str(port), *args],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
        return done.stdout

    def start(self) -> RedisCluster:
        """Start the nodes and make them a cluster; a start that fails stops them (the
        caller gets no cluster to stop)."""
        try:
            self._form()
        except BaseException:
            self.stop()
            raise
        return self

    def _form(self) -> None:
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            command = ["redis-server", "--port", str(port), "--cluster-port", str(bus),
                       "--bind", self.host, "--protected-mode", "no", "--cluster-enabled", "yes",
                       "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout",
                       "1000", "--save", "", "--appendonly", "no", "--dir", str(self.dir)]  # fmt: skip
            self.processes[port] = subprocess.Popen(
                self.wrap(command), stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL
            )
        for port in self.ports:
            wait_for_port(port, host=self.host)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"{self.host}:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.wait_ok()
        self.wait_agreed()
        # The replicas' first full syncs, before any write: a replica that synced while the
        # first writes landed was seen holding another shard's keys, at its own master's
        # offset, "up" (and a failover then promoted it).
        self.wait_replicated()

    def wait_agreed(self, timeout: float = 30) -> None:
        """Wait until every node agrees on the slots configuration. Until then a replica
        may yet hear that its master's slots were another's and drop the keys it holds in
        them, locally: no resync follows (its offset stays its master's), and a failover
        then promotes a replica missing keys its master had."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            check = subprocess.run(["redis-cli", "--cluster", "check", f"{self.host}:{self.ports[0]}"],
                                   capture_output=True, text=True, timeout=10)  # fmt: skip
            if "All nodes agree about slots configuration" in check.stdout:
                return
            time.sleep(0.1)
        raise TimeoutError("the cluster's nodes did not agree on the slots configuration")

    def masters(self) -> list[int]:
        """The ports of the live masters."""
        alive = [p for p in self.ports if self.processes[p].poll() is None]
        return [p for p in alive if "role:master" in self.cli(p, "info", "replication")]

    def wait_ok(self, timeout: float = 30) -> float:
        """Wait until every live node says the cluster is ok, with three masters; seconds."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            alive = [p for p in self.ports if self.processes[p].poll() is None]
            states = [self.cli(p, "cluster", "info") for p in alive]
            if all("cluster_state:ok" in s for s in states) and len(self.masters()) == 3:
                return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError("the cluster did not become ok")

    def wait_replicated(self, timeout: float = 30) -> None:
        """Each master's writes reached its replica: the replica online, its acknowledged
        offset at the master's. (``WAIT`` cannot say so: it waits for the writes of its own
        connection only, and redis-cli's has none, so it answered at once.)"""
        deadline = time.monotonic() + timeout
        for port in self.masters():
            while not (caught_up(self.cli(port, "info", "replication")) and self.same_keys(port)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the replica of {port} did not catch up: {self.describe()}")
                time.sleep(0.05)

    def same_keys(self, master: int) -> bool:
        """Whether ``master``'s replica holds exactly its keys (offsets can agree while
        the keys do not: see start)."""
        info = self.cli(master, "info", "replication")
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        replica = dict(
            item.split("=", 1) for item in fields.get("slave0", "").split(",") if "=" in item
        )
        if not replica.get("port", "").isdigit():
            return False
        mine = set(self.cli(master, "keys", "*").split())
        return mine == set(self.cli(int(replica["port"]), "keys", "*").split())

    def kill(self, port: int) -> None:
        self.processes[port].kill()
        self.processes[port].wait()

    def describe(self, key: str | None = None) -> str:
        """Each live node's role, keys and master link (and what it answers for ``key``),
        for a failure's message."""
        lines = []
        for port in self.ports:
            if self.processes[port].poll() is not None:
                lines.append(f"{port}: dead")
                continue
            info = self.cli(port, "info", "replication")
            fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
            role, keys = fields.get("role", "?").strip(), self.cli(port, "dbsize").strip()
            link = fields.get("master_link_status", "").strip()
            if role == "slave":
                master = fields.get("master_port", "?").strip()
                link += f" of {master}"
                if master.isdigit() and self.processes[int(master)].poll() is None:
                    mine = set(self.cli(port, "keys", "*").split())
                    theirs = set(self.cli(int(master), "keys", "*").split())
                    link += f" lacks={sorted(theirs - mine)[:3]} extra={sorted(mine - theirs)[:3]}"
            else:
                link = fields.get("slave0", "no replica").strip()
            lines.append(f"{port}: {role} keys={keys} {link}".rstrip())
            if key is not None:
                lines[-1] += f" exists={self.cli(port, 'exists', key).strip()}"
        return "; ".join(lines)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def caught_up(info: str) -> bool:
    """Whether ``INFO replication`` of a master shows a replica online at its offset."""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    offset = int(fields.get("master_repl_offset", "0"))
    replica = dict(
        item.split("=", 1) for item in fields.get("slave0", "").split(",") if "=" in item
    )
    return replica.get("state") == "online" and int(replica.get("offset", "-1")) >= offset
