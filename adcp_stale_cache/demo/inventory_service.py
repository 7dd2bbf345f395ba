"""A mock internal inventory service: ``GET /products`` and ``GET /signals`` (per bearer
principal, ``?account=`` overlay, ``?filters=`` AdCP ``product_filters``), with ``ETag`` and
``304``; ``GET /stats`` counts answers by status, ``POST /revision`` changes every row."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .data import products, signals

#: A feed's rows: ``(count, owner, revision)`` -> rows.
Rows = Callable[[int, str | None, int], list[dict[str, Any]]]


def create_inventory_app(
    *, count: int = 3, max_age: int | None = None, name: str | None = None
) -> Starlette:
    """The inventory service app (``name`` prefixes its product ids: two inventories' rows
    stay apart when one seller sells both)."""
    answered = {"200": 0, "304": 0}
    revision = [0]

    def feed(member: str, rows_of: Rows) -> Callable[[Request], Awaitable[Response]]:

        async def answer(request: Request) -> Response:
            auth = request.headers.get("authorization", "")
            principal = auth[7:] if auth.lower().startswith("bearer ") else None
            owner = request.query_params.get("account") or principal
            try:
                filters = orjson.loads(request.query_params.get("filters") or "{}")
            except orjson.JSONDecodeError:
                return JSONResponse({"detail": "filters is not JSON"}, status_code=400)
            try:
                rows = rows_of(count, owner, revision[0]) if _matches(filters) else []
            except TypeError:  # channels: 5, say: the caller's mistake, not this service's fault
                return JSONResponse({"detail": "filters are not AdCP product_filters"}, 400)
            if name and member == "products":
                rows = [{**row, "product_id": f"{name}-{row['product_id']}"} for row in rows]
            body = orjson.dumps({member: rows})
            headers = {"ETag": f'"{hashlib.sha256(body).hexdigest()[:32]}"'}
            if max_age is not None:
                headers["Cache-Control"] = f"max-age={max_age}"
            if headers["ETag"] in _etags(request.headers.get("if-none-match", "")):
                answered["304"] += 1
                return Response(status_code=304, headers=headers)
            answered["200"] += 1
            return Response(body, media_type="application/json", headers=headers)

        return answer

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(answered)

    async def publish(request: Request) -> JSONResponse:
        revision[0] += 1
        return JSONResponse({"revision": revision[0]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/products", feed("products", products)),
            Route("/signals", feed("signals", signals)),
            Route("/stats", stats),
            Route("/revision", publish, methods=["POST"]),
            Route("/health", health),
        ]
    )


def _matches(filters: object) -> bool:
    """Whether this inventory's display banners match the ``product_filters``
    ``filters`` (``channels`` and ``format_kinds``; others match all)."""
    if not isinstance(filters, dict):
        return True
    channels, kinds = filters.get("channels"), filters.get("format_kinds")
    return (not channels or "display" in channels) and (not kinds or "image" in kinds)


def _etags(header: str) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (weak ones compare weakly: RFC 9110)."""
    return {tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()}
