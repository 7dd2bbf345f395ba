"""``a2a_call`` reads an A2A message as the ``adcp`` SDK server does: the skill and the
arguments partition_from_call sees are those the skill runs with (no differential parsing)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adcp_stale_cache.codecs.jsonrpc import a2a_call

sdk = pytest.importorskip("adcp.server.a2a_server", reason="needs the adcp SDK's A2A server")

INVOKE = {"skill": "get_signals", "parameters": {"principal_id": "caller", "limit": 3}}
PARTS: dict[str, list[dict[str, Any]]] = {
    "data": [{"data": INVOKE}],
    "text": [{"text": json.dumps(INVOKE)}],
    "input-only": [{"data": {"skill": "get_signals", "input": {"principal_id": "victim"}}}],
    "text-and-data": [{"text": json.dumps(INVOKE)}, {"data": INVOKE}],
    "two-data": [{"data": INVOKE}, {"data": {**INVOKE, "parameters": {"principal_id": "v"}}}],
    "empty-skill": [{"data": {**INVOKE, "skill": ""}}],
    "parameters-a-list": [{"data": {**INVOKE, "parameters": ["victim"]}}],
    "prose-and-data": [{"text": "please"}, {"data": INVOKE}],
}


@pytest.mark.parametrize("name", sorted(PARTS))
@pytest.mark.parametrize(
    ("method", "role"), [("message/send", "user"), ("SendMessage", "ROLE_USER")]
)
def test_a2a_call_reads_what_the_sdk_runs(name: str, method: str, role: str) -> None:
    parts = PARTS[name]
    if method == "message/send":  # A2A 0.3 parts say their kind
        parts = [{**part, "kind": "data" if "data" in part else "text"} for part in parts]
    message = {"role": role, "messageId": "m", "parts": parts}
    runs = sdk.parse_a2a_jsonrpc_skill(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
    )
    skill, arguments = a2a_call(message)
    assert (skill, arguments or {}) == runs
