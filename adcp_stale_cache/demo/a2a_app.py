"""A small A2A server (``a2a-sdk`` 1.x, serving A2A 1.0 and 0.3 clients) answering AdCP
skills sent as a DataPart ``{"skill": name, "parameters": {...}}``, for the example seller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from uuid import uuid4

from a2a import types as pb
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from starlette.routing import BaseRoute

Skill = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class FatalSkillError(Exception):
    """Raise from a skill to fail the task with an AdCP error (``adcp_error`` in a DataPart)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload.get("adcp_error", {}).get("code", "error"))
        self.payload = payload


class SkillExecutor(AgentExecutor):
    """Runs the skill a message names and publishes its payload as the task's artifact."""

    def __init__(self, skills: Mapping[str, Skill]) -> None:
        self.skills = dict(skills)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer one message."""
        task_id, context_id = context.task_id or str(uuid4()), context.context_id or str(uuid4())
        if context.current_task is None:
            await event_queue.enqueue_event(
                pb.Task(
                    id=task_id,
                    context_id=context_id,
                    status=pb.TaskStatus(state=pb.TaskState.TASK_STATE_SUBMITTED),
                )
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        name, params = _skill_call(context.message)
        skill = self.skills.get(name or "")
        if skill is None:
            await updater.failed(_text_message(updater, f"Unknown skill {name!r}"))
            return
        try:
            data = await skill(params)
        except FatalSkillError as exc:
            await updater.add_artifact([_data_part(exc.payload)])
            await updater.failed(_text_message(updater, f"{name} failed"))
            return
        await updater.add_artifact([_data_part(data), pb.Part(text=f"Completed {name}")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Tasks finish at once: nothing to cancel."""


def create_a2a_routes(
    skills: Mapping[str, Skill], *, name: str, url: str, rpc_path: str = "/"
) -> list[BaseRoute]:
    """The agent card at ``/.well-known/agent-card.json`` and JSON-RPC at ``rpc_path``."""
    card = pb.AgentCard(
        name=name,
        description=f"AdCP agent: {name}",
        version="1.0.0",
        # 0.3 first: a2a-sdk's 0.3 compat card takes its top-level url from the first entry.
        supported_interfaces=[
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
            pb.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        skills=[
            pb.AgentSkill(id=skill, name=skill, description=skill, tags=["adcp"])
            for skill in skills
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
    )
    handler = DefaultRequestHandler(
        agent_executor=SkillExecutor(skills), task_store=InMemoryTaskStore(), agent_card=card
    )
    return [
        *create_agent_card_routes(agent_card=card),
        *create_jsonrpc_routes(request_handler=handler, rpc_url=rpc_path, enable_v0_3_compat=True),
    ]


def _skill_call(message: pb.Message | None) -> tuple[str | None, dict[str, Any]]:
    for part in message.parts if message is not None else []:
        if part.HasField("data"):
            data = MessageToDict(part.data)
            if isinstance(data, dict) and isinstance(data.get("skill"), str):
                params = data.get("parameters", data.get("input", {}))
                return data["skill"], params if isinstance(params, dict) else {}
    return None, {}


def _data_part(data: dict[str, Any]) -> pb.Part:
    value = Value()
    ParseDict(data, value)
    return pb.Part(data=value)


def _text_message(updater: TaskUpdater, text: str) -> pb.Message:
    return pb.Message(
        message_id=str(uuid4()),
        role=pb.Role.ROLE_AGENT,
        parts=[pb.Part(text=text)],
        task_id=updater.task_id,
        context_id=updater.context_id,
    )
