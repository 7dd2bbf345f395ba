"""The outage status (5xx, 429) an exception's text states: after a marker (``HTTP 503``),
before its reason phrase (``503 Service Unavailable``), or first after a failure's colon
(``Failed to fetch segments: 503 ...``); never in a longer number, a port or a figure."""

from __future__ import annotations

import http
import re

_STATUS = r"(?P<{name}>5\d\d|429)(?!\w|[.,]\d)"

# Longest first: an alternation stops at the first phrase that matches.
_PHRASES = sorted(
    {s.phrase for s in http.HTTPStatus if s >= 500 or s == 429} | {"Server Error"},
    key=len,
    reverse=True,
)

# Words that make the number a figure (``Failed: 500 ms``) rather than a status.
_UNITS = (
    r"(?:ms|msecs?|milliseconds?|s|secs?|seconds?|mins?|minutes?|bytes?|[kmg]i?b|%"
    r"|items?|records?|rows?|results?|segments?)"
)

_STATED = re.compile(
    "|".join(
        (
            r"\b(?:HTTP(?:/\d(?:\.\d)?)?(?:\s+error)?|status(?:[\s_-]?code)?|response[\s_-]?code"
            r"|error[\s_-]?code)\s*[:=#]?\s*" + _STATUS.format(name="marked"),
            r"(?<![\w.,:/-])"
            + _STATUS.format(name="phrased")
            + r"\s*[:-]?\s*(?:"
            + "|".join(re.escape(p) for p in _PHRASES)
            + r")\b",
            r"\b(?:fail\w*|error\w*|unavailable|unable|could\s+not|cannot|can't)\b[^:\n]{0,200}:\s+"
            + _STATUS.format(name="first")
            + r"(?!\s*"
            + _UNITS
            + r"(?!\w))",
        )
    ),
    re.IGNORECASE,
)

# A status stands near the start; a body may follow for pages.
_READ = 1024


def status_in_text(text: str) -> int | None:
    """The outage status (5xx, 429) the text states where it stands as a status, or None."""
    found = _STATED.search(text[:_READ])
    if found is None:
        return None
    return int(found.group("marked") or found.group("phrased") or found.group("first"))
