"""Redis from URLs (issue 17): TLS with a password, Sentinel with a failover, and URLs that
never leak their password. Real redis-server and redis-sentinel processes on loopback."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.demo.processes import free_port, wait_for_port
from adcp_stale_cache.stores.redis_urls import client_from_url, redacted

from ..redis_cluster import caught_up
from ..redis_server import redis_cli

pytest.importorskip("redis.asyncio", reason="the redis extra is needed")
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed (CI installs it)")  # fmt: skip


def test_urls_name_their_topology_and_never_show_a_password() -> None:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    assert redacted("rediss://seller:s3cret@cache:6380/0") == "rediss://seller:***@cache:6380/0"
    assert redacted("redis://:s3cret@cache/0") == "redis://:***@cache/0"
    assert redacted("redis://cache:6379/0") == "redis://cache:6379/0"
    assert isinstance(client_from_url("redis://127.0.0.1:1/0", socket_timeout=0.1), Redis)
    cluster = client_from_url("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001",
                              socket_timeout=0.1)  # fmt: skip
    assert isinstance(cluster, RedisCluster)
    sentinel = client_from_url("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/2",
                               socket_timeout=0.1)  # fmt: skip
    assert isinstance(sentinel, Redis)
    assert sentinel.connection_pool.service_name == "mymaster"
    for bad in ("http://cache/0", "redis+sentinel://10.0.0.1:26379"):
        with pytest.raises(ValueError) as raised:
            client_from_url(bad.replace("//", "//u:s3cret@"), socket_timeout=0.1)
        assert "s3cret" not in str(raised.value)


def _spawn(*command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def _healthy_replica(listing: str, port: int) -> bool:
    fields = listing.split()
    pairs = dict(zip(fields[::2], fields[1::2], strict=False))
    return pairs.get("port") == str(port) and pairs.get("flags") == "slave"


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (openssl, as the CI machine has it)."""
    paths = {name: directory / f"{name}.pem" for name in ("ca", "ca-key", "cert", "key")}
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    # Key usage and key identifiers: 3.13's default context verifies strictly (X509_STRICT).
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(paths["ca-key"]), "-out", str(paths["ca"]))  # fmt: skip
    csr = directory / "server.csr"
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(paths["key"]), "-out", str(csr))  # fmt: skip
    extensions = directory / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nauthorityKeyIdentifier=keyid,issuer\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(paths["ca"]), "-CAkey", str(paths["ca-key"]),
        "-CAcreateserial", "-days", "1", "-extfile", str(extensions), "-out", str(paths["cert"]))  # fmt: skip
    return paths


@needs_redis
async def test_tls_with_a_password(caplog: Any) -> None:
    from adcp_stale_cache.stores.redis import RedisStore

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (CI has it)")
    directory = Path(tempfile.mkdtemp())
    certs = _certificates(directory)
    port = free_port()
    server = _spawn(
        "redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", str(certs["cert"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no",
        "--requirepass", "s3cret-pass", "--save", "", "--appendonly", "no",
    )  # fmt: skip
    try:
        wait_for_port(port)
        url = f"rediss://:s3cret-pass@127.0.0.1:{port}/0?ssl_ca_certs={certs['ca']}"
        store = RedisStore(url=url)
        entry = Entry(b"over tls", time.time())
        await store.set("k", entry, 60)
        assert await store.get("k") == entry and store.failures == 0
        await store.aclose()
        caplog.set_level(logging.DEBUG)
        wrong = RedisStore(url=url.replace("s3cret-pass", "wrong-pass"))
        assert await wrong.get("k") is None and wrong.failures == 1  # refused: no entry
        plain = RedisStore(url=f"redis://:s3cret-pass@127.0.0.1:{port}/0")
        assert await plain.get("k") is None and plain.failures == 1  # TLS is required
        assert "s3cret-pass" not in caplog.text and "wrong-pass" not in caplog.text
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)


@needs_redis
async def test_sentinel_follows_a_failover() -> None:
    from adcp_stale_cache.stores.redis import RedisStore

    directory = Path(tempfile.mkdtemp())
    master, replica, sentinel = free_port(), free_port(), free_port()
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(directory)]
    processes = [
        _spawn("redis-server", "--port", str(master), *common),
        _spawn("redis-server", "--port", str(replica), "--replicaof", "127.0.0.1", str(master),
               *common),
    ]  # fmt: skip
    conf = directory / "sentinel.conf"
    conf.write_text(
        f"port {sentinel}\nbind 127.0.0.1\nsentinel monitor seller 127.0.0.1 {master} 1\n"
        "sentinel down-after-milliseconds seller 1000\nsentinel failover-timeout seller 5000\n"
    )
    processes.append(_spawn("redis-server", str(conf), "--sentinel"))
    try:
        for port in (master, replica, sentinel):
            wait_for_port(port)
        deadline = time.monotonic() + 30
        while "master_link_status:up" not in await asyncio.to_thread(
            redis_cli, replica, "info", "replication"
        ):
            assert time.monotonic() < deadline, "the replica never synced"
            await asyncio.sleep(0.1)
        store = RedisStore(url=f"redis+sentinel://127.0.0.1:{sentinel}/seller",
                           retry_after_seconds=0.2)  # fmt: skip
        entry = Entry(b"before", time.time())
        await store.set("k", entry, 600)
        assert await store.get("k") == entry
        # The write reached the replica (WAIT on redis-cli's own connection proves nothing).
        deadline = time.monotonic() + 30
        while not caught_up(await asyncio.to_thread(redis_cli, master, "info", "replication")):
            assert time.monotonic() < deadline, "the replica did not catch up"
            await asyncio.sleep(0.05)
        # Sentinel learns of replicas from the master every 10 s: a failover needs a healthy one.
        deadline = time.monotonic() + 30
        while not _healthy_replica(await asyncio.to_thread(
                redis_cli, sentinel, "sentinel", "replicas", "seller"), replica):  # fmt: skip
            assert time.monotonic() < deadline, "Sentinel never saw the replica"
            await asyncio.sleep(0.5)
        processes[0].kill()  # the master dies; Sentinel promotes the replica
        started = time.monotonic()
        found = None
        while time.monotonic() - started < 30 and found is None:
            await asyncio.sleep(0.2)
            found = await store.get("k")  # "no entry" while there is no master
        assert found == entry, "the store did not follow the failover"
        await store.set("k2", entry, 600)  # writes reach the new master
        assert await store.get("k2") == entry
        print(f"sentinel failover followed in {time.monotonic() - started:.1f} s")
    finally:
        for process in processes:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
