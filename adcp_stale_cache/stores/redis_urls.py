"""Redis clients from URLs: one server, a Cluster, or a master found through Sentinel (the
forms: docs/redis.md). Passwords never reach a log line: :func:`redacted` shows a URL."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
_TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
)


def redacted(url: str) -> str:
    """``url`` with its passwords (userinfo, any ``*password*`` query value) as ``***``. Read
    by hand: a parsed netloc would end early at a password's ``#``, ``/`` or ``?``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest = _QUERY_PASSWORD.sub(r"\1***", rest)
    # Userinfo is everything up to the last @: one in a query value masks more, never less.
    head, at, tail = rest.rpartition("@")
    if at:
        user, colon, _ = head.partition(":")
        rest = f"{user}:***@{tail}" if colon else f"***@{tail}"
    return f"{scheme}{sep}{rest}"


_QUERY_PASSWORD = re.compile(r"([?&][^=&?]*password[^=&?]*=)[^&]*", re.IGNORECASE)


def is_cluster(url: str) -> bool:
    """True for ``redis+cluster://`` and ``rediss+cluster://`` URLs."""
    return urlsplit(url).scheme.endswith("+cluster")


def url_problem(url: str) -> str | None:
    """What makes ``url`` no usable Redis URL, never quoting it; None when nothing does."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or "://" not in url:
        return f"not a Redis URL ({', '.join(s + '://' for s in SCHEMES)})"
    if parts.fragment:  # a Redis URL has none: a password's # ended the netloc
        return "not a usable Redis URL (percent-encode # / ? @ in a password)"
    try:  # each host's port a number (a cluster or Sentinel URL lists several)
        for host in parts.netloc.rsplit("@", 1)[-1].split(","):
            _ = urlsplit(f"//{host.strip()}").port
    except ValueError:  # (int() would quote what it could not read: a password's piece)
        return "not a usable Redis URL (a port that is no number, or a password's / or ?)"
    return None


def client_from_url(url: str, *, socket_timeout: float) -> Any:
    """A ``redis.asyncio`` client (``Redis`` or ``RedisCluster``) for ``url``."""
    import redis.asyncio as redis

    found = url_problem(url)
    if found is not None:
        raise ValueError(f"{found}: {redacted(url)}")
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    parts = urlsplit(url)
    # One immediate retry (a pooled connection closed while idle), not redis-py's ten with a
    # backoff: those held an operation for seconds against a Redis out of reach.
    timeouts: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 1),
    }
    if "+" not in parts.scheme:
        try:
            return redis.Redis.from_url(url, **timeouts)
        except ValueError:  # redis-py's own message may quote the password
            raise ValueError(f"not a usable Redis URL: {redacted(url)}") from None
    tls = parts.scheme.startswith("rediss")
    options = _tls_options(parts.query) if tls else {}
    auth: dict[str, Any] = {
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
    }
    nodes = _nodes(parts.netloc.rsplit("@", 1)[-1])  # read by url_problem already
    if parts.scheme.endswith("+cluster"):
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            ssl=tls,
            **auth,
            **timeouts,
            **options,
        )
    from redis.asyncio.sentinel import Sentinel

    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError(f"a Sentinel URL names its service: {redacted(url)}")
    db = int(path[1]) if len(path) > 1 else 0
    # Untyped before redis 8.2, typed since: the ignore holds for both.
    sentinel = Sentinel(nodes, **timeouts)  # type: ignore[no-untyped-call, unused-ignore]
    return sentinel.master_for(path[0], db=db, ssl=tls, **auth, **timeouts, **options)


def _nodes(hosts: str) -> list[tuple[str, int]]:
    found = []
    for host in hosts.split(","):
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):  # an IPv6 address, no port
            found.append((host[1:-1], 6379))
            continue
        name, _, port = host.rpartition(":")
        found.append((name.strip("[]"), int(port)) if name else (host, 6379))
    return found


def _tls_options(query: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, value in parse_qsl(query):
        if name in _TLS_OPTIONS:
            options[name] = value if name != "ssl_check_hostname" else value.lower() == "true"
    return options


class LoopClients:
    """redis-py clients, one per event loop: with ``make`` every loop gets its own, without
    it ``first`` serves one loop. A closed loop's client is let go at a new loop's first use
    (a client holds its loop, so a weak mapping would never let either go)."""

    def __init__(self, first: Any, make: Callable[[], Any] | None) -> None:
        self._unused, self._make = first, make
        self._by_loop: dict[asyncio.AbstractEventLoop, Any] = {}
        self._lock = threading.Lock()  # two loops' first operations, from two threads

    def here(self) -> Any | None:
        """The running loop's client (None: ``first`` serves another loop already)."""
        loop = asyncio.get_running_loop()
        client = self._by_loop.get(loop)
        if client is None:
            with self._lock:
                for ended in [old for old in self._by_loop if old.is_closed()]:
                    del self._by_loop[ended]
                if self._unused is not None:
                    client, self._unused = self._unused, None
                elif self._make is not None:
                    client = self._make()
                if client is not None:
                    self._by_loop[loop] = client
        return client

    def any(self) -> Any:
        """The running loop's client, else one not used yet or any loop's."""
        try:
            client = self.here()
        except RuntimeError:  # no running loop
            client = None
        if client is None:
            client = self._unused
        return client if client is not None else next(iter(self._by_loop.values()), None)
