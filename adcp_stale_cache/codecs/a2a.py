"""A2A results, 1.0 and 0.3 (``"kind"``) wire shapes, and their stream events: the payload is
the last DataPart of the last artifact of a completed task."""

from __future__ import annotations

from typing import Any

from .json import Untouched, inject_payload

_COMPLETED = frozenset({"completed", "TASK_STATE_COMPLETED"})
_TERMINAL = _COMPLETED | frozenset(
    {
        "failed",
        "canceled",
        "rejected",
        "input-required",
        "auth-required",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)


def kind_of(result: Any) -> tuple[str, dict[str, Any]] | None:
    """``("task" | "message" | "status" | "artifact", object)`` for a result or stream event."""
    if not isinstance(result, dict):
        return None
    for key, kind in (
        ("task", "task"),
        ("message", "message"),
        ("statusUpdate", "status"),
        ("artifactUpdate", "artifact"),
    ):
        if isinstance(result.get(key), dict):
            return kind, result[key]
    legacy = {
        "task": "task",
        "message": "message",
        "status-update": "status",
        "artifact-update": "artifact",
    }
    legacy_kind = result.get("kind")
    if isinstance(legacy_kind, str) and legacy_kind in legacy:
        return legacy[legacy_kind], result
    return None


def is_completed(status_holder: dict[str, Any]) -> bool:
    """True when a task or status-update event says the task completed."""
    status = status_holder.get("status")
    return isinstance(status, dict) and _state(status) in _COMPLETED


def is_terminal(status_holder: dict[str, Any]) -> bool:
    """True when a task or status-update event ends the task (or pauses it for input)."""
    status = status_holder.get("status")
    return bool(status_holder.get("final")) or (
        isinstance(status, dict) and _state(status) in _TERMINAL
    )


def _state(status: dict[str, Any]) -> str | None:
    state = status.get("state")
    return state if isinstance(state, str) else None  # (a list or an object: no state)


def inject_result(result: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to the payload of a ``message/send`` / ``SendMessage`` result; a task
    not completed takes none, though its context is mended."""
    found = kind_of(result)
    if found is None:
        raise Untouched("A2A result is neither a task nor a message")
    kind, obj = found
    if kind == "task":
        if errors and not is_completed(obj):  # (its context is still mended)
            raise Untouched("A2A task is not completed", "failed_task")
        inject_artifacts(obj.get("artifacts"), errors)
    elif kind == "message":
        inject_parts(obj.get("parts"), errors)
    else:
        raise Untouched(f"A2A {kind} event outside a stream")


def inject_artifacts(artifacts: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to the last DataPart of the last artifact."""
    if not isinstance(artifacts, list) or not artifacts or not isinstance(artifacts[-1], dict):
        raise Untouched("A2A task has no artifact")
    inject_parts(artifacts[-1].get("parts"), errors)


def inject_parts(parts: Any, errors: list[dict[str, Any]]) -> None:
    """Append ``errors`` to the last DataPart of ``parts``."""
    for part in reversed(parts if isinstance(parts, list) else []):
        if (
            isinstance(part, dict)
            and isinstance(part.get("data"), dict)
            and part.get("kind") in (None, "data")  # 1.0 parts have no kind; null is none
        ):
            inject_payload(part["data"], errors)
            return
    raise Untouched("A2A artifact has no DataPart")
