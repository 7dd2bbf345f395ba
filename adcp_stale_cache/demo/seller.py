"""The example seller: AdCP tools answered from upstreams through the cache, over plain HTTP
(``POST /api/<tool>``), MCP (``/mcp``) and A2A (``/``), all behind one
``StaleAdvisoryMiddleware``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import (
    CachingTransport,
    InvalidPayload,
    StaleAdvisoryMiddleware,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    service_unavailable,
)
from ..adcp.conditional import InvalidConditionalRequest
from ..core.advisory import failed_payload
from ..integrations.mcp_client import call_mcp_tool
from ..ops.control import CacheControl
from ..ops.metrics import PrometheusMetrics
from ..stores import MemoryStore, Store
from .feed import WholesaleFeed
from .feed_events import EVENT_TYPES, FeedEvents, Signer, Subscriptions
from .sub_sellers import SUB_SELLERS, SubSellers, gather_items
from .tool_failed import ToolFailed
from .versions import SUPPORTED_VERSIONS, VersionUnsupported, served_version

TOOLS = (
    "get_adcp_capabilities",
    "get_products",
    "list_creative_formats",
    "list_products",
    "get_signals",
)

#: Tools whose answer schema allows no ``adcp_version`` member: no release echo there.
UNVERSIONED = frozenset({"list_products"})

# What get_adcp_capabilities answers: valid for the AdCP 3.0, 3.1 and 3.2 schemas.
CAPABILITIES: dict[str, Any] = {
    "adcp": {
        "major_versions": [3],
        "supported_versions": list(SUPPORTED_VERSIONS),
        "idempotency": {"supported": False},
    },
    "supported_protocols": ["media_buy", "signals"],
    # 3.2's compact product read (earlier releases ignore the member).
    "media_buy": {"lifecycle_tools": ["list_products"]},
    # Conditional fetch of the wholesale feed, with an account overlay (feed.py).
    "wholesale_feed_versioning": {"supported": True, "cache_scope_account": True},
}

_authorization: ContextVar[str | None] = ContextVar("seller_authorization", default=None)


def seller_surfaces(
    freshness_target: int,
    max_stale: int,
    upstream_timeout: float,
    sub_sellers: tuple[str, ...] = (),
) -> Surfaces:
    """The example seller's surfaces, all with the same timings."""

    def surface(
        name: str,
        field: str,
        upstreams: tuple[str, ...] = (),
        *,
        shared: bool = False,
        tool: bool = True,
    ) -> SurfacePolicy:
        return SurfacePolicy(
            name=name,
            field=field,
            paths=(f"/api/{name}",) if tool else (),
            upstreams=upstreams,
            shared_across_callers=shared,
            freshness_target_seconds=freshness_target,
            max_stale_seconds=max_stale,
            upstream_timeout_seconds=upstream_timeout,
        )

    inventory = ("inventory-service",)
    return Surfaces.of(
        surface("list_creative_formats", "formats", shared=True),  # public: one entry for all
        surface("get_products", "products", inventory),
        # Its answers have no errors[]: told stale in incomplete[] (feeds.py).
        surface("list_products", "products", inventory),
        surface("get_signals", "signals", inventory),
        # Public layers with no tool of their own, one entry for all: the wholesale feed's
        # rate card, the signals feed's, and sub-sellers' feeds (see sub_sellers).
        surface(RATE_CARD, "products", inventory, shared=True, tool=False),
        surface(SIGNALS_CARD, "signals", inventory, shared=True, tool=False),
        surface(SUB_SELLERS, "products", sub_sellers, shared=True, tool=False),
    )


RATE_CARD = "wholesale_rate_card"
SIGNALS_CARD = "wholesale_signals"


class SellerTools:
    """The tools, independent of the transport that asked."""

    def __init__(
        self,
        cache: UpstreamCache,
        agents: list[Upstream],
        inventory: httpx.AsyncClient,
        *,
        test_controller: bool,
        feed: WholesaleFeed | None = None,
        sub_sellers: SubSellers | None = None,
        wholesale_answered: Callable[[str], None] | None = None,
        feed_events: FeedEvents | None = None,
    ) -> None:
        self.cache = cache
        self.agents = agents
        self.inventory = inventory
        self.test_controller = test_controller
        self.feed = feed or WholesaleFeed(cache, inventory, inventory)
        self.sub_sellers = sub_sellers
        self.wholesale_answered = wholesale_answered  # counts "full" and "unchanged" answers
        self.feed_events = feed_events

    async def call(self, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The tool ``name``'s answer to ``params``, with the release served echoed
        (raises :class:`ToolFailed` for a fatal error, an unspoken release among them)."""
        try:
            version = served_version(params)
        except VersionUnsupported as exc:
            raise ToolFailed(_fatal([exc.error.to_dict()], params)) from exc
        try:
            answer: dict[str, Any] = await getattr(self, name)(params)
        except ToolFailed as exc:
            exc.payload["adcp_version"] = version
            raise
        if name not in UNVERSIONED:
            answer["adcp_version"] = version
        return answer

    async def get_adcp_capabilities(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Declare media buying (and the feed webhooks, only where they are emitted)."""
        answer = {**CAPABILITIES, "sandbox": self.test_controller}
        if self.feed_events is not None:
            answer["wholesale_feed_webhooks"] = {
                "supported": True,
                "event_types": list(EVENT_TYPES),
            }
        return _echo(answer, params)

    async def sync_accounts(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Keep each account's feed-webhook subscribers (``notification_configs[]``)."""
        assert self.feed_events is not None, "sync_accounts is served with feed events only"
        return _echo(self.feed_events.subscriptions.sync(params), params)

    async def get_products(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Products from the inventory service for the calling principal (the
        wholesale feed for ``buying_mode: "wholesale"``)."""
        auth = _authorization.get()
        if params.get("buying_mode") == "wholesale":
            # Only the whole feed is watched: a filtered answer's rows are not the feed's.
            watched = None if params.get("filters") else "products"
            return await self._wholesale(params, self.feed.answer(params, auth), watched)
        products: list[Any] = []
        errors: list[dict[str, Any]] = []
        try:
            response = await self.inventory.get(
                "/products", headers={"authorization": auth} if auth else None
            )
        except UpstreamUnavailable as exc:
            errors.append(service_unavailable(exc, field="products").to_dict())
        else:
            products.extend(response.json()["products"])
        if self.sub_sellers is not None:  # their public feeds, sold here too
            theirs, failed = await self.sub_sellers.products()
            products.extend(theirs)
            errors.extend(failed)
        scope = "account" if auth else "public"
        return _gathered(params, "products", products, errors, cache_scope=scope)

    async def list_products(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """3.2's compact read of the wholesale feed (``if_feed_version``, ``outcome``)."""
        return await self._wholesale(params, self.feed.list_products(params, _authorization.get()))

    async def get_signals(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The signals feed (conditional in ``discovery_mode: "wholesale"``)."""
        answering = self.feed.signals(params, _authorization.get())
        watched = "signals" if params.get("discovery_mode") == "wholesale" else None
        return await self._wholesale(params, answering, watched, field="signals")

    async def _wholesale(
        self,
        params: Mapping[str, Any],
        answering: Awaitable[dict[str, Any]],
        watched: str | None = None,
        field: str = "products",
    ) -> dict[str, Any]:
        """The answer, counted; a full answer of the ``watched`` feed is shown to
        the feed events."""
        try:
            answer = await answering
            if watched is not None and self.feed_events is not None:
                self.feed_events.observe(watched, answer)
            if self.wholesale_answered is not None:
                unchanged = answer.get("unchanged") or answer.get("outcome") == "unchanged"
                self.wholesale_answered("unchanged" if unchanged else "full")
            return _echo(answer, params)
        except InvalidConditionalRequest as exc:
            raise ToolFailed(_fatal([exc.error.to_dict()], params)) from exc
        except UpstreamUnavailable as exc:
            raise ToolFailed(
                _fatal([service_unavailable(exc, field=field).to_dict()], params)
            ) from exc

    async def list_creative_formats(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Formats of every creative agent, asked concurrently; a dead agent's from cache."""
        arguments = {k: v for k, v in params.items() if k not in _NOT_QUERY}
        formats, errors = await gather_items(
            ((a, self._formats(a, arguments)) for a in self.agents), field="formats"
        )
        return _gathered(params, "formats", formats, errors)

    async def comply_test_controller(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The sandbox test controller: ``force_upstream_unavailable`` and ``list_scenarios``."""
        scenario = params.get("scenario")
        account = params.get("account")
        if not self.test_controller or (
            isinstance(account, dict) and account.get("sandbox") is False
        ):
            return _echo(
                _controller_error("FORBIDDEN", "The test controller is sandbox-only"), params
            )
        if scenario == "list_scenarios":
            return _echo({"success": True, "scenarios": ["force_upstream_unavailable"]}, params)
        if scenario != "force_upstream_unavailable":
            return _echo(
                _controller_error("UNKNOWN_SCENARIO", f"Unsupported scenario {scenario!r}"), params
            )
        args = params.get("params") if isinstance(params.get("params"), dict) else {}
        assert isinstance(args, dict)
        try:
            outage = self.cache.force_upstream_unavailable(
                str(args.get("tool") or ""),
                args.get("upstream_name"),
                args.get("cache_age_seconds"),
                args.get("empty_cache") is True,  # this library's extension (testing.py)
            )
        except (KeyError, ValueError) as exc:
            return _echo(_controller_error("INVALID_PARAMS", str(exc).strip("'\"")), params)
        upstream = outage.upstream_name or "the default upstream"
        answer: dict[str, Any] = {
            "success": True,
            "previous_state": "available",
            "current_state": "unavailable",
            "message": f"{upstream} of {outage.tool} is down for the next affected response",
        }
        if outage.empty_cache:
            answer["empty_cache"] = True  # acknowledged: a checker may rely on it
        return _echo(answer, params)

    async def _formats(self, agent: Upstream, arguments: dict[str, Any]) -> list[Any]:
        assert agent.url is not None
        url = agent.url
        payload = await self.cache.fetch(
            agent,
            ("list_creative_formats", arguments),
            lambda: call_mcp_tool(url, "list_creative_formats", arguments),
            surface="list_creative_formats",
            validate=_has_formats,
        )
        formats: list[Any] = payload["formats"]
        return formats


def create_seller_app(
    *,
    creative_agents: Mapping[str, str],
    inventory_url: str,
    freshness_target: int = 60,
    max_stale: int = 3600,
    upstream_timeout: float = 5.0,
    store: Store | None = None,
    public_url: str = "http://127.0.0.1:8000",
    test_controller: bool = False,
    coordinate_refreshes: bool = False,
    schema_version: str | None = None,
    admin_token: str | None = None,
    honor_cache_control: bool = False,
    inventory_transport: httpx.AsyncBaseTransport | None = None,
    sub_sellers: Mapping[str, str] | None = None,
    webhook_jwks: Mapping[str, Mapping[str, Any]] | None = None,
    webhook_signer: Signer | None = None,
) -> FastAPI:
    """The seller app; ``creative_agents`` maps each agent's name to its MCP URL.

    ``test_controller`` enables the sandbox ``comply_test_controller`` (never in production);
    ``admin_token`` mounts the operator app at ``/admin``; ``sub_sellers`` maps other sellers'
    names to MCP URLs whose feeds it sells too, and ``webhook_jwks`` receives their signed feed
    webhooks; ``webhook_signer`` sends buyers signed feed events. ``honor_cache_control``
    lets the inventory's ``Cache-Control`` set freshness; ``inventory_transport`` reaches the
    inventory in process."""
    sub_sellers = dict(sub_sellers or {})
    surfaces = seller_surfaces(freshness_target, max_stale, upstream_timeout, tuple(sub_sellers))
    store = store if store is not None else MemoryStore()
    registry = CollectorRegistry()
    cache = UpstreamCache(
        store,
        surfaces=surfaces,
        test_mode=test_controller,
        coordinate_refreshes=coordinate_refreshes,
        schema_version=schema_version,
        metrics=PrometheusMetrics(registry, store=store),
    )
    inventory = Upstream(name="inventory-service")  # internal: its URL is never reported
    transport = CachingTransport(
        cache,
        inventory,
        surface="get_products",
        validate=_has_products,
        honor_cache_control=honor_cache_control,
        transport=inventory_transport,
    )
    client = httpx.AsyncClient(base_url=inventory_url, transport=transport)

    def inventory_client(surface: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=inventory_url,
            transport=CachingTransport(
                cache,
                inventory,
                surface=surface,
                validate=_has_rows,
                honor_cache_control=honor_cache_control,
                transport=inventory_transport,
            ),
        )

    rate_card = inventory_client(RATE_CARD)
    signals = (inventory_client(SIGNALS_CARD), inventory_client("get_signals"))
    agents = [Upstream(name=name, url=url) for name, url in creative_agents.items()]
    subs = SubSellers(cache, sub_sellers) if sub_sellers else None
    answers = Counter(
        "adcp_example_wholesale_answers",
        "Wholesale answers given, by outcome",
        ["outcome"],
        registry=registry,
    )
    events = FeedEvents(Subscriptions(), webhook_signer) if webhook_signer else None
    tools = SellerTools(
        cache,
        agents,
        client,
        test_controller=test_controller,
        feed=WholesaleFeed(cache, rate_card, client, signals),
        sub_sellers=subs,
        wholesale_answered=lambda outcome: answers.labels(outcome).inc(),
        feed_events=events,
    )
    names = (
        *TOOLS,
        *(("sync_accounts",) if events else ()),
        *(("comply_test_controller",) if test_controller else ()),
    )

    from .a2a_app import FatalSkillError, create_a2a_routes
    from .mcp_app import create_mcp_app

    mcp_app = create_mcp_app(tools.call, names, host=urlsplit(public_url).hostname or "127.0.0.1")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp_app.router.lifespan_context(app):
            yield
        await client.aclose()
        for other in (rate_card, *signals):
            await other.aclose()
        if events is not None:
            await events.aclose()

    app = FastAPI(title="adcp-stale-cache example seller", lifespan=lifespan)
    app.state.cache = cache
    app.state.tools = tools

    async def json_route(request: Request) -> Any:
        name = request.path_params["tool"]
        if name not in names:
            return JSONResponse({"detail": f"unknown tool {name!r}"}, status_code=404)
        body = await _json_body(request)
        if body is None:  # the buyer's to correct, never read as an empty request
            error = {
                "code": "INVALID_REQUEST",
                "message": "the body is not a JSON object",
                "recovery": "correctable",
            }
            return JSONResponse({"adcp_error": error, "errors": [error]}, status_code=400)
        try:
            return await tools.call(name, body)
        except ToolFailed as exc:  # the buyer's to correct: 400; the seller's: 503
            correctable = exc.payload["adcp_error"].get("recovery") == "correctable"
            return JSONResponse(exc.payload, status_code=400 if correctable else 503)

    async def skill(name: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await tools.call(name, params)
        except ToolFailed as exc:
            raise FatalSkillError(exc.payload) from exc
        return result

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    app.add_api_route("/api/{tool}", json_route, methods=["POST"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    control = CacheControl(cache) if admin_token or (subs and webhook_jwks) else None
    if admin_token and control is not None:
        from ..ops.admin import admin_app

        app.mount("/admin", admin_app(control, token=admin_token))
    if subs is not None and webhook_jwks and control is not None:
        _mount_feed_webhooks(app, control, subs, webhook_jwks, public_url)
    app.router.routes.extend(mcp_app.routes)  # /mcp itself: a Mount would redirect to /mcp/
    skills = {name: (lambda params, name=name: skill(name, params)) for name in names}
    app.router.routes.extend(create_a2a_routes(skills, name="example-seller", url=f"{public_url}/"))
    app.add_middleware(StaleAdvisoryMiddleware, cache=cache)
    app.add_middleware(_RememberAuthorization)
    return app


def _mount_feed_webhooks(
    app: FastAPI,
    control: CacheControl,
    subs: SubSellers,
    jwks: Mapping[str, Mapping[str, Any]],
    public_url: str,
) -> None:
    """Each sub-seller's signed feed webhooks at ``/webhooks/<name>``, verified
    against ``jwks[name]`` (a per-process replay store: a replay only soft-purges again)."""
    from adcp.signing import StaticJwksResolver
    from adcp.webhooks import WebhookVerifyOptions
    from starlette.routing import Route

    from ..integrations.feed_webhooks import FeedWebhooks

    for agent in subs.agents:
        name = agent.upstream.name
        if name not in jwks:  # its events would verify against no key: none are received
            continue
        options = WebhookVerifyOptions(jwks_resolver=StaticJwksResolver(dict(jwks[name])))
        hooks = FeedWebhooks(
            control, agent.upstream, verify=options, url=f"{public_url}/webhooks/{name}"
        )
        # A route, not a mount: a mount would redirect POST /webhooks/NAME to .../NAME/.
        app.router.routes.append(Route(f"/webhooks/{name}", hooks))


class _RememberAuthorization:
    """Keeps the buyer's ``Authorization`` header for the tools (forwarded to the inventory)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        auth = None
        if scope["type"] == "http":
            auth = next(
                (v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None
            )
        token = _authorization.set(auth)
        try:
            await self.app(scope, receive, send)
        finally:
            _authorization.reset(token)


# Request members that say how to call, not what to answer: never part of a cache key.
_NOT_QUERY = frozenset(
    {"context", "ext", "account", "idempotency_key", "adcp_major_version", "adcp_version"}
)


async def _json_body(request: Request) -> dict[str, Any] | None:
    """The request's JSON object ({} for an empty body; None for anything else)."""
    raw = await request.body()
    try:
        body = await request.json() if raw.strip() else {}
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _echo(payload: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """AdCP echoes the request's ``context`` on every response."""
    if "context" in params:
        payload["context"] = params["context"]
    return payload


def _gathered(
    params: Mapping[str, Any],
    field: str,
    items: list[Any],
    errors: list[dict[str, Any]],
    **members: Any,
) -> dict[str, Any]:
    """An answer gathered from several upstreams: ``items`` under ``field``, those that
    answered nothing in ``errors``; fatal only when no item came back."""
    if errors and not items:
        raise ToolFailed(_fatal(errors, params))
    payload: dict[str, Any] = {field: items, **members}
    if errors:
        payload["errors"] = errors
    return _echo(payload, params)


def _fatal(errors: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    return _echo(failed_payload(errors), params)


def _controller_error(code: str, message: str) -> dict[str, Any]:
    return {"success": False, "error": code, "error_detail": message}


def _has_formats(payload: dict[str, Any]) -> None:
    if not isinstance(payload.get("formats"), list):
        raise InvalidPayload("no formats list")


def _has_products(response: httpx.Response) -> None:
    _has_rows(response, ("products",))


def _has_rows(response: httpx.Response, members: tuple[str, ...] = ("products", "signals")) -> None:
    """The inventory answered a feed: a list of products or of signals."""
    try:
        body = response.json()
        ok = any(isinstance(body.get(member), list) for member in members)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise InvalidPayload(f"no {' or '.join(members)} list")
