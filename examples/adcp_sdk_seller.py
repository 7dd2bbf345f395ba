"""An AdCP seller on the ``adcp`` SDK server, with adcp-stale-cache in front of its inventory.

MCP at /mcp and A2A at / (``serve(transport="both")``). By default the advisories go in
through the ASGI middleware; ``--skill-middleware`` uses the SDK's dict-level skill
middleware instead. ``--test-controller`` (sandbox only) adds ``comply_test_controller``
with ``force_upstream_unavailable``. ``--token TOKEN=PRINCIPAL`` (repeatable) requires a
bearer token of every buyer and makes ``get_products`` idempotent per principal (the SDK's
``IdempotencyStore``): a replay returns the original answer, its advisories included.

    python examples/adcp_sdk_seller.py --port 8000 --inventory-service http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

import httpx
from adcp.server import (
    ADCPHandler,
    IdempotencyStore,
    MemoryBackend,
    Principal,
    auth_context_factory,
    serve,
)
from adcp.server.auth import BearerTokenAuth, validator_from_token_map
from adcp.server.helpers import adcp_error
from adcp.server.responses import capabilities_response

from adcp_stale_cache import (
    CachingTransport,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    service_unavailable,
)
from adcp_stale_cache.integrations.adcp_sdk import (
    skill_middleware,
    stale_cache_test_controller,
    with_advisories,
)

SURFACES = Surfaces.of(
    SurfacePolicy(
        name="get_products", field="products", upstreams=("inventory-service",),
        max_stale_seconds=3600, upstream_timeout_seconds=2,
    )
)  # fmt: skip
IDEMPOTENCY = IdempotencyStore(backend=MemoryBackend(), ttl_seconds=86400)


class Seller(ADCPHandler):  # type: ignore[misc]
    """Products come from the internal inventory service, through the cache."""

    advertised_tools: ClassVar[set[str]] = {"get_adcp_capabilities", "get_products"}

    def __init__(self, inventory: httpx.AsyncClient, *, idempotent: bool = False) -> None:
        super().__init__()
        self.inventory = inventory
        self.idempotent = idempotent

    async def get_adcp_capabilities(self, params: Any, context: Any = None) -> dict[str, Any]:
        idempotency = IDEMPOTENCY.capability() if self.idempotent else {"supported": False}
        return capabilities_response(["media_buy"], idempotency=idempotency)

    async def get_products(self, params: Any, context: Any = None) -> dict[str, Any]:
        if self.idempotent:
            return await self._idempotent_products(params, context)
        return await self._products(params, context)

    # Inside the store's wrap: what it keeps (and replays) carries the advisories.
    @IDEMPOTENCY.wrap
    @with_advisories(SURFACES, tool="get_products")
    async def _idempotent_products(self, params: Any, context: Any = None) -> dict[str, Any]:
        return await self._products(params, context)

    async def _products(self, params: Any, context: Any = None) -> dict[str, Any]:
        try:
            response = await self.inventory.get("/products")
        except UpstreamUnavailable as exc:  # no usable cache entry: the failure stays a failure
            error = service_unavailable(exc, field="products")
            return adcp_error(error.code, error.message, field=error.field, recovery="transient")
        return {"products": response.json()["products"], "cache_scope": "public"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--inventory-service", required=True)
    parser.add_argument("--freshness-target", type=int, default=60)
    parser.add_argument("--skill-middleware", action="store_true")
    parser.add_argument("--test-controller", action="store_true")
    parser.add_argument("--token", action="append", default=[], metavar="TOKEN=PRINCIPAL")
    args = parser.parse_args()

    [policy] = SURFACES.policies
    surfaces = Surfaces.of(policy.model_copy(update={
        "freshness_target_seconds": args.freshness_target,
    }))  # fmt: skip
    cache = UpstreamCache(surfaces=surfaces, test_mode=args.test_controller)
    tokens = dict(token.split("=", 1) for token in args.token)
    auth = BearerTokenAuth(validate_token=validator_from_token_map({
        token: Principal(caller_identity=principal) for token, principal in tokens.items()
    })) if tokens else None  # fmt: skip
    transport = CachingTransport(cache, Upstream(name="inventory-service"), surface="get_products")
    inventory = httpx.AsyncClient(base_url=args.inventory_service, transport=transport)

    serve(
        Seller(inventory, idempotent=bool(tokens)),
        auth=auth,
        context_factory=auth_context_factory if auth else None,
        name="adcp-sdk-seller",
        host="127.0.0.1",
        port=args.port,
        transport="both",
        asgi_middleware=[]
        if args.skill_middleware
        else [(StaleAdvisoryMiddleware, {"cache": cache})],
        middleware=[skill_middleware(surfaces)] if args.skill_middleware else [],
        test_controller=stale_cache_test_controller(cache) if args.test_controller else None,
    )


if __name__ == "__main__":
    main()
