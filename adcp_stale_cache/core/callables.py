"""Whether a seller's function is async, told by what it is (not by calling it), and how
long the library awaits."""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is async, behind ``functools.wraps`` or an async ``__call__`` too."""
    unwrapped = inspect.unwrap(fn)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(unwrapped):
        return True
    if isinstance(unwrapped, type) or inspect.isroutine(unwrapped):
        return False
    return inspect.iscoroutinefunction(inspect.unwrap(type(unwrapped).__call__))


async def awaited(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited when it returns an awaitable."""
    answer = fn(*args, **kwargs)
    return await answer if inspect.isawaitable(answer) else answer


if sys.version_info >= (3, 11):

    async def bounded(awaitable: Awaitable[T], seconds: float) -> T:
        """``awaitable``'s result, or :class:`TimeoutError` (it cancelled) after ``seconds``:
        awaited in the caller's task, where ``asyncio.wait_for`` before 3.12 makes a task of
        its own and wakes the caller a turn of the loop later."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:

    async def bounded(awaitable: Awaitable[T], seconds: float) -> T:
        """``awaitable``'s result, or :class:`asyncio.TimeoutError` after ``seconds``."""
        return await asyncio.wait_for(awaitable, seconds)
