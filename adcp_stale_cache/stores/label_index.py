"""Which entries carry a label, so a purge by labels reads only what it selects (memory and
file stores); ``match`` itself still decides what is selected."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .base import Selecting

#: Narrowest first: a tag or a partition names few entries, an upstream many.
_NARROWEST = ("tag=", "partition=", "surface=", "credentials=", "url=", "upstream=")


def selected_by(match: Callable[..., Any]) -> tuple[list[str], str | None, str | None] | None:
    """The labels (narrowest first), store key and built-from label a selection names; None
    when ``match`` names neither labels nor a key (it must be asked of every entry)."""
    if not isinstance(match, Selecting):
        return None
    labels = sorted(match.labels, key=_narrowness)
    store_key = match.store_key
    if not labels and store_key is None:
        return None
    return labels, store_key, match.from_key if store_key is not None else None


def _narrowness(label: str) -> tuple[int, str]:
    rank = next((i for i, p in enumerate(_NARROWEST) if label.startswith(p)), len(_NARROWEST))
    return rank, label


class LabelIndex:
    """Label -> the keys of the entries that carry it, kept exact by its owner on every change;
    a label no entry carries any more is forgotten."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, set[str]] = {}

    def add(self, key: str, labels: Iterable[str]) -> None:
        for label in labels:
            keys = self._keys.get(label)
            if keys is None:
                self._keys[label] = {key}
            else:
                keys.add(key)

    def remove(self, key: str, labels: Iterable[str]) -> None:
        for label in labels:
            keys = self._keys.get(label)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._keys[label]

    def candidates(self, labels: list[str]) -> list[str]:
        """The keys that carry every one of ``labels`` (at least one label)."""
        sets = [self._keys.get(label) for label in labels]
        present = [keys for keys in sets if keys is not None]
        if len(present) < len(sets):
            return []
        present.sort(key=len)
        first, rest = present[0], present[1:]
        return [key for key in first if all(key in keys for keys in rest)]

    def pairs(self) -> set[tuple[str, str]]:
        """Every (label, key) held: for tests and inspection."""
        return {(label, key) for label, keys in self._keys.items() for key in keys}

    def clear(self) -> None:
        self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)
