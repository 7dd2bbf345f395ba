"""The labels an entry is stored with: what it is of, so that invalidations can select it."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .policy import Upstream


def labels(
    *,
    upstream: str | None = None,
    url: str | None = None,
    surface: str | None = None,
    partition: str | None = None,
    tags: Iterable[str] = (),
) -> tuple[str, ...]:
    """The labels of these facts: one spelling for entries and for selections of them."""
    facts = (("upstream", upstream), ("surface", surface), ("url", url), ("partition", partition))
    found = [f"{name}={_escaped(value)}" for name, value in facts if value is not None]
    # A tag may be anyone's text: escaped so that every store keeps it on one UTF-8 line.
    found.extend(f"tag={_escaped(str(tag))}" for tag in tags)
    return tuple(found)


def _escaped(tag: str) -> str:
    escaped = tag.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if escaped.isascii():  # no surrogate: most labels skip the regex
        return escaped
    # A lone surrogate (JSON allows "\ud800") has no UTF-8 form: no store could write it.
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", escaped)


_SURROGATE = re.compile("[\ud800-\udfff]")


def entry_labels(
    upstream: Upstream, surface: str, partition: str | None, tags: Iterable[str]
) -> tuple[str, ...]:
    """The labels the cache stores with an entry; ``credentials=own`` marks a tenant's own
    (never the credentials, nor a digest: operators see labels)."""
    found = labels(
        upstream=upstream.name, url=upstream.url, surface=surface, partition=partition, tags=tags
    )
    return found if upstream.credentials is None else (*found, "credentials=own")


def built_from(store_key: str) -> str:
    """The label of an entry built from the one under ``store_key``: purging that takes it."""
    return f"from={_escaped(store_key)}"


def label_value(entry_labels: Iterable[str], name: str) -> str | None:
    """The value of the label ``name`` among ``entry_labels``, or None."""
    prefix = f"{name}="
    return next((label[len(prefix) :] for label in entry_labels if label.startswith(prefix)), None)
