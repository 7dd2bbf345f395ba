"""The last bound on a client call: past it, a :class:`TimeoutError` (a ``TIMEOUT`` outage)."""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import TypeVar

from ..pipeline.singleflight import call_with_deadline

T = TypeVar("T")


def checked_timeout(seconds: float) -> float:
    """``seconds`` as a float when finite and above 0, else :class:`ValueError`."""
    is_number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if not is_number or not 0 < seconds < math.inf:  # NaN compares false: refused too
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {seconds!r}")
    return float(seconds)


async def within(call: Awaitable[T], seconds: float, what: str) -> T:
    """``call``'s result, or :class:`TimeoutError` naming ``what`` after ``seconds``; the call
    is cancelled, not awaited (a client's cleanup to a frozen server must not hold the answer)."""
    try:
        return await call_with_deadline(lambda: call, seconds)
    except TimeoutError:  # the deadline's (a call's own TimeoutError is a timeout alike)
        raise TimeoutError(f"no answer from {what} within {seconds:g}s") from None
