"""Whether a seller's function is async, told by what it is (not by calling it)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


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
