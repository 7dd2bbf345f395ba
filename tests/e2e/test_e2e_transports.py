"""The example seller over A2A (a2a-sdk client, and the 0.3 / 1.0 wire) and MCP (mcp client),
with the inventory service down: advisories with transport success, and never on the wrong call.

Freshness target 0: every call refreshes, so the healthy creative agent always answers fresh
and the dead inventory service is always served stale.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import httpx
import pytest

from ..deployment import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def seller() -> Iterator[Deployment]:
    flags = ("--freshness-target", "0", "--max-stale", "600", "--upstream-timeout", "2")
    with Deployment(*flags, agents="a") as deployment:
        httpx.post(
            f"{deployment.url}/api/get_products", json={}, timeout=10
        ).raise_for_status()  # warm
        deployment.inventory.kill()
        yield deployment


def skill_message(skill: str, *, v03: bool = False) -> dict[str, Any]:
    data = {"skill": skill, "parameters": {"context": {"correlation_id": f"c-{skill}"}}}
    if v03:
        return {
            "kind": "message",
            "messageId": str(uuid4()),
            "role": "user",
            "parts": [{"kind": "data", "data": data}],
        }
    return {"messageId": str(uuid4()), "role": "ROLE_USER", "parts": [{"data": data}]}


def task_payload(task: dict[str, Any]) -> dict[str, Any]:
    parts = task["artifacts"][-1]["parts"]
    payload: dict[str, Any] = [p["data"] for p in parts if "data" in p][-1]
    return payload


def check(skill: str, payload: dict[str, Any], *, protobuf: bool = False) -> None:
    assert payload["context"] == {"correlation_id": f"c-{skill}"}
    if skill == "get_products":
        assert payload["products"]
        [advisory] = payload["errors"]
        assert advisory["code"] == "STALE_RESPONSE"
        assert advisory["field"] == "products"
        assert advisory["details"]["upstream"] == {"name": "inventory-service"}
        assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
        age = advisory["details"]["cache_age_seconds"]
        # On the wire it is an integer; a2a-sdk clients decode every number of a DataPart
        # through protobuf's Struct, which only knows doubles.
        assert isinstance(age, int) or (protobuf and age == int(age))
    else:
        assert payload["formats"]
        assert "errors" not in payload


async def send_v1(http: httpx.AsyncClient, url: str, skill: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": str(uuid4()),
        "method": "SendMessage",
        "params": {"message": skill_message(skill)},
    }
    response = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
    assert response.status_code == 200
    task: dict[str, Any] = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return task


@pytest.mark.parametrize("skill", ["get_products", "list_creative_formats"])
async def test_a2a_v1_send_message(seller: Deployment, skill: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        check(skill, task_payload(await send_v1(http, f"{seller.url}/", skill)))


async def test_a2a_v03_message_send(seller: Deployment) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "message/send",
        "params": {"message": skill_message("get_products", v03=True)},
    }
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{seller.url}/", json=body)
    task = response.json()["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    check("get_products", task_payload(task))


@pytest.mark.parametrize(
    "v03", [False, True], ids=["v1-SendStreamingMessage", "v03-message-stream"]
)
async def test_a2a_streaming(seller: Deployment, v03: bool) -> None:
    method = "message/stream" if v03 else "SendStreamingMessage"
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": method,
        "params": {"message": skill_message("get_products", v03=v03)},
    }
    headers = {"accept": "text/event-stream", **({} if v03 else {"A2A-Version": "1.0"})}
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{seller.url}/", json=body, headers=headers)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
    ]
    results = [e["result"] for e in events]
    artifacts = [
        r.get("artifactUpdate", r)
        for r in results
        if "artifactUpdate" in r or r.get("kind") == "artifact-update"
    ]
    statuses = [
        r.get("statusUpdate", r)["status"]["state"]
        for r in results
        if "statusUpdate" in r or r.get("kind") == "status-update"
    ]
    assert statuses[-1] in ("completed", "TASK_STATE_COMPLETED")
    [artifact] = artifacts
    payload = [p["data"] for p in artifact["artifact"]["parts"] if "data" in p][-1]
    check("get_products", payload)


async def test_a2a_sdk_client_sees_advisory_with_completed_task(seller: Deployment) -> None:
    from a2a import types as pb
    from a2a.client import ClientConfig, create_client
    from google.protobuf.json_format import MessageToDict, ParseDict
    from google.protobuf.struct_pb2 import Value

    data = Value()
    ParseDict(
        {"skill": "get_products", "parameters": {"context": {"correlation_id": "c-get_products"}}},
        data,
    )
    message = pb.Message(
        message_id=str(uuid4()), role=pb.Role.ROLE_USER, parts=[pb.Part(data=data)]
    )
    async with httpx.AsyncClient(timeout=10) as http:
        for streaming in (False, True):
            client = await create_client(
                seller.url, client_config=ClientConfig(streaming=streaming, httpx_client=http)
            )
            events = [
                MessageToDict(e)
                async for e in client.send_message(pb.SendMessageRequest(message=message))
            ]
            tasks = [e["task"] for e in events if "task" in e]
            artifacts = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
            states = [
                (e.get("statusUpdate") or e.get("task", {}))["status"]["state"]
                for e in events
                if "statusUpdate" in e or "task" in e
            ]
            assert states[-1] == "TASK_STATE_COMPLETED"
            last = artifacts[-1] if artifacts else tasks[-1]["artifacts"][-1]
            check(
                "get_products", [p["data"] for p in last["parts"] if "data" in p][-1], protobuf=True
            )


async def test_a2a_concurrent_calls_never_share_advisories(seller: Deployment) -> None:
    skills = ["get_products" if i % 2 else "list_creative_formats" for i in range(50)]
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=50)) as http:
        tasks = await asyncio.gather(*(send_v1(http, f"{seller.url}/", s) for s in skills))
    for skill, task in zip(skills, tasks, strict=True):
        check(skill, task_payload(task))


async def test_mcp_concurrent_calls_on_one_stateful_session(seller: Deployment) -> None:
    from mcp import Client

    tools = ["get_products" if i % 2 else "list_creative_formats" for i in range(50)]
    async with Client(f"{seller.url}/mcp", cache=None) as client:
        results = await asyncio.gather(
            *(client.call_tool(t, {"context": {"correlation_id": f"c-{t}"}}) for t in tools)
        )
    for tool, result in zip(tools, results, strict=True):
        assert result.is_error is False
        check(tool, result.structured_content or json.loads(result.content[0].text))
