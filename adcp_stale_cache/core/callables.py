"""What a seller's function is: async or plain, told by what it is, not by one call.

``inspect.iscoroutinefunction`` alone says "plain" of an async function behind a seller's own
``functools.wraps`` decorator, or of an object with an async ``__call__``: a decorator of
this library would then run it as a plain function and get its coroutine back, unawaited.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is async: a coroutine function (marked with
    ``inspect.markcoroutinefunction`` too), one behind decorators that keep ``__wrapped__``
    (``functools.wraps``), or an object whose ``__call__`` is one."""
    unwrapped = inspect.unwrap(fn)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(unwrapped):
        return True
    if isinstance(unwrapped, type) or inspect.isroutine(unwrapped):
        return False
    return inspect.iscoroutinefunction(inspect.unwrap(type(unwrapped).__call__))


async def awaited(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited when it returns an awaitable (a seller's plain
    wrapper of an async function may also answer at once)."""
    answer = fn(*args, **kwargs)
    return await answer if inspect.isawaitable(answer) else answer
