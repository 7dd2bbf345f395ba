"""Cache keys: hashed, so neither credentials nor request bodies are ever stored in clear."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson


def digest(parts: Iterable[object]) -> str:
    """A stable 32-hex-digit digest of the parts (each one length-prefixed, so no two
    different sequences of parts collide by concatenation)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = _bytes(part)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _bytes(part: object) -> bytes:
    if isinstance(part, bytes):
        return b"b" + part
    if isinstance(part, str):
        return b"s" + part.encode()
    # Structured parts (a tool's arguments): canonical JSON, keys sorted.
    # repr() for the rest: an object without a stable repr only costs hits, never a collision.
    return b"j" + orjson.dumps(
        part, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr
    )


def cache_key(namespace: str, upstream_name: str, key: object) -> str:
    """The store key of one upstream's answer: readable prefix, hashed remainder."""
    parts = key if isinstance(key, tuple) else (key,)
    for part in parts:
        if part is not None and (type(part) not in _TEXT or len(part) > _MAX_REMEMBERED):
            return _store_key(namespace, upstream_name, parts)
    return _recent_key(namespace, upstream_name, parts)


def _store_key(namespace: str, upstream_name: str, parts: tuple[object, ...]) -> str:
    return f"{namespace}:{upstream_name}:{digest(parts)}"


# Hits repeat the same keys: remembering recent digests makes a key a dict lookup. Only for
# parts whose equality implies equal digests (1 == 1.0 == True would share one otherwise),
# and short ones (a remembered key keeps its parts alive: no large request bodies).
_TEXT = frozenset({str, bytes})
_MAX_REMEMBERED = 1024
_recent_key = functools.lru_cache(maxsize=4096)(_store_key)


#: Headers carrying a caller's credentials or tenant: they vary the answer, so both the
#: incoming partition and the outgoing (httpx transport) key are built from them.
CREDENTIAL_HEADERS = ("authorization", "x-adcp-auth", "x-api-key", "cookie", "x-adcp-tenant")

#: What the default partition reads off an incoming request: credentials, tenant, host name.
CALLER_HEADERS = (*(h.encode() for h in CREDENTIAL_HEADERS), b"host")


def caller_partition(scope: Mapping[str, Any]) -> str:
    """The default cache partition of an incoming request: a digest of its credentials,
    tenant and host name, so that no caller is ever served another caller's entry.
    (Hashed: no credential is kept in clear. The port is left out of the host: workers
    behind one name, on several ports, share their entries.)"""
    headers = dict.fromkeys(CALLER_HEADERS, b"")
    for name, value in scope.get("headers", []):
        name = name.lower()
        if name in headers:
            headers[name] = value
    headers[b"host"] = _host_name(headers[b"host"])
    return digest(headers[name] for name in CALLER_HEADERS)


def _host_name(host: bytes) -> bytes:
    if host.startswith(b"["):  # [IPv6]:port
        return host.split(b"]")[0] + b"]"
    return host.rsplit(b":", 1)[0].lower()
