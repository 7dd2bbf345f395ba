"""Cache keys: hashed, so neither credentials nor request bodies are ever stored in clear."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import functools
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping
from typing import Any


def digest(parts: Iterable[object]) -> str:
    """A stable 32-hex-digit digest of the parts, each length-prefixed."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = _bytes(part)
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def key_size(key: object) -> int:
    """Roughly how many bytes ``key`` holds (0 when it has no key form)."""
    try:
        return len(_bytes(key))
    except (TypeError, ValueError):
        return 0


def _bytes(part: object) -> bytes:
    out = bytearray()
    try:
        _encode(part, out)
    except RecursionError:  # a request's arguments, nested as deep as a JSON parser reads
        raise TypeError(f"{_REFUSED}: a key nests deeper than the stack holds") from None
    return bytes(out)


def _encode(value: object, out: bytearray) -> None:
    """Append ``value``'s exact, typed encoding; refuse what has none (a ``repr()`` may mask
    the very secret that tells two callers apart: revealed here, since keys are hashed)."""
    if value is None or isinstance(value, bool):
        out += b"n" if value is None else b"t" if value else b"f"
    elif isinstance(value, (str, bytes)):
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        out += b"s" if isinstance(value, str) else b"b"
        out += len(data).to_bytes(8, "big") + data
    elif isinstance(value, enum.Enum):  # before int: an IntEnum member is not its value
        _encode((type(value).__qualname__, value.name), _tagged(out, b"e"))
    elif isinstance(value, int):
        out += b"i%d;" % value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{_REFUSED}: a key holds {value!r}")
        out += b"d" + repr(value).encode() + b";"
    elif isinstance(value, (list, tuple)):
        out += b"l%d;" % len(value)
        for item in value:
            _encode(item, out)
    elif isinstance(value, Mapping):  # dict, httpx.Headers, MappingProxyType...
        items = list(value.items())
        if not all(isinstance(k, str) for k, _ in items):
            raise TypeError(f"{_REFUSED}: a dict key is not a str")
        out += b"m%d;" % len(items)
        for k, v in sorted(items, key=lambda item: item[0]):
            _encode(k, out)
            _encode(v, out)
    else:
        _encode_object(value, out)


def _encode_object(value: object, out: bytearray) -> None:
    reveal = getattr(value, "get_secret_value", None)
    dump = getattr(value, "model_dump", None)
    if callable(reveal):  # pydantic SecretStr / SecretBytes
        _encode(reveal(), _tagged(out, b"x"))
    elif callable(dump) and isinstance(
        model_fields := getattr(type(value), "model_fields", None), dict
    ):
        # Every field, excluded ones too (a tenant's credentials), and the extras.
        held = vars(value)  # read without a deprecated field's warning
        fields = {
            name: held[name] if name in held else getattr(value, name) for name in model_fields
        }
        fields.update(getattr(value, "__pydantic_extra__", None) or {})
        _encode((type(value).__qualname__, fields), _tagged(out, b"o"))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        _encode((type(value).__qualname__, fields), _tagged(out, b"o"))
    elif isinstance(value, (datetime.date, datetime.time, decimal.Decimal, uuid.UUID)):
        _encode((type(value).__qualname__, str(value)), _tagged(out, b"v"))
    else:
        raise TypeError(f"{_REFUSED}: {type(value).__qualname__} has no exact key form")


def _tagged(out: bytearray, tag: bytes) -> bytearray:
    out += tag
    return out


_REFUSED = (
    "cannot build an exact cache key (pass key= to cached(), or use str, bytes, numbers, "
    "None, and lists and str-keyed dicts of them)"
)


def cache_key(namespace: str, upstream_name: str, key: object) -> str:
    """The store key of one upstream's answer: readable prefix, hashed remainder."""
    parts = key if isinstance(key, tuple) else (key,)
    for part in parts:
        if part is None or (type(part) in _TEXT and len(part) <= _MAX_REMEMBERED):
            continue
        if type(part) is tuple and _short_text(part):  # a transport's key, say
            continue
        return _store_key(namespace, upstream_name, parts)
    return _recent_key(namespace, upstream_name, parts)


def _short_text(parts: tuple[object, ...]) -> bool:
    size = 0
    for part in parts:
        if type(part) not in _TEXT:
            return False
        size += len(part)  # type: ignore[arg-type]
    return size <= _MAX_REMEMBERED


def _store_key(namespace: str, upstream_name: str, parts: tuple[object, ...]) -> str:
    return f"{namespace}:{upstream_name}:{digest(parts)}"


# Recent digests are remembered only for short text parts: 1 == 1.0 == True would share one.
_TEXT = frozenset({str, bytes})
_MAX_REMEMBERED = 1024
_recent_key = functools.lru_cache(maxsize=4096)(_store_key)


#: Headers carrying a caller's credentials or tenant: incoming and outgoing keys read them.
CREDENTIAL_HEADERS = ("authorization", "x-adcp-auth", "x-api-key", "cookie", "x-adcp-tenant")

#: What the default partition reads off an incoming request: credentials, tenant, host name.
CALLER_HEADERS = (*(h.encode() for h in CREDENTIAL_HEADERS), b"host")


def caller_partition(scope: Mapping[str, Any]) -> str:
    """The default partition of an incoming request: a digest of its credentials, tenant and
    host name (without port: workers on several ports share entries)."""
    headers = dict.fromkeys(CALLER_HEADERS, b"")
    for name, value in scope.get("headers", []):
        name = name.lower()
        if name in headers:  # a repeated header counts with all its values
            headers[name] = headers[name] + b"\n" + value if headers[name] else value
    headers[b"host"] = _host_name(headers[b"host"])
    return digest(headers[name] for name in CALLER_HEADERS)


def _host_name(host: bytes) -> bytes:
    if host.startswith(b"["):  # [IPv6]:port
        return host.split(b"]")[0] + b"]"
    return host.rsplit(b":", 1)[0].lower()
