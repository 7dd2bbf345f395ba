"""Value codecs: a cached value to the bytes a store keeps, and back. A value a codec refuses
is served, not cached; an entry it cannot read counts as no entry."""

from __future__ import annotations

import json
import logging
import math
import threading
from typing import Any, Generic, TypeVar

import orjson

from .codec import Codec as Codec
from .codec import ContentReading as ContentReading
from .codec import HandingOver as HandingOver
from .codec import RoundTripping as RoundTripping
from .entry import Entry
from .policy import Upstream

T = TypeVar("T")
logger = logging.getLogger("adcp_stale_cache")


def content_of(codec: Codec[Any], data: bytes) -> bytes:
    """What answers' tokens hash of a stored value: the codec's content of it, else all."""
    reading = capabilities(codec)[1]
    return reading.content(data) if reading is not None else data


# A protocol check reads every member of the protocol, too slow for each value: each codec
# object is checked once (held, so its id is not reused; few codecs exist, the bound is a guard).
_known: dict[
    int, tuple[object, RoundTripping | None, ContentReading | None, HandingOver | None]
] = {}


def capabilities(
    codec: object,
) -> tuple[RoundTripping | None, ContentReading | None, HandingOver | None]:
    """``codec`` as a :class:`RoundTripping`, a :class:`ContentReading` and a
    :class:`HandingOver` (None: not)."""
    known = _known.get(id(codec))
    if known is None or known[0] is not codec:
        if len(_known) >= 256:
            _known.clear()
        known = (
            codec,
            codec if isinstance(codec, RoundTripping) else None,
            codec if isinstance(codec, ContentReading) else None,
            codec if isinstance(codec, HandingOver) else None,
        )
        _known[id(codec)] = known
    return known[1], known[2], known[3]


class JsonCodec(Generic[T]):
    """JSON values (dicts, lists, strings, numbers) through orjson."""

    def dumps(self, value: T) -> bytes:
        """Serialise with orjson; raise for what JSON cannot hold exactly (NaN, infinities,
        ``Decimal``, integers past 64 bits, non-string keys)."""
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
    """JSON values decoded once and shared by every caller, who must treat them as read-only;
    up to ``max_values`` of them (first in, first out), outside the store's byte bound."""

    def __init__(self, max_values: int = 1024) -> None:
        if max_values < 1:
            raise ValueError("max_values must be positive")
        self.max_values = max_values
        # Keyed by the stored bytes, whose hash CPython caches: a lookup never rehashes a body.
        self._values: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    def loads(self, data: bytes) -> T:
        """The shared decoded value of ``data`` (decoded on first use)."""
        value = self._values.get(data, _MISSING)
        if value is _MISSING:
            value = orjson.loads(data)
            with self._lock:  # a hit takes no lock
                if len(self._values) >= self.max_values:
                    del self._values[next(iter(self._values))]
                self._values[data] = value
        result: T = value
        return result


# Digits and dots become "0": 18 in a row may be a number orjson rounds. C-speed, unlike a regex.
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789.", b"0" * 11)
_LONG_RUN = b"0" * 18


def has_long_number(body: bytes) -> bool:
    """True when ``body`` may hold a number too long for orjson to keep exactly."""
    return _LONG_RUN in body.translate(_DIGITS_TO_ZERO)


class Unreadable(Exception):
    """A stored entry the codec cannot decode: it counts as no entry."""


def decode(codec: Codec[T], entry: Entry, upstream: Upstream) -> T:
    """The value of a stored entry; :class:`Unreadable` (logged) when the codec cannot."""
    try:
        return codec.loads(entry.data)
    except Exception as exc:
        unreadable(codec, upstream, exc)
        raise Unreadable from exc


def unreadable(codec: Codec[Any], upstream: Upstream, exc: Exception) -> None:
    """Log an entry ``codec`` could not read (``exc``): the type only, a message may quote it."""
    logger.warning(
        "unreadable_entry upstream=%s codec=%s error=%s",
        upstream.name,
        type(codec).__name__,
        type(exc).__name__,
    )


class Encoded(Generic[T]):
    """A value's stored form, and a value of it that no one holds yet (none, or one). A plain
    class: the compiled build (mypyc) cannot make a generic dataclass with slots."""

    def __init__(self, data: bytes, spare: tuple[T, ...]) -> None:
        self.data = data
        self.spare = spare


def encode(codec: Codec[T], value: T, upstream: Upstream) -> Encoded[T] | None:
    """The stored form of ``value``, or None (logged) when the codec refuses it or cannot
    read it back (unless it is :class:`RoundTripping` and promises it). Its spare is the
    copy read back, or ``value`` itself from a :class:`HandingOver` codec."""
    try:
        data = codec.dumps(value)
    except Exception as exc:
        _not_cacheable(codec, upstream, "refused", exc)
        return None
    if not isinstance(data, bytes):  # a buffer the codec may reuse: kept as it is now
        data = bytes(data)
    promising, _, handing = capabilities(codec)
    if promising is not None and promising.round_trips:
        return Encoded(data, (value,) if handing is not None and handing.hands_over(value) else ())
    try:
        copy = codec.loads(data)
    except Exception as exc:
        _not_cacheable(codec, upstream, "does not round-trip", exc)
        return None
    # orjson's bytes hold its whole 4 KiB write buffer: an exact copy holds what Entry.size says.
    return Encoded(bytes(memoryview(data)) if type(data) is bytes else data, (copy,))


_warned: set[tuple[str, str, str]] = set()


def _not_cacheable(codec: Codec[Any], upstream: Upstream, reason: str, exc: Exception) -> None:
    """Log a value served but not kept: WARNING once per upstream, codec and error, then DEBUG."""
    seen = (upstream.name, type(codec).__name__, f"{reason}:{type(exc).__name__}")
    first = seen not in _warned
    if first and len(_warned) < 1024:
        _warned.add(seen)
    logger.log(
        logging.WARNING if first else logging.DEBUG,
        "not_cacheable upstream=%s codec=%s reason=%s error=%s",  # the type only: a message
        upstream.name,  # may quote the value
        type(codec).__name__,
        reason,
        type(exc).__name__,
    )


class PydanticCodec(Generic[T]):
    """Values of one type a ``TypeAdapter`` takes (a model, ``list[Format]``), read back as it,
    with what ``model_dump`` drops: excluded fields, extras, fields set, top-level privates."""

    def __init__(self, value_type: Any) -> None:
        from pydantic import TypeAdapter

        self.value_type = value_type
        self._adapter: Any = TypeAdapter(value_type)

    def dumps(self, value: T) -> bytes:
        """The value's state as JSON (raises on a value not of the type)."""
        self._adapter.validate_python(value, strict=False)  # a value of another type: refused
        state = {"value": _state(value), "private": _privates(value)}
        try:
            data = orjson.dumps(state, default=_jsonable)
        except TypeError:  # an integer past 64 bits, say: the stdlib holds it exactly
            data = json.dumps(state, default=_jsonable, separators=(",", ":")).encode()
        # JSON may change a value that still validates (int keys, NaN): keep only an equal one.
        if self.loads(data) != value:
            raise ValueError("the value does not read back equal")
        return data

    def loads(self, data: bytes) -> T:
        """A new value of the type (private attributes of top-level models restored)."""
        # orjson reads an integer past 64 bits as a float: the stdlib reads those exactly.
        state = json.loads(data) if has_long_number(data) else orjson.loads(data)
        value: T = self._adapter.validate_python(state["value"])
        _restore_privates(value, state["private"])
        return value


def _state(value: Any) -> Any:
    if getattr(type(value), "__pydantic_root_model__", False):  # a RootModel is its root
        return _state(value.root)
    fields = getattr(type(value), "model_fields", None)
    if isinstance(fields, dict) and hasattr(value, "model_fields_set"):
        held = vars(value)  # the field values, read without a deprecated field's warning
        state = {
            _input_name(name, fields[name]): _state(
                held[name] if name in held else getattr(value, name)
            )
            for name in value.model_fields_set
            if name in fields
        }
        for name, extra in (getattr(value, "__pydantic_extra__", None) or {}).items():
            state[name] = _state(extra)
        return state
    if isinstance(value, (list, tuple)):
        return [_state(item) for item in value]
    if isinstance(value, dict):
        return {key: _state(item) for key, item in value.items()}
    return value


def _input_name(name: str, field: Any) -> str:
    """The key validation reads a field from (so aliases round-trip)."""
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)  # AliasChoices: the first plain name
    if isinstance(choices, list) and choices and isinstance(choices[0], str):
        alias = choices[0]
    if isinstance(alias, str):
        return alias
    return field.alias if isinstance(field.alias, str) else name


def _privates(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [getattr(item, "__pydantic_private__", None) for item in value]
    if isinstance(value, dict):
        return {key: getattr(item, "__pydantic_private__", None) for key, item in value.items()}
    return getattr(value, "__pydantic_private__", None)


def _restore_privates(value: Any, private: Any) -> None:
    if isinstance(value, (list, tuple)) and isinstance(private, list):
        for item, saved in zip(value, private, strict=False):
            _restore_privates(item, saved)
    elif isinstance(value, dict) and isinstance(private, dict):
        for key, saved in private.items():
            if key in value:
                _restore_privates(value[key], saved)
    elif isinstance(private, dict) and getattr(value, "__pydantic_private__", None) is not None:
        value.__pydantic_private__.update(private)


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)
