"""What a codec of cached values is, and its optional capabilities (protocols); apart from
``values`` so that the compiled build (mypyc) can compile that module."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class Codec(Protocol[T]):
    """Turns a value into the bytes a store keeps, and back (a fresh copy per caller); it may
    also be :class:`RoundTripping`, :class:`HandingOver` or :class:`ContentReading`."""

    def dumps(self, value: T) -> bytes:
        """Serialise; raise to refuse a value (it is then not cached)."""
        ...

    def loads(self, data: bytes) -> T:
        """Deserialise; an exception makes the entry count as absent."""
        ...


@runtime_checkable
class RoundTripping(Protocol):
    """A codec that may promise (``round_trips = True``) that all it writes reads back, so
    what it writes is not read back to check."""

    round_trips: bool


@runtime_checkable
class HandingOver(Protocol):
    """A round-tripping codec that can tell when a value it wrote serves a caller as well as
    a copy read back, so one caller of the call that made it takes the value itself: a decode
    fewer per miss or refresh."""

    def hands_over(self, value: Any) -> bool:
        """True when ``value`` reads as its copy read back would."""
        ...


@runtime_checkable
class ContentReading(Protocol):
    """A codec that knows the content of what it stored: the bytes answers' tokens hash
    (without, say, headers a revalidation changes)."""

    def content(self, data: bytes) -> bytes:
        """The content of the stored ``data``."""
        ...
