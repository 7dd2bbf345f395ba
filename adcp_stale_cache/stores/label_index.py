"""Which entries carry a label: the index that lets a purge by labels touch only what it
selects, not every entry of a store (memory and file stores; Redis keeps sets of its own).

A purge's ``match`` that is :class:`~adcp_stale_cache.stores.Selecting` (a
:class:`~adcp_stale_cache.ops.control.Selection`) says which labels every selected entry carries
and, for one key, which key and the label of the entries built from it. Any other ``match``
(a plain callable) says nothing about what it selects: the store scans. Candidates are always
checked with ``match`` itself, so the index decides how much is read, never what is selected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .base import Selecting

#: The order in which labels narrow a selection best: a tag or a partition names few entries,
#: an upstream or its URL many (the file store looks the first one up, then checks the rest).
_NARROWEST = ("tag=", "partition=", "surface=", "credentials=", "url=", "upstream=")


def selected_by(match: Callable[..., Any]) -> tuple[list[str], str | None, str | None] | None:
    """The labels (narrowest first), the store key and the label of the entries built from
    that key a selection names; None when ``match`` names neither labels nor a key (it must
    be asked of every entry)."""
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
    """Label -> the keys of the entries that carry it. Kept exact by its owner on every
    write, overwrite, eviction, expiry and delete; a label no entry carries any more is
    forgotten, so the index holds what the entries hold, whatever the churn."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, set[str]] = {}

    def add(self, key: str, labels: Iterable[str]) -> None:
        """``key`` carries ``labels``."""
        for label in labels:
            keys = self._keys.get(label)
            if keys is None:
                self._keys[label] = {key}
            else:
                keys.add(key)

    def remove(self, key: str, labels: Iterable[str]) -> None:
        """``key`` (no longer) carries ``labels``."""
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
        """Forget everything."""
        self._keys.clear()

    def __len__(self) -> int:
        """How many labels are indexed."""
        return len(self._keys)
