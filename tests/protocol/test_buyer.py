"""The buyer's reader (issue 16): advisories and the items they cover, from every shape a
client returns, and from a real ``adcp`` client over MCP and A2A against the example seller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adcp_stale_cache.buyer import covered_items, payload_of, stale_advisories, summary
from adcp_stale_cache.demo.processes import App, free_port

from ..servers import START_SECONDS

ADVISORY = {
    "code": "STALE_RESPONSE", "message": "Served cached formats", "recovery": "transient",
    "field": "formats",
    "details": {"served_from_cache": True, "cache_age_seconds": 75, "freshness_target_seconds": 60,
                "upstream": {"name": "agent-a", "url": "https://a.example/mcp"},
                "original_error": {"code": "TIMEOUT", "message": "Upstream timed out"}},
}  # fmt: skip
PAYLOAD = {
    "formats": [
        {"format_id": {"agent_url": "https://a.example/mcp", "id": "a1"}},
        {"format_id": {"agent_url": "https://b.example/mcp", "id": "b1"}},
    ],
    "errors": [ADVISORY, {"code": "OTHER", "message": "x"}],
}


def test_from_a_payload_dict() -> None:
    [advisory] = stale_advisories(PAYLOAD)
    assert (advisory.upstream, advisory.age_seconds, advisory.original_error) == (
        "agent-a", 75, "TIMEOUT")  # fmt: skip
    assert covered_items(PAYLOAD, advisory) == [PAYLOAD["formats"][0]]  # agent a's only
    assert summary([advisory]) == (
        "served from cache: formats from agent-a: 75 s old (target 60 s), TIMEOUT"
    )
    assert summary([]) == "fresh: no stale data"


def test_items_that_do_not_say_their_origin_are_all_covered() -> None:
    payload = {"products": [{"product_id": "p1"}, {"product_id": "p2"}],
               "errors": [{**ADVISORY, "field": "products",
                           "details": {**ADVISORY["details"], "upstream": {"name": "inv"}}}]}  # fmt: skip
    [advisory] = stale_advisories(payload)
    assert covered_items(payload, advisory) == payload["products"]


def test_from_mcp_results_a2a_tasks_and_messages() -> None:
    import json

    from mcp.types import CallToolResult, TextContent

    structured = CallToolResult(content=[], structuredContent=PAYLOAD, isError=False)
    text_only = CallToolResult(content=[TextContent(type="text", text=json.dumps(PAYLOAD))])
    failed = CallToolResult(content=[TextContent(type="text", text=json.dumps(PAYLOAD))],
                            isError=True)  # fmt: skip
    task_03 = {"kind": "task", "id": "t", "contextId": "c", "status": {"state": "completed"},
               "artifacts": [{"parts": [{"kind": "data", "data": PAYLOAD}, {"kind": "text"}]}]}  # fmt: skip
    task_10 = {"task": {**task_03, "status": {"state": "TASK_STATE_COMPLETED"}}}
    not_done = {**task_03, "status": {"state": "failed"}}
    message = {"kind": "message", "parts": [{"kind": "data", "data": PAYLOAD}]}
    for shape in (structured, text_only, task_03, task_10, message, {"result": task_03}):
        assert [a.upstream for a in stale_advisories(shape)] == ["agent-a"], shape
    for shape in (failed, not_done, {"adcp_error": ADVISORY}, None, "text"):
        assert stale_advisories(shape) == [] and payload_of(shape) is None


def test_from_a2a_sdk_protobuf_tasks() -> None:
    pytest.importorskip("a2a", reason="the a2a extra is needed")
    from a2a import types as pb
    from google.protobuf.json_format import ParseDict
    from google.protobuf.struct_pb2 import Value

    value = Value()
    ParseDict(PAYLOAD, value)
    task = pb.Task(id="t", context_id="c",
                   status=pb.TaskStatus(state=pb.TaskState.TASK_STATE_COMPLETED),
                   artifacts=[pb.Artifact(artifact_id="a", parts=[pb.Part(data=value)])])  # fmt: skip
    [advisory] = stale_advisories(task)
    assert advisory.age_seconds == 75  # protobuf's Struct decodes numbers as doubles


@pytest.fixture(scope="module")
def outage() -> Iterator[dict[str, App]]:
    """The example seller, warmed, with its inventory service and agent a then killed."""
    apps = {
        "inventory": App("inventory-service", free_port(), quiet=True),
        "a": App("creative-agent", free_port(), "--name", "a", quiet=True),
        "b": App("creative-agent", free_port(), "--name", "b", quiet=True),
    }
    apps["seller"] = App(
        "seller", free_port(), "--inventory-service", apps["inventory"].url,
        "--creative-agent", f"a={apps['a'].url}/mcp", "--creative-agent", f"b={apps['b'].url}/mcp",
        "--freshness-target", "0", "--upstream-timeout", "2", quiet=True,
    )  # fmt: skip
    try:
        for app in apps.values():
            app.start()
        for app in apps.values():
            app.wait(START_SECONDS)
        for tool in ("get_products", "list_creative_formats"):
            httpx.post(f"{apps['seller'].url}/api/{tool}", json={}, timeout=20).raise_for_status()
        apps["inventory"].kill()
        apps["a"].kill()
        yield apps
    finally:
        for app in apps.values():
            app.stop()


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore::DeprecationWarning:adcp")  # the adcp client's own
@pytest.mark.parametrize("protocol", ["mcp", "a2a"])
async def test_a_real_adcp_client_call_read_by_the_buyer_reader(
    outage: dict[str, App], protocol: str
) -> None:
    pytest.importorskip("adcp", reason="the adcp extra is needed")
    from adcp import ADCPClient
    from adcp.types import GetProductsRequest, LegacyListCreativeFormatsRequest
    from adcp.types.core import AgentConfig, Protocol

    seller = outage["seller"]
    uri = f"{seller.url}/mcp" if protocol == "mcp" else seller.url
    # debug=True: adcp 9.2 over A2A marks an answer with errors[] failed and drops its payload
    # from data; the reader recovers it from the wire answer kept in debug_info.
    config = AgentConfig(id="seller", agent_uri=uri, protocol=Protocol(protocol), debug=True)
    client = ADCPClient(config)
    products: Any = await client.get_products(GetProductsRequest(buying_mode="brief", brief="x"))
    assert products.success is (protocol == "mcp")
    assert (products.data is None) is (protocol == "a2a")
    [advisory] = stale_advisories(products)
    assert advisory.upstream == "inventory-service" and advisory.field == "products"
    assert covered_items(payload_of(products), advisory) == payload_of(products)["products"]
    # adcp 9.2 names the list_creative_formats tool's call "legacy" (a newer creative API).
    formats: Any = await client.list_creative_formats_legacy(LegacyListCreativeFormatsRequest())
    [advisory] = stale_advisories(formats)
    assert advisory.upstream == "a" and advisory.upstream_url == f"{outage['a'].url}/mcp"
    covered = covered_items(payload_of(formats), advisory)
    every = payload_of(formats)["formats"]
    assert covered and len(covered) < len(every)  # agent a's formats, not b's
    assert all(f["format_id"]["agent_url"] == advisory.upstream_url for f in covered)
    assert summary([advisory]).startswith("served from cache: formats from a: ")


@pytest.mark.parametrize(
    "response",
    [
        {"status": {"state": "completed"}, "contextId": "c", "artifacts": ["a string"]},
        {"status": {"state": "completed"}, "contextId": "c", "artifacts": {"parts": []}},
        {"status": "completed", "contextId": "c", "artifacts": []},
        {
            "formats": [],
            "errors": [{"code": "STALE_RESPONSE", "details": {"upstream": {"url": 7}}}],
        },
        # Found by the hostile review: MCP content of odd shapes, text nested past reading,
        # ages json.loads reads but no integer holds.
        {"isError": False, "content": 5},
        {"content": [5, {"type": "text", "text": 5}, {"type": "text", "text": None}]},
        {"content": [{"type": "text", "text": "[" * 100_000}]},
        {"errors": [{"code": "STALE_RESPONSE", "details": {"cache_age_seconds": float("inf")}}]},
        {"errors": [{"code": "STALE_RESPONSE", "details": {"cache_age_seconds": float("nan")}}]},
    ],
)
def test_odd_shapes_read_as_nothing_never_raise(response: Any) -> None:
    """Issue 22 (low): the buyer's reader reads "nothing" from odd shapes."""
    from adcp_stale_cache.buyer import payload_of, stale_advisories

    payload_of(response)
    for advisory in stale_advisories(response):
        assert advisory.upstream_url is None and advisory.age_seconds is None
