"""The example seller's one error between its tools and its transports."""

from __future__ import annotations

from typing import Any


class ToolFailed(Exception):
    """A tool could not answer at all: ``payload`` holds the fatal ``adcp_error``."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload["adcp_error"]["code"])
        self.payload = payload
