"""The labels an entry is stored with: what it is of, so that invalidations can select it."""

from __future__ import annotations

from collections.abc import Iterable

from .policy import Upstream


def entry_labels(
    upstream: Upstream, surface: str, partition: str | None, tags: Iterable[str]
) -> tuple[str, ...]:
    """The labels the cache stores with an entry (what invalidations select by)."""
    labels = [f"upstream={upstream.name}", f"surface={surface}"]
    if upstream.url is not None:
        labels.append(f"url={upstream.url}")
    if partition is not None:
        labels.append(f"partition={partition}")
    for tag in tags:
        if not tag or "\n" in tag:
            raise ValueError(f"a tag is a non-empty line of text: {tag!r}")
        labels.append(f"tag={tag}")
    return tuple(labels)
