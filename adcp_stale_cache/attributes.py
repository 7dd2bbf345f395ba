"""Attributes of the hub that its stages hold too, and the hub's old names for theirs.

:class:`Shared`: an attribute of :class:`~adcp_stale_cache.UpstreamCache` that stages keep
a reference to (its store, surfaces, clock, metrics, failure types). Assigning it on the
cache (a test's clock, the control plane's metrics, a store configured at start-up) reaches
every stage that holds it, so no stage goes on with the old one.

:class:`Moved`: a name the hub had before its stages had modules, read and written where the
attribute lives now, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


def _resolve(obj: object, path: str) -> tuple[object | None, str]:
    """The object ``path``'s last part is an attribute of (None: not built yet), and it."""
    *parents, attribute = path.split(".")
    target: object | None = obj
    for part in parents:
        target = getattr(target, part, None)
        if target is None:
            break
    return target, attribute


class Shared(Generic[T]):
    """An attribute that the objects at ``paths`` (dotted, from the owner) hold too."""

    def __init__(self, *paths: str) -> None:
        self.paths = paths
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Shared[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Shared[T] | T:
        if obj is None:
            return self
        try:
            value: T = obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None
        return value

    def __set__(self, obj: object, value: T) -> None:
        obj.__dict__[self.name] = value
        for path in self.paths:
            target, attribute = _resolve(obj, path)
            if target is not None:  # a stage not built yet takes it when it is
                setattr(target, attribute, value)


class Moved(Generic[T]):
    """An old name for the attribute at ``path`` (deprecated); ``adapt`` turns a value
    written under the old name into what the new home takes."""

    def __init__(self, path: str, adapt: Callable[[Any, Any], T] | None = None) -> None:
        self.path, self.adapt, self.name = path, adapt, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def _warn(self) -> None:
        warnings.warn(f"UpstreamCache.{self.name} is now .{self.path}", DeprecationWarning, 3)

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Moved[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Moved[T] | T:
        if obj is None:
            return self
        self._warn()
        target, attribute = _resolve(obj, self.path)
        value: T = getattr(target, attribute)
        return value

    def __set__(self, obj: object, value: Any) -> None:
        self._warn()
        target, attribute = _resolve(obj, self.path)
        setattr(target, attribute, self.adapt(obj, value) if self.adapt else value)
