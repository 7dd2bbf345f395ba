"""The outage status (5xx, 429) an exception's text states, read conservatively.

Sellers' own client wrappers often raise ``Exception(f"Failed to fetch segments:
{response.status_code} {response.text}")``. A number counts as a status only where it stands
as one:

- after a status marker: ``HTTP 503``, ``HTTP/1.1 503``, ``status code: 503``,
  ``status_code=503``, ``error code 503``;
- before its reason phrase: ``503 Service Unavailable``, ``500 Server Error`` (requests);
- first after the colon of a failure: ``Failed to fetch segments: 503 <body>``, unless a unit
  follows (``Failed: 500 ms``).

Never inside a longer number (``id 500123``, ``1,500``, ``5.003``), nor a port
(``host:503``), nor a figure (``took 500 ms``).
"""

from __future__ import annotations

import http
import re

# The statuses that stand for an outage (a 5xx, or 429), never part of a longer number.
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
            # A status marker, then the status.
            r"\b(?:HTTP(?:/\d(?:\.\d)?)?(?:\s+error)?|status(?:[\s_-]?code)?|response[\s_-]?code"
            r"|error[\s_-]?code)\s*[:=#]?\s*" + _STATUS.format(name="marked"),
            # The status, then its reason phrase.
            r"(?<![\w.,:/-])"
            + _STATUS.format(name="phrased")
            + r"\s*[:-]?\s*(?:"
            + "|".join(re.escape(p) for p in _PHRASES)
            + r")\b",
            # A failure, a colon, then the status first (no unit after it).
            r"\b(?:fail\w*|error\w*|unavailable|unable|could\s+not|cannot|can't)\b[^:\n]{0,200}:\s+"
            + _STATUS.format(name="first")
            + r"(?!\s*"
            + _UNITS
            + r"(?!\w))",
        )
    ),
    re.IGNORECASE,
)

# How much of a text is read: a status stands near its start, a body may follow for pages.
_READ = 1024


def status_in_text(text: str) -> int | None:
    """The outage status (5xx, 429) the text states where it stands as a status, or None."""
    found = _STATED.search(text[:_READ])
    if found is None:
        return None
    return int(found.group("marked") or found.group("phrased") or found.group("first"))
