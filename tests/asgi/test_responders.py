"""responder_for: who writes an answer, decided from its start alone."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache.asgi.responders import EventStreamResponder, JsonResponder, responder_for
from adcp_stale_cache.codecs import Untouched

JSON, EVENTS, HTML = "application/json", "text/event-stream", "text/html"


def start(status: int = 200, media: str = JSON, **headers: str) -> dict[str, Any]:
    raw = [(b"content-type", media.encode())] if media else []
    raw += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http.response.start", "status": status, "headers": raw}


@pytest.mark.parametrize(
    ("response", "calls", "advisories", "in_doubt", "chosen"),
    [
        (start(), 0, False, False, None),  # nothing to add, nothing to check
        (start(), 1, False, False, None),
        (start(media=EVENTS), 1, False, False, EventStreamResponder),
        (start(media=EVENTS), 1, True, False, EventStreamResponder),
        (start(), 0, True, False, JsonResponder),
        (start(media="application/problem+json"), 2, True, False, JsonResponder),
        (start(media=HTML), 0, False, True, JsonResponder),  # in doubt: read if JSON
        (start(media=""), 1, False, True, JsonResponder),
        (start(media=HTML), 0, True, False, "not_json"),
        (start(media=""), 0, True, False, "not_json"),
        (start(media=EVENTS), 2, True, False, "not_json"),
        (start(media=EVENTS), 0, False, True, "unwritable"),  # said: unchecked
        (start(500), 0, True, False, "error_status"),
        (start(500), 0, False, True, "error_status"),  # in doubt: said unchecked
        (start(204), 0, True, False, "no_body"),
        (start(304), 1, True, True, "no_body"),
        (start(content_encoding="gzip"), 0, True, False, "compressed"),
        (start(media=EVENTS, content_encoding="br"), 1, True, False, "compressed"),
        (start(content_encoding="identity"), 0, True, False, JsonResponder),
    ],
)
def test_who_writes_an_answer(
    response: dict[str, Any], calls: int, advisories: bool, in_doubt: bool, chosen: Any
) -> None:
    found = responder_for(response, {"method": "POST"}, calls, advisories, in_doubt)
    if isinstance(chosen, str):
        assert isinstance(found, Untouched) and found.reason == chosen
    else:
        assert found is chosen


def test_a_head_request_gets_no_body_rewritten() -> None:
    found = responder_for(start(), {"method": "HEAD"}, 0, True, False)
    assert isinstance(found, Untouched) and found.reason == "no_body"
