"""Reading a tool's result as the MCP clients return it (mcp 1.x and 2.x spell members apart)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is needed")

from adcp_stale_cache import InvalidPayload, UpstreamError
from adcp_stale_cache.integrations.mcp_client import _answer_of


@dataclass
class Text:
    text: str


@dataclass
class V2Result:
    """mcp 2.x's members, with the 1.x names kept as deprecated aliases (as under fastmcp 4)."""

    is_error: bool = False
    structured_content: dict[str, Any] | None = None
    content: list[Text] = field(default_factory=list)

    @property
    def isError(self) -> bool:
        warnings.warn("isError is deprecated", DeprecationWarning, stacklevel=2)
        return self.is_error

    @property
    def structuredContent(self) -> dict[str, Any] | None:
        warnings.warn("structuredContent is deprecated", DeprecationWarning, stacklevel=2)
        return self.structured_content


@dataclass
class V1Result:
    isError: bool = False
    structuredContent: dict[str, Any] | None = None
    content: list[Text] = field(default_factory=list)


def test_a_v2_result_is_read_by_its_own_names_only() -> None:
    """``False`` and ``None`` under the 2.x names are answers, not reasons to read the aliases."""
    payload = {"formats": [], "adcp_error": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _answer_of(V2Result(structured_content=payload), "t") == payload
        text = V2Result(content=[Text(json.dumps(payload))])
        assert _answer_of(text, "t") == payload


def test_a_v1_result_is_read_by_its_names() -> None:
    assert _answer_of(V1Result(structuredContent={"formats": []}), "t") == {"formats": []}
    with pytest.raises(UpstreamError):
        _answer_of(V1Result(isError=True, content=[Text("boom")]), "t")


def test_failures_read_alike_in_both() -> None:
    failed = {"adcp_error": {"code": "RATE_LIMITED", "message": "slow down"}}
    for result in (V1Result(structuredContent=failed), V2Result(structured_content=failed)):
        with pytest.raises(UpstreamError) as raised:
            _answer_of(result, "t")
        assert raised.value.code == "RATE_LIMITED"
    with pytest.raises(InvalidPayload):
        _answer_of(V2Result(content=[Text("not JSON")]), "t")
