"""An inventory service whose data the test steers: a version per principal that ``POST
/bump/{principal}`` raises, and faults (``POST /mode/{ok|fail|slow}``: answer, answer 503,
answer after 30 s). Each product says whose it is, its version and when it was answered;
an answer leaves up to 0.4 s after its read, so that calls are in flight while purges land.

    python -m tests.versioned_inventory PORT [VERSIONS_JSON]
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def create_app(versions: dict[str, int]) -> Starlette:
    state: dict[str, Any] = {"mode": "ok"}

    async def products(request: Request) -> Response:
        if state["mode"] == "fail":
            return JSONResponse({"error": "down"}, status_code=503)
        if state["mode"] == "slow":
            await asyncio.sleep(30)
        auth = request.headers.get("authorization", "")
        principal = auth[7:] if auth.lower().startswith("bearer ") else "public"
        version = versions.get(principal, 0)
        # Read, then answer a little later: calls are in flight while purges land. The data
        # is stamped with the answer's time (what its age counts from, as HTTP's Date).
        await asyncio.sleep(random.uniform(0, 0.4))
        items = [
            {"product_id": f"{principal}-{i}", "name": f"{principal} v{version}",
             "description": json.dumps({"who": principal, "v": version, "t": time.time()}),
             "delivery_type": "non_guaranteed"}
            for i in range(2)
        ]  # fmt: skip
        return JSONResponse({"products": items})

    async def bump(request: Request) -> Response:
        principal = request.path_params["principal"]
        versions[principal] = versions.get(principal, 0) + 1
        return JSONResponse(versions)

    async def mode(request: Request) -> Response:
        state["mode"] = request.path_params["mode"]
        return JSONResponse(state)

    return Starlette(
        routes=[
            Route("/products", products),
            Route("/bump/{principal}", bump, methods=["POST"]),
            Route("/mode/{mode}", mode, methods=["POST"]),
        ]
    )


if __name__ == "__main__":
    import uvicorn

    port = int(sys.argv[1])
    versions = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    uvicorn.run(create_app(versions), host="127.0.0.1", port=port, log_level="warning")
