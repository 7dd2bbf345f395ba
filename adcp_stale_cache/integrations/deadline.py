"""The last bound on a client call: past it, a :class:`TimeoutError` (a ``TIMEOUT`` outage
the cache serves stale over), never a wait for an answer a client lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(call: Awaitable[T], seconds: float, what: str) -> T:
    """``call``'s result, or :class:`TimeoutError` naming ``what`` after ``seconds``."""
    try:
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError:  # not TimeoutError itself before Python 3.11
        raise TimeoutError(f"no answer from {what} within {seconds:g}s") from None
