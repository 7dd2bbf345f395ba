"""Server-sent events: split a stream into whole events, rewrite their ``data:``.

Events pass on byte for byte unless rewritten; nothing is buffered beyond the event at hand.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Two line endings in a row; a CR followed by LF is one ending (CRLF), never two.
_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))")


class EventSplitter:
    """Feed body chunks, get complete raw events back (terminators included); linear in the
    stream's size, since each feed scans only bytes not scanned yet."""

    __slots__ = ("_buffer", "_resume")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._resume = 0  # where the next scan starts: bytes before it hold no event end

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events completed by ``chunk``."""
        buffer = self._buffer
        buffer += chunk
        events: list[bytes] = []
        start = 0
        # Only line breaks can end an event: jump between them with find (C speed).
        at = _next_break(buffer, self._resume)
        while at >= 0:
            match = _EVENT_END.match(buffer, at)
            if match is None:
                at = _next_break(buffer, at + 1)
                continue
            end = match.end()
            if end == len(buffer) and buffer.endswith(b"\r"):
                break  # a CR at the edge may be the first half of a CRLF still to come
            events.append(bytes(buffer[start:end]))
            start = end
            at = _next_break(buffer, end)
        # An event end is at most 4 bytes: the last 3 may start one the next chunk completes.
        resume = min(at if at >= 0 else len(buffer), max(start, len(buffer) - 3))
        del buffer[:start]
        self._resume = resume - start
        return events

    def close(self) -> bytes:
        """What is left when the stream ends (an unterminated event, or nothing)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._resume = 0
        return rest


def _next_break(buffer: bytes | bytearray, start: int) -> int:
    lf, cr = buffer.find(b"\n", start), buffer.find(b"\r", start)
    return lf if cr < 0 else cr if lf < 0 else min(lf, cr)


def _single_data_line(event: bytes) -> tuple[int, int, int] | None:
    """(line start, value start, value end) of the event's only ``data:`` line, else None."""
    line = _line_starting(event, b"data", 0)
    if line < 0 or event[line + 4 : line + 5] != b":":
        return None
    value = line + 5 + (event[line + 5 : line + 6] == b" ")
    end = _next_break(event, value)
    if end < 0 or _line_starting(event, b"data", end) >= 0:
        return None
    return line, value, end


def _line_starting(event: bytes, prefix: bytes, start: int) -> int:
    """The offset of the first line at or after ``start`` (a line start or break) that
    begins with ``prefix``."""
    at = event.find(prefix, start)
    while at > start and event[at - 1] not in b"\r\n":  # inside a line: not a field name
        at = event.find(prefix, at + 1)
    return at


def event_data(event: bytes) -> bytes | None:
    """The event's data (lines joined with LF, as the SSE spec says), or None."""
    single = _single_data_line(event)
    if single is not None:  # the usual event: one data line, sliced out once
        return event[single[1] : single[2]]
    lines = event.splitlines(keepends=True)
    at = _data_lines(lines)
    return b"\n".join(_field_value(lines[i]) for i in at) if at else None


def rewrite_data(event: bytes, rewrite: Callable[[bytes], bytes | None]) -> bytes:
    """The event with its ``data`` replaced by ``rewrite(data)`` on one line (unchanged on
    None)."""
    single = _single_data_line(event)
    if single is not None:
        line, value, end = single
        new = rewrite(event[value:end])
        if new is None or b"\n" in new or b"\r" in new:
            return event
        return event[:line] + b"data: " + new + event[end:]
    lines = event.splitlines(keepends=True)
    at = _data_lines(lines)
    if not at:
        return event
    new = rewrite(b"\n".join(_field_value(lines[i]) for i in at))
    if new is None or b"\n" in new or b"\r" in new:
        return event
    first = lines[at[0]]
    ending = first[len(first.rstrip(b"\r\n")) :] or b"\n"
    later = set(at[1:])
    kept = [line for i, line in enumerate(lines) if i not in later]
    kept[at[0]] = b"data: " + new + ending
    return b"".join(kept)


def _data_lines(lines: list[bytes]) -> list[int]:
    return [
        i
        for i, line in enumerate(lines)
        if line.startswith(b"data:") or line.rstrip(b"\r\n") == b"data"
    ]


def _field_value(line: bytes) -> bytes:
    value = line.rstrip(b"\r\n")[5:]
    return value[1:] if value.startswith(b" ") else value
