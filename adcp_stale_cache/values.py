"""Value codecs: how a cached value becomes the bytes a store keeps, and back.

A codec that refuses a value (raises in ``dumps``) makes it "served, not cached"; a stored
entry it cannot read (raises in ``loads``) counts as no entry. Both are logged by the helpers
here, which the cache calls.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Generic, Protocol, TypeVar

import orjson

from .entry import Entry
from .policy import Upstream

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")


class Codec(Protocol[T]):
    """Turns a value into the bytes a store keeps, and back (a fresh copy per caller)."""

    def dumps(self, value: T) -> bytes:
        """Serialise; raise to refuse a value (it is then not cached)."""
        ...

    def loads(self, data: bytes) -> T:
        """Deserialise."""
        ...


class JsonCodec(Generic[T]):
    """JSON values (dicts, lists, strings, numbers) through orjson."""

    def dumps(self, value: T) -> bytes:
        """Serialise with orjson; refuse what JSON cannot hold exactly.

        orjson writes NaN and infinities as ``null``: a value holding one would come back
        changed, so it is refused (served, not cached), as are the types orjson refuses
        (``Decimal``, ``set``, integers over 64 bits, non-string dict keys).
        """
        data = orjson.dumps(value)
        if b"null" in data and _has_non_finite(value):
            raise ValueError("NaN or infinity: JSON would store it as null")
        return data

    def loads(self, data: bytes) -> T:
        """Deserialise with orjson."""
        result: T = orjson.loads(data)
        return result


JSON: JsonCodec[Any] = JsonCodec()


def _has_non_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    return False


_MISSING = object()


class SharedJsonCodec(JsonCodec[T]):
    """JSON values decoded once and shared by every caller: for read-only callers.

    The default :data:`JSON` codec gives each caller its own decoded copy, which is most of
    the cost of a hit. This one keeps the decoded value of each stored body (up to
    ``max_values`` of them, first in first out) and hands the same object to every caller:
    a hit is then a lookup. Callers must treat the value as read-only, since a mutation
    would reach every later caller. The decoded values live outside the store's byte bound.
    """

    def __init__(self, max_values: int = 1024) -> None:
        if max_values < 1:
            raise ValueError("max_values must be positive")
        self.max_values = max_values
        # Keyed by the stored bytes: a memory store hands back the same object, whose hash
        # CPython caches, so a lookup costs no rehash of the body.
        self._values: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    def loads(self, data: bytes) -> T:
        """The shared decoded value of ``data`` (decoded on first use)."""
        value = self._values.get(data, _MISSING)
        if value is _MISSING:
            value = orjson.loads(data)
            with self._lock:  # evictions from several threads (a hit takes no lock)
                if len(self._values) >= self.max_values:
                    del self._values[next(iter(self._values))]
                self._values[data] = value
        result: T = value
        return result


class Unreadable(Exception):
    """A stored entry the codec cannot decode: it counts as no entry."""


def decode(codec: Codec[T], entry: Entry, upstream: Upstream) -> T:
    """The value of a stored entry; :class:`Unreadable` (logged) when the codec cannot."""
    try:
        return codec.loads(entry.data)
    except Exception as exc:
        logger.warning(
            "unreadable_entry upstream=%s codec=%s error=%s",
            upstream.name,
            type(codec).__name__,
            type(exc).__name__,
        )
        raise Unreadable from exc


def encode(codec: Codec[T], value: T, upstream: Upstream) -> bytes | None:
    """The stored form of ``value``, or None when the codec refuses it: the upstream answered,
    so the answer is served; it is only not cached."""
    try:
        return codec.dumps(value)
    except Exception as exc:
        logger.warning(  # the type only: a message may quote the value
            "not_cacheable upstream=%s codec=%s error=%s",
            upstream.name,
            type(codec).__name__,
            type(exc).__name__,
        )
        return None
