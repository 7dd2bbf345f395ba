"""An AdCP agent (a sub-seller, a signals agent) as an upstream, asked through the ``adcp``
client and cached by the protocol's rules: ages, layers, feed tokens (docs: Federation).

Needs the ``adcp`` extra (9.2+, ``adcp-server``), or ``call=`` to reach the agent another way.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from ..adcp.hops import delivered, directives_of, revalidated
from ..adcp.wholesale import canonical, release_of
from ..core.failures import Failure, InvalidPayload, UpstreamError, is_adcp_code
from ..core.keys import digest
from ..core.policy import FailureKind, Upstream
from ..pipeline.cache import UpstreamCache
from .deadline import checked_timeout, within

#: ``(tool, params) -> the wire payload``, ``adcp_error`` and all; raises for transport failures.
AgentCall = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

PER_CALL = frozenset(
    {"context", "idempotency_key", "if_wholesale_feed_version", "if_pricing_version"}
)
#: Marks an account's entry the agent answered ``public``: read the public layer.
LAYER = "adcp_stale_cache_layer"

VERSIONED = frozenset({"get_products", "get_signals"})


def account_tag(account_id: str) -> str:
    """The tag of an agent's entries for one of the seller's accounts."""
    return f"account:{account_id}"


class AgentRefused(Exception):
    """The agent answered a correctable or terminal ``adcp_error`` (in ``error``): never
    cached, never served stale over."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        code = error.get("code")
        super().__init__(code if isinstance(code, str) else "adcp_error")
        self.error = dict(error)

    @property
    def failure(self) -> Failure:
        """The refusal as a buyer may see it: the agent's AdCP code, our own words."""
        code = self.error.get("code")
        return Failure(
            FailureKind.UPSTREAM_ERROR,
            code if is_adcp_code(code) else "UPSTREAM_ERROR",
            "Upstream refused the request",
        )


class AdcpAgent:
    """``upstream`` (an AdCP agent's MCP endpoint) behind ``cache``, on ``surface``.

    ``token`` is sent as ``Authorization: Bearer`` and joins the keys. No call waits longer
    than ``timeout`` seconds (finite, above 0, else :class:`ValueError`): past it, a ``TIMEOUT``.
    """

    def __init__(
        self,
        cache: UpstreamCache,
        upstream: Upstream,
        *,
        surface: str | None = None,
        token: str | None = None,
        call: AgentCall | None = None,
        timeout: float = 30.0,
    ) -> None:
        if upstream.url is None and call is None:
            raise ValueError("an AdCP agent needs the URL of its MCP endpoint (or call=)")
        timeout = checked_timeout(timeout)
        if token is not None:  # what is sent keys the entries, whatever else the upstream holds
            held = upstream.credentials
            keyed = token if held is None else digest([b"token", token, held.get_secret_value()])
            upstream = upstream.model_copy(update={"credentials": SecretStr(keyed)})
        self.cache, self.upstream, self.surface = cache, upstream, surface
        self.call: AgentCall = call or adcp_client_call(upstream.url or "", token, timeout)
        self.timeout = timeout

    async def get_products(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The agent's ``get_products`` answer to ``request``, as a seller composes it."""
        return await self.ask("get_products", request)

    async def ask(self, tool: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """The agent's answer to ``tool`` with ``request``, from cache when the surface allows,
        without the agent's own staleness advisories (ours stand for them) and ``context``.

        An account's entry is its overlay, or a mark sending reads to the public layer.
        """
        params = {name: value for name, value in request.items() if name not in PER_CALL}
        public = {name: value for name, value in params.items() if name != "account"}
        release = release_of(params)
        own = ("adcp", tool, canonical(params, tool, release))
        shared = ("adcp", tool, canonical(public, tool, release))
        if own == shared:  # no account (an account: null is none)
            return delivered(await self._fetch(tool, params, own, ()))
        account = params["account"]
        account_id = account.get("account_id") if isinstance(account, Mapping) else None
        tags = (account_tag(account_id),) if isinstance(account_id, str) else ()
        payload = await self._fetch(tool, params, own, tags, shared)
        if payload.get(LAYER) == "public":
            payload = await self._fetch(tool, public, shared, ())
        return delivered(payload)

    async def _fetch(
        self,
        tool: str,
        params: dict[str, Any],
        key: tuple[Any, ...],
        tags: tuple[str, ...],
        public: tuple[Any, ...] | None = None,
    ) -> dict[str, Any]:
        """The entry under ``key``; with ``public`` (the public layer's key), a public answer
        is kept there and this entry marks it."""

        async def call() -> dict[str, Any]:
            return await self._layered(public, await self._answer(tool, params))

        async def revalidate(held: dict[str, Any]) -> dict[str, Any]:
            return await self._layered(public, await self._revalidate(tool, params, held))

        return await self.cache.fetch(
            self.upstream,
            key,
            call,
            surface=self.surface,
            cacheable=storable,
            directives=directives_of,
            tags=tags,
            revalidate=revalidate,
        )

    async def _layered(
        self, public: tuple[Any, ...] | None, answer: dict[str, Any]
    ) -> dict[str, Any]:
        if public is None or answer.get("cache_scope") != "public" or not storable(answer):
            return answer
        await self.cache.fetch(
            self.upstream,
            public,
            _given(answer),
            surface=self.surface,
            cacheable=storable,
            directives=directives_of,
        )
        return {LAYER: "public", "cache_scope": "public"}

    async def _wire(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        return await within(self.call(tool, params), self.timeout, f"the agent's {tool!r}")

    async def _answer(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = answer_of(await self._wire(tool, params))
        if answer.get("unchanged") is True:  # sent no token: there is nothing it could match
            raise InvalidPayload("the agent answered unchanged to a request with no token")
        return answer

    async def _revalidate(
        self, tool: str, params: dict[str, Any], held: dict[str, Any]
    ) -> dict[str, Any]:
        feed = held.get("wholesale_feed_version")
        if tool not in VERSIONED or not isinstance(feed, str):
            return await self._answer(tool, params)
        probe = {**params, "if_wholesale_feed_version": feed}
        pricing = held.get("pricing_version")
        if isinstance(pricing, str):
            probe["if_pricing_version"] = pricing
        answer = answer_of(await self._wire(tool, probe))
        if answer.get("unchanged") is not True:
            return answer
        same = all(answer.get(name) == held.get(name) for name in _ECHOED)
        if same:  # current at the agent: the held feed, as old as the agent now says
            return revalidated(held, answer)
        return await self._answer(tool, params)  # unchanged, yet of another feed: read it


def answer_of(payload: object) -> dict[str, Any]:
    """An agent's wire payload as the cache takes it, without ``context``; raises
    :class:`~adcp_stale_cache.UpstreamError` (transient) or :class:`AgentRefused`."""
    if not isinstance(payload, Mapping):
        raise InvalidPayload("the agent answered no JSON object")
    failed = payload.get("adcp_error")
    if isinstance(failed, Mapping):
        code = failed.get("code")
        code = code if isinstance(code, str) else "UPSTREAM_ERROR"
        if failed.get("recovery") in ("correctable", "terminal"):
            raise AgentRefused(failed)
        raise UpstreamError(code)
    return {name: value for name, value in payload.items() if name not in _NOT_THE_AGENTS}


_NOT_THE_AGENTS = frozenset({"context", LAYER})


def storable(payload: Mapping[str, Any]) -> bool:
    """False for what is never cached: the rejected arm, a partial or ``unchanged`` answer,
    products that are no list."""
    if payload.get("status") == "rejected" or payload.get("incomplete"):
        return False
    if payload.get("unchanged") is True:  # a probe's answer holds no feed
        return False
    return "products" not in payload or isinstance(payload.get("products"), list)


def _given(answer: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def call() -> dict[str, Any]:
        return answer

    return call


#: What an ``unchanged: true`` must echo from the held answer to mean "the same feed".
_ECHOED = ("wholesale_feed_version", "pricing_version", "cache_scope")


def adcp_client_call(url: str, token: str | None, timeout: float) -> AgentCall:
    """An :data:`AgentCall` on the ``adcp`` client over MCP, one client per call (its session
    belongs to the loop that made it), pinned to AdCP 3.2 (no capabilities round trip)."""
    from adcp import ADCPClient
    from adcp.types import AgentConfig, Protocol
    from adcp.validation.client_hooks import ValidationHookConfig

    config = AgentConfig(
        id="upstream",
        agent_uri=url,
        protocol=Protocol.MCP,
        mcp_transport="streamable_http",
        auth_token=token,
        auth_type="bearer",
        auth_header="Authorization",
        timeout=timeout,
        debug=True,  # keeps the wire payload as the agent wrote it (debug_info.response)
    )
    # We read the wire payload ourselves: the client's response checks warn, never refuse.
    checks = ValidationHookConfig(requests="off", responses="warn")

    async def call(tool: str, params: dict[str, Any]) -> dict[str, Any]:
        client = ADCPClient(
            config,
            server_version="3.2",
            validation=checks,
            account_policy="off",
            raise_account_errors=False,
        )
        async with client:
            try:
                # The adapter's methods take and give dicts (the typed ones parse models).
                result = await getattr(client.adapter, tool)(params)
            except asyncio.CancelledError:
                cancelling = getattr(asyncio.current_task(), "cancelling", None)  # 3.11+
                if cancelling is None or cancelling():
                    raise  # ours: the deadline, or the request went away
                # adcp 9.x on mcp 2.x cancels its own scope on a refused or broken connection.
                raise await _unreachable(url) from None
        debug = result.debug_info.response if result.debug_info is not None else None
        data = debug.get("data") if isinstance(debug, Mapping) else None
        if isinstance(data, Mapping):
            return dict(data)
        if isinstance(debug, Mapping) and isinstance(debug.get("adcp_error"), Mapping):
            return {"adcp_error": debug["adcp_error"]}
        raise UpstreamError("UPSTREAM_ERROR", result.error or "the agent's call failed")

    return call


async def _unreachable(url: str) -> OSError:
    """What a bare connection attempt to the agent's address says."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is no number
        return ConnectionError("the agent's URL names no port")
    if not parts.hostname:
        return ConnectionError("the agent's URL names no host")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), 1.0)
    except ConnectionRefusedError as exc:
        return exc
    except (OSError, asyncio.TimeoutError, socket.gaierror) as exc:
        return ConnectionError(f"the agent is unreachable: {type(exc).__name__}")
    writer.close()
    return ConnectionError("the agent's connection broke off")
