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
    """The labels of these facts: what an entry is stored with, and what a selection of
    entries asks for (one spelling for both)."""
    facts = (("upstream", upstream), ("surface", surface), ("url", url), ("partition", partition))
    found = [f"{name}={_escaped(value)}" for name, value in facts if value is not None]
    # A tag may be anyone's text (a buyer's account id): data, never an error. Line breaks,
    # backslashes and lone surrogates are escaped, so that every store keeps a label on one
    # line in UTF-8, and a selection spells a tag as its entries do.
    found.extend(f"tag={_escaped(str(tag))}" for tag in tags)
    return tuple(found)


def _escaped(tag: str) -> str:
    escaped = tag.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    # A lone surrogate (JSON allows "\ud800") has no UTF-8 form: no store could write it.
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", escaped)


_SURROGATE = re.compile("[\ud800-\udfff]")


def entry_labels(
    upstream: Upstream, surface: str, partition: str | None, tags: Iterable[str]
) -> tuple[str, ...]:
    """The labels the cache stores with an entry (what invalidations select by; and
    ``credentials=own`` for an upstream called with a tenant's own credentials: the entry is
    that tenant's, as a per-caller one is. Never the credentials, nor a digest of them:
    labels are shown to operators)."""
    found = labels(
        upstream=upstream.name, url=upstream.url, surface=surface, partition=partition, tags=tags
    )
    return found if upstream.credentials is None else (*found, "credentials=own")


def built_from(store_key: str) -> str:
    """The label an entry built from the entry under ``store_key`` carries (a catalog answer
    whose call read an account through the cache): a purge of that key takes it too."""
    return f"from={_escaped(store_key)}"


def label_value(entry_labels: Iterable[str], name: str) -> str | None:
    """The value of the label ``name`` among ``entry_labels``, if there is one."""
    prefix = f"{name}="
    return next((label[len(prefix) :] for label in entry_labels if label.startswith(prefix)), None)
