"""A mock internal inventory service: ``GET /products`` -> ``{"products": [...]}``.

A request with a bearer token gets that principal's own products, so that tenant isolation
in the seller's cache shows end to end. Answers carry an ``ETag`` (a hash of the body) and
a matching ``If-None-Match`` gets a ``304``; ``max_age`` adds ``Cache-Control: max-age``.
``GET /stats`` counts the answers to ``/products`` by status: ``{"200": n, "304": m}``.
"""

from __future__ import annotations

import hashlib

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .data import products


def create_inventory_app(*, count: int = 3, max_age: int | None = None) -> Starlette:
    """The inventory service app."""
    answered = {"200": 0, "304": 0}

    async def list_products(request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        principal = auth[7:] if auth.lower().startswith("bearer ") else None
        body = orjson.dumps({"products": products(count, principal)})
        headers = {"ETag": f'"{hashlib.sha256(body).hexdigest()[:32]}"'}
        if max_age is not None:
            headers["Cache-Control"] = f"max-age={max_age}"
        if headers["ETag"] in _etags(request.headers.get("if-none-match", "")):
            answered["304"] += 1
            return Response(status_code=304, headers=headers)
        answered["200"] += 1
        return Response(body, media_type="application/json", headers=headers)

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(answered)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/products", list_products),
            Route("/stats", stats),
            Route("/health", health),
        ]
    )


def _etags(header: str) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (weak ones compare weakly: RFC 9110)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
