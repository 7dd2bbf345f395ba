"""AdCP release negotiation for the example seller: what it advertises, what it echoes.

A buyer pins a release (``adcp_version: "3.1"``, AdCP 3.1+) or a major
(``adcp_major_version: 3``); the seller serves the highest release it speaks at or below
the pin within the pin's major, echoes it as ``adcp_version`` on every answer, and refuses a
major it does not speak with ``VERSION_UNSUPPORTED``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..advisory import AdcpError

#: The releases this seller speaks (``adcp.supported_versions``), oldest first.
SUPPORTED_VERSIONS = ("3.0", "3.1", "3.2")

_RELEASE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?)?$"
)


class VersionUnsupported(ValueError):
    """The buyer pinned a release or major this seller does not speak."""

    def __init__(self, pin: object) -> None:
        super().__init__(f"AdCP {pin} is not spoken here: {', '.join(SUPPORTED_VERSIONS)} are")
        self.error = AdcpError(
            code="VERSION_UNSUPPORTED", message=str(self), field="adcp_version",
            recovery="correctable",
        )  # fmt: skip


def served_version(request: Mapping[str, Any]) -> str:
    """The release served to ``request``: the highest spoken at or below its pin (a
    pre-release pin counts as its release), the newest when it pins none."""
    pin, major = request.get("adcp_version"), request.get("adcp_major_version")
    spoken = [tuple(int(n) for n in v.split(".")) for v in SUPPORTED_VERSIONS]
    if isinstance(pin, str):
        found = _RELEASE.match(pin)
        if found is None:
            raise VersionUnsupported(pin)
        wanted = (int(found[1]), int(found[2]))
        below = [v for v in spoken if v[0] == wanted[0] and v <= wanted]
        if not below:
            raise VersionUnsupported(pin)
        return _release(max(below))
    if major is not None and major not in {v[0] for v in spoken}:
        raise VersionUnsupported(major)
    return _release(max(spoken))


def _release(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)
