"""The operator's app: see and steer one cache from a browser or with ``curl``.

Mount it only when a token is configured; its routes and its security: docs/operating.md."""

from __future__ import annotations

import hmac
import html
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..control import CacheControl, PurgeIncomplete
from .sessions import SESSION_SECONDS, Sessions

COOKIE = "adcp_stale_cache_admin"
MIN_TOKEN_LENGTH = 16
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_STATIC = {"admin.js": "text/javascript", "admin.css": "text/css"}


class Selectors(BaseModel):
    """What an invalidation or a refresh takes (at least one selector)."""

    model_config = ConfigDict(extra="forbid")
    upstream: str | None = Field(default=None, min_length=1)
    surface: str | None = Field(default=None, min_length=1)
    tags: list[str] = []
    partition: str | None = Field(default=None, min_length=1)


class Invalidation(Selectors):
    """Selectors, and whether the purge is soft."""

    soft: bool = True


def admin_app(control: CacheControl, *, token: str) -> Starlette:
    """The operator's app for ``control``'s cache, guarded by ``token`` (at least 16
    characters: ``python -c 'import secrets; print(secrets.token_urlsafe())'``)."""
    if len(token or "") < MIN_TOKEN_LENGTH:
        raise ValueError(f"the admin token must have at least {MIN_TOKEN_LENGTH} characters")
    sessions = Sessions(token, control.cache.store)

    async def allowed(request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given:
            return hmac.compare_digest(given.encode(), token.encode())
        return await sessions.valid(request.cookies.get(COOKIE, ""))

    async def page(request: Request) -> Response:
        if not request.url.path.endswith("/"):  # relative links need the trailing slash
            return RedirectResponse(_prefix(request) + "/", 307, headers=HEADERS)
        name = "admin.html" if await allowed(request) else "login.html"
        text = _read(name).replace("{{error}}", "")
        return Response(text, media_type="text/html", headers=HEADERS)

    async def login(request: Request) -> Response:
        form = await _login_form(request)
        if isinstance(form, Response):
            return form
        given = form.get("token", "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            failed = _read("login.html").replace("{{error}}", "Wrong token.")
            return Response(failed, status_code=401, media_type="text/html", headers=HEADERS)
        response = RedirectResponse(_prefix(request) + "/", 303, headers=HEADERS)
        response.set_cookie(
            COOKIE,
            sessions.issue(),
            max_age=SESSION_SECONDS,
            path=_prefix(request) + "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(request: Request) -> Response:
        await sessions.revoke(request.cookies.get(COOKIE, ""))  # this cookie, everywhere
        response = RedirectResponse(_prefix(request) + "/", 303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=_prefix(request) + "/")
        return response

    async def status(request: Request) -> Response:
        if not await allowed(request):
            return _unauthorized()
        return JSONResponse(await control.snapshot(), headers=HEADERS)

    def action(model: type[Selectors], run: Any, counted: str) -> Any:
        """An endpoint that runs ``run(**selectors)`` and answers ``{counted: n}``."""

        async def endpoint(request: Request) -> Response:
            if not await allowed(request):
                return _unauthorized()
            body = await _body(request, model)
            if isinstance(body, Response):
                return body
            try:
                count = await run(**body.model_dump())
            except PurgeIncomplete as exc:  # other processes may not see it: never a quiet 0
                return JSONResponse({"error": str(exc), counted: exc.count}, 503, headers=HEADERS)
            return JSONResponse({counted: count}, headers=HEADERS)

        return endpoint

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return Response("not found", 404, headers=HEADERS)
        return Response(_read(name), media_type=_STATIC[name], headers=HEADERS)

    return Starlette(
        routes=[
            Route("/", page),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/api/status", status),
            Route(
                "/api/invalidate",
                action(Invalidation, control.invalidate, "invalidated"),
                methods=["POST"],
            ),
            Route(
                "/api/refresh", action(Selectors, control.refresh, "refreshing"), methods=["POST"]
            ),
            Route("/static/{name}", static),
        ]
    )


def _prefix(request: Request) -> str:
    """Where the app is mounted (escaped: it is written into pages and headers)."""
    return html.escape(str(request.scope.get("root_path", "")).rstrip("/"), quote=True)


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("static").joinpath(name).read_text("utf-8")


def _unauthorized() -> Response:
    return JSONResponse(
        {"error": "unauthorized"}, 401, headers={**HEADERS, "WWW-Authenticate": "Bearer"}
    )


#: The largest sign-in form read (a token and a little more): anyone may post one.
MAX_LOGIN_BYTES = 4096


async def _login_form(request: Request) -> dict[str, str] | Response:
    """The sign-in form's fields, read up to :data:`MAX_LOGIN_BYTES`, never spooled."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return Response("send the sign-in form", 415, headers=HEADERS)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_LOGIN_BYTES:
            return Response("sign-in form too large", 413, headers=HEADERS)
    try:
        fields = parse_qs(body.decode(), max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        return Response("unreadable sign-in form", 400, headers=HEADERS)
    return {name: values[0] for name, values in fields.items()}


async def _body(request: Request, model: type[Selectors]) -> Any:
    """The request's selectors, or a 4xx answer saying what is wrong."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return JSONResponse(
            {"error": "send JSON (Content-Type: application/json)"}, 415, headers=HEADERS
        )
    try:
        body = model.model_validate_json(await request.body())
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "body"
        return JSONResponse({"error": f"{where}: {problem['msg']}"}, 400, headers=HEADERS)
    if not (body.upstream or body.surface or body.tags or body.partition):
        return JSONResponse(
            {"error": "name at least one of upstream, surface, tags, partition"},
            400,
            headers=HEADERS,
        )
    return body
