"""AdCP release negotiation for the example seller: the highest release it speaks at or below
the buyer's pin is served and echoed as ``adcp_version``; another major is
``VERSION_UNSUPPORTED``, a pin that is no release ``INVALID_REQUEST``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.advisory import AdcpError

#: The releases this seller speaks (``adcp.supported_versions``), oldest first.
SUPPORTED_VERSIONS = ("3.0", "3.1", "3.2")

# MAJOR.MINOR, an optional .PATCH, an optional -pre-release tag; short numbers only.
_RELEASE = re.compile(r"^(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})(?:\.\d{1,6})?(-[a-zA-Z0-9.-]{1,40})?$")


class VersionUnsupported(ValueError):
    """The buyer pinned a release this seller does not speak, or a pin that is none."""

    def __init__(self, pin: object, *, malformed: bool = False) -> None:
        shown = repr(pin)[:60]
        if malformed:
            message, code = f"{shown} is not an AdCP release (MAJOR.MINOR)", "INVALID_REQUEST"
        else:
            spoken = ", ".join(SUPPORTED_VERSIONS)
            message, code = f"AdCP {shown} is not spoken here: {spoken} are", "VERSION_UNSUPPORTED"
        super().__init__(message)
        self.error = AdcpError(
            code=code, message=message, field="adcp_version", recovery="correctable"
        )


def served_version(request: Mapping[str, Any]) -> str:
    """The release served to ``request``: the highest spoken at or below its pin
    (strictly below a pre-release), the newest without one."""
    pin, major = request.get("adcp_version"), request.get("adcp_major_version")
    spoken = [tuple(int(n) for n in v.split(".")) for v in SUPPORTED_VERSIONS]
    if pin is not None:
        found = _RELEASE.fullmatch(pin) if isinstance(pin, str) else None  # "3.1\n": none
        if found is None:
            raise VersionUnsupported(pin, malformed=True)
        wanted = (int(found[1]), int(found[2]))
        below = [
            v for v in spoken if v[0] == wanted[0] and (v < wanted if found[3] else v <= wanted)
        ]
        if not below:
            raise VersionUnsupported(pin)
        return _release(max(below))
    if major is not None:
        whole = isinstance(major, int) or (isinstance(major, float) and major.is_integer())
        if isinstance(major, bool) or not whole:
            raise VersionUnsupported(major, malformed=True)
        if int(major) not in {v[0] for v in spoken}:
            raise VersionUnsupported(major)
    return _release(max(spoken))


def _release(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)
