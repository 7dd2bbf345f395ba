"""The buyer's side: read ``STALE_RESPONSE`` advisories from whatever a client returned: a
payload, an MCP result, an A2A task or message (JSON or ``a2a-sdk`` protobuf), an ``adcp``
``TaskResult`` (docs: For buyers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .codecs.json import loads
from .core.advisory import STALE_RESPONSE


@dataclass(frozen=True)
class StaleAdvisory:
    """One ``STALE_RESPONSE`` entry of ``errors[]``, read."""

    upstream: str | None
    upstream_url: str | None
    age_seconds: int | None
    freshness_target_seconds: int | None
    field: str | None
    original_error: str | None
    message: str
    raw: Mapping[str, Any]


def payload_of(response: Any) -> dict[str, Any] | None:
    """The AdCP payload of ``response`` (any shape the module names), or None: a failure has
    none."""
    if response is None:
        return None
    data = _as_data(response)
    if isinstance(data, Mapping) and data.get("adcp_error") is not None:  # null: a success
        return None
    return dict(data) if isinstance(data, Mapping) else None


def stale_advisories(response: Any) -> list[StaleAdvisory]:
    """The ``STALE_RESPONSE`` advisories of ``response``'s payload, in order."""
    payload = payload_of(response)
    errors = payload.get("errors") if payload else None
    found = []
    for error in errors if isinstance(errors, list) else []:
        if isinstance(error, Mapping) and error.get("code") == STALE_RESPONSE:
            found.append(_read(error))
    return found


def covered_items(payload: Mapping[str, Any] | None, advisory: StaleAdvisory) -> list[Any]:
    """The items of the advisory's ``field`` from the stale upstream's URL (``agent_url``),
    or all of them when the items do not say where they come from."""
    if payload is None or advisory.field is None:
        return []
    items = payload.get(advisory.field.split(".")[0].split("[")[0])
    if not isinstance(items, list):
        return [items] if items is not None else []
    if advisory.upstream_url is None:
        return list(items)
    origins = [_origin(item) for item in items]
    if not any(origin is not None for origin in origins):
        return list(items)
    target = advisory.upstream_url.rstrip("/")
    return [item for item, origin in zip(items, origins, strict=True) if origin == target]


def summary(advisories: list[StaleAdvisory]) -> str:
    """One line for a human: what is stale, from which upstream, how old."""
    if not advisories:
        return "fresh: no stale data"
    parts = []
    for advisory in advisories:
        age = f"{advisory.age_seconds} s old" if advisory.age_seconds is not None else "stale"
        target = advisory.freshness_target_seconds
        within = f" (target {target} s)" if target is not None else ""
        why = f", {advisory.original_error}" if advisory.original_error else ""
        parts.append(
            f"{advisory.field or 'data'} from {advisory.upstream or 'an upstream'}: "
            f"{age}{within}{why}"
        )
    return "served from cache: " + "; ".join(parts)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _read(error: Mapping[str, Any]) -> StaleAdvisory:
    details: Mapping[str, Any] = error.get("details") or {}
    details = details if isinstance(details, Mapping) else {}
    upstream: Mapping[str, Any] = details.get("upstream") or {}
    upstream = upstream if isinstance(upstream, Mapping) else {}
    original = details.get("original_error")
    return StaleAdvisory(
        upstream=_text(upstream.get("name")),
        upstream_url=_text(upstream.get("url")),
        age_seconds=_whole(details.get("cache_age_seconds")),
        freshness_target_seconds=_whole(details.get("freshness_target_seconds")),
        field=error.get("field") if isinstance(error.get("field"), str) else None,
        original_error=original.get("code") if isinstance(original, Mapping) else None,
        message=str(error.get("message", "")),
        raw=error,
    )


def _whole(value: Any) -> int | None:
    # A2A clients decode numbers through protobuf's Struct (doubles): 75.0 is 75.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):  # JSON readers take Infinity
        return None
    return int(value) if value == int(value) else None


def _origin(item: Any) -> str | None:
    if not isinstance(item, Mapping):
        return None
    format_id = item.get("format_id")
    url = format_id.get("agent_url") if isinstance(format_id, Mapping) else item.get("agent_url")
    return url.rstrip("/") if isinstance(url, str) else None


def _as_data(response: Any) -> Any:
    if hasattr(response, "DESCRIPTOR"):  # a2a-sdk protobuf (Task, Message, ...)
        from google.protobuf.json_format import MessageToDict

        response = MessageToDict(response)
    elif hasattr(response, "model_dump") and not isinstance(response, Mapping):
        if hasattr(response, "status") and hasattr(response, "data"):  # adcp TaskResult
            if response.data is not None:
                return _as_data(response.data)
            # adcp 9.2 over A2A drops an answer with errors[] from data; debug keeps it here.
            debug = getattr(response, "debug_info", None)
            return _as_data(dict(debug.response)) if debug is not None else None
        dumped = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        response = dumped
    if not isinstance(response, Mapping):
        return None
    if "structuredContent" in response or "isError" in response or _mcp_content(response):
        return _from_mcp(response)
    if "artifacts" in response or response.get("kind") == "task" or _task_ids(response):
        return _from_task(response)
    if "parts" in response:
        return _last_data(response["parts"])
    if "result" in response and isinstance(response["result"], Mapping):  # JSON-RPC
        return _as_data(response["result"])
    if "task" in response and isinstance(response["task"], Mapping):  # A2A 1.0 SendMessage
        return _as_data(response["task"])
    return response


def _mcp_content(response: Mapping[str, Any]) -> bool:
    content = response.get("content")
    return isinstance(content, list) and all(
        isinstance(item, Mapping) and "type" in item for item in content
    )


def _task_ids(response: Mapping[str, Any]) -> bool:
    # An A2A task: a status object and a context id (a payload's context_id may be null).
    return isinstance(response.get("status"), Mapping) and (
        response.get("contextId") is not None or response.get("context_id") is not None
    )


def _from_mcp(result: Mapping[str, Any]) -> Any:
    if result.get("isError"):
        return None
    if isinstance(result.get("structuredContent"), Mapping):
        return result["structuredContent"]
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        text = item.get("text") if isinstance(item, Mapping) else None
        if isinstance(text, str) and item.get("type") == "text":  # (text: item is a mapping)
            try:
                return loads(text)
            except ValueError:  # not JSON, or nested past what is read (NotJson)
                continue
    return None


def _from_task(task: Mapping[str, Any]) -> Any:
    status = task.get("status")
    state = str(status.get("state", "")).lower() if isinstance(status, Mapping) else ""
    if state and not state.endswith("completed"):
        return None
    artifacts = task.get("artifacts")
    last = artifacts[-1] if isinstance(artifacts, list) and artifacts else None
    return _last_data(last.get("parts")) if isinstance(last, Mapping) else None


def _last_data(parts: Any) -> Any:
    found = None
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, Mapping) and isinstance(part.get("data"), Mapping):
            found = part["data"]
    return found
