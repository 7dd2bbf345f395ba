"""A mock internal inventory service: ``GET /products`` -> ``{"products": [...]}``.

A request with a bearer token gets that principal's own products, so that tenant isolation
in the seller's cache shows end to end.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .data import products


def create_inventory_app(*, count: int = 3) -> Starlette:
    """The inventory service app."""

    async def list_products(request: Request) -> JSONResponse:
        auth = request.headers.get("authorization", "")
        principal = auth[7:] if auth.lower().startswith("bearer ") else None
        return JSONResponse({"products": products(count, principal)})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/products", list_products), Route("/health", health)])
