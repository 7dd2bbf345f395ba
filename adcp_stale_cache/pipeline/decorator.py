"""The decorator form of a fetch: :meth:`UpstreamCache.cached`'s wrappers, async or blocking."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from ..core.callables import awaited, is_async
from ..core.policy import SurfacePolicy, Upstream
from ..core.values import Codec

if TYPE_CHECKING:
    from .cache import UpstreamCache

T = TypeVar("T")
P = ParamSpec("P")


class Decorator(Protocol):
    """What :meth:`UpstreamCache.cached` returns: an async function stays async, a plain one
    gets a blocking wrapper (through :meth:`UpstreamCache.fetch_blocking`)."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]: ...


def decorator(
    cache: UpstreamCache,
    upstream: Upstream,
    surface: str | SurfacePolicy | None,
    key: Callable[..., object] | None,
    codec: Codec[Any],
    tags: Iterable[str] | Callable[..., Iterable[str]],
) -> Decorator:
    """What :meth:`UpstreamCache.cached` returns for these arguments."""

    def keyed(fn: Callable[..., Any], args: Any, kwargs: Any) -> tuple[object, Iterable[str]]:
        k = key(*args, **kwargs) if key else (fn.__qualname__, args, kwargs)
        return k, tags(*args, **kwargs) if callable(tags) else tags

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        if key is None and not hasattr(fn, "__qualname__"):
            # Two instances of one class (two tenants' clients) must not share keys.
            raise TypeError(f"cached() of a {type(fn).__qualname__} object needs key=")
        if not is_async(fn):

            @functools.wraps(fn)
            def blocking(*args: Any, **kwargs: Any) -> Any:
                k, call_tags = keyed(fn, args, kwargs)
                call = functools.partial(fn, *args, **kwargs)
                return cache.fetch_blocking(
                    upstream, k, call, surface=surface, codec=codec, tags=call_tags
                )

            return blocking

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            k, call_tags = keyed(fn, args, kwargs)
            call = functools.partial(awaited, fn, *args, **kwargs)
            return await cache.fetch(
                upstream, k, call, surface=surface, codec=codec, tags=call_tags
            )

        return wrapper

    return decorate
