"""Quick start: a seller on ``a2a-sdk`` 1.x (JSON-RPC at ``/``, A2A 1.0 and 0.3 clients).

A buyer sends a DataPart ``{"skill": "get_products", "parameters": {...}}``; the task's
artifact holds the payload. Run it: ``uvicorn examples.a2a_seller:app``.
"""

import os
from uuid import uuid4

import httpx
from a2a import types as pb
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from starlette.applications import Starlette

from adcp_stale_cache import (
    CachingTransport,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
)

surfaces = Surfaces.of(
    SurfacePolicy(
        name="get_products", field="products", freshness_target_seconds=60, max_stale_seconds=3600
    )
)
cache = UpstreamCache(surfaces=surfaces)
inventory = httpx.AsyncClient(
    base_url="http://inventory.internal",
    transport=CachingTransport(cache, Upstream(name="inventory-service")),
)


class Seller(AgentExecutor):
    """Answers ``get_products`` (the only skill here) with a DataPart artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or str(uuid4()), context.context_id or str(uuid4())
        if context.current_task is None:
            state = pb.TaskStatus(state=pb.TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(
                pb.Task(id=task_id, context_id=context_id, status=state)
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        response = await inventory.get("/products")  # the surface comes from the skill
        payload = Value()
        ParseDict({"products": response.json()["products"]}, payload)
        await updater.add_artifact([pb.Part(data=payload)])
        await updater.complete()  # a stale answer is still a completed task

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Tasks finish at once: nothing to cancel."""


public_url = os.environ.get("SELLER_URL", "http://127.0.0.1:8000/")  # where buyers reach you
card = pb.AgentCard(
    name="seller",
    description="AdCP seller",
    version="1.0.0",
    supported_interfaces=[
        pb.AgentInterface(url=public_url, protocol_binding="JSONRPC", protocol_version=v)
        for v in ("0.3", "1.0")
    ],
    skills=[
        pb.AgentSkill(id="get_products", name="get_products", description="Products", tags=["adcp"])
    ],
    capabilities=pb.AgentCapabilities(streaming=True),
    default_input_modes=["application/json"],
    default_output_modes=["application/json"],
)
handler = DefaultRequestHandler(
    agent_executor=Seller(), task_store=InMemoryTaskStore(), agent_card=card
)
routes = [
    *create_agent_card_routes(agent_card=card),
    *create_jsonrpc_routes(request_handler=handler, rpc_url="/", enable_v0_3_compat=True),
]
app = StaleAdvisoryMiddleware(Starlette(routes=routes), cache=cache)
