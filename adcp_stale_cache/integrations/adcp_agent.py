"""An AdCP agent as an upstream (a sub-seller, a signals agent), asked through the ``adcp``
client and cached by the protocol's own rules.

Beside :func:`~adcp_stale_cache.integrations.mcp_client.call_mcp_tool` (any tool, any MCP
server), :class:`AdcpAgent` knows what an AdCP answer means for a cache:

- **Its age** (:mod:`~adcp_stale_cache.adcp.hops`): an answer carrying the agent's own
  ``STALE_RESPONSE`` is stored as old as it says, and our buyer is told once it is past our
  target, with one advisory of ours for this upstream.
- **What is never stored:** an ``adcp_error`` (a failure: transient ones fall back to the
  cache like any outage, the others are raised as :class:`AgentRefused`), the rejected arm
  (``status: "rejected"``), a partial answer (``incomplete[]``), and the agent's echo of a
  ``context``, which is the request's (it is never sent on either: the buyer's context is
  the buyer's, echoed by the seller itself).
- **Revalidation like a 304:** past our target, a held wholesale answer is revalidated with
  its ``wholesale_feed_version`` (and ``pricing_version``) as ``if_*`` tokens; an
  ``unchanged: true`` re-stamps the held answer (a success for the breaker), a changed feed
  is read in full.
- **Layers:** a request without an account is the public layer; an account's entry is its
  overlay (the agent said ``account``) or a mark of the public layer every account the agent
  answered ``public`` shares (see :meth:`AdcpAgent.ask`).
- **Keys:** the request in canonical form (:func:`~adcp_stale_cache.adcp.wholesale.canonical`:
  reordered filters are one entry), without what is per call (``context``,
  ``idempotency_key``, the ``if_*`` tokens), with the account when it names one (its
  ``account_id`` tags the entry, for webhooks: see
  :mod:`~adcp_stale_cache.integrations.feed_webhooks`), and with the credentials the agent
  is called with (``Upstream(credentials=)``).

Needs the ``adcp`` extra (9.2 or later for the client calls: ``adcp-server``); pass
``call=`` to reach the agent another way (another client, a test's fake).
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

#: How the adapter reaches the agent: ``(tool, params) -> the answer's wire payload`` (a
#: dict, ``adcp_error`` and all); raises for transport failures.
AgentCall = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

#: What a request carries per call, never part of what it asks.
PER_CALL = frozenset(
    {"context", "idempotency_key", "if_wholesale_feed_version", "if_pricing_version"}
)
#: What an account's entry holds when the agent answered it ``public``: read the public layer.
LAYER = "adcp_stale_cache_layer"

#: The tools whose answers carry wholesale tokens (conditional fetch).
VERSIONED = frozenset({"get_products", "get_signals"})


def account_tag(account_id: str) -> str:
    """The tag of an agent's entries for one of the seller's accounts (a webhook's
    ``applies_to.account_ids`` select them: see feed_webhooks)."""
    return f"account:{account_id}"


class AgentRefused(Exception):
    """The agent answered an ``adcp_error`` that is no outage (the request's to correct, or
    terminal): never cached, never served stale over. ``error`` is the agent's error object."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        code = error.get("code")
        super().__init__(code if isinstance(code, str) else "adcp_error")
        self.error = dict(error)

    @property
    def failure(self) -> Failure:
        """The refusal as a failure a buyer may be shown: the agent's code when it is an
        AdCP code, our words (the agent's may name what a buyer must not see)."""
        code = self.error.get("code")
        return Failure(FailureKind.UPSTREAM_ERROR, code if is_adcp_code(code) else "UPSTREAM_ERROR",
                       "Upstream refused the request")  # fmt: skip


class AdcpAgent:
    """``upstream`` (an AdCP agent's MCP endpoint) behind ``cache``, on ``surface``.

    ``token`` is sent as ``Authorization: Bearer``, and joins the keys (beside the
    upstream's own ``credentials``, if any): agents called with two tenants' tokens never
    share an entry. No call to the agent (``call=`` or the ``adcp`` client's) waits longer
    than ``timeout`` (a finite number of seconds above 0, else :class:`ValueError`): past
    it, a ``TIMEOUT`` outage.
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
        """The agent's answer to ``tool`` with ``request``, from cache when the surface
        allows: without the agent's own staleness advisories (ours stand for them, see
        :mod:`~adcp_stale_cache.adcp.hops`) and without ``context``.

        Entries follow the spec's layers. A request without an account is the public layer.
        With one, the account's entry is its overlay (the agent said ``account``) or, when
        the agent said ``public``, a mark that sends every read to the public layer, which
        every account it holds for shares (a later ``public`` for an account that had an
        overlay drops it: the spec's downgrade).
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
        self, tool: str, params: dict[str, Any], key: tuple[Any, ...], tags: tuple[str, ...],
        public: tuple[Any, ...] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The entry of ``params`` (under ``key``); with ``public`` (the public layer's key,
        for an account's request), a public answer is kept there and the account's entry
        marks it."""

        async def call() -> dict[str, Any]:
            return await self._layered(public, await self._answer(tool, params))

        async def revalidate(held: dict[str, Any]) -> dict[str, Any]:
            return await self._layered(public, await self._revalidate(tool, params, held))

        return await self.cache.fetch(
            self.upstream, key, call, surface=self.surface, cacheable=storable,
            directives=directives_of, tags=tags, revalidate=revalidate,
        )  # fmt: skip

    async def _layered(
        self, public: tuple[Any, ...] | None, answer: dict[str, Any]
    ) -> dict[str, Any]:
        """An account's ``answer`` as its entry keeps it: itself (an overlay), or, said
        ``public``, the mark of the public layer (where the answer is kept, under
        ``public``)."""
        if public is None or answer.get("cache_scope") != "public" or not storable(answer):
            return answer
        await self.cache.fetch(
            self.upstream, public, _given(answer), surface=self.surface, cacheable=storable,
            directives=directives_of,
        )  # fmt: skip
        return {LAYER: "public", "cache_scope": "public"}

    async def _wire(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        """The agent's wire payload, within ``timeout``."""
        return await within(self.call(tool, params), self.timeout, f"the agent's {tool!r}")

    async def _answer(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = answer_of(await self._wire(tool, params))
        if answer.get("unchanged") is True:  # sent no token: there is nothing it could match
            raise InvalidPayload("the agent answered unchanged to a request with no token")
        return answer

    async def _revalidate(
        self, tool: str, params: dict[str, Any], held: dict[str, Any]
    ) -> dict[str, Any]:
        """The held answer again when the agent says its feed is unchanged, else the new one."""
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
    """An agent's wire payload as the cache takes it: failures raised (transient ones as an
    outage, :class:`~adcp_stale_cache.UpstreamError`; others as :class:`AgentRefused`), the
    agent's ``context`` echo dropped (and a member named as our layer mark: see ask)."""
    if not isinstance(payload, Mapping):
        raise InvalidPayload("the agent answered no JSON object")
    failed = payload.get("adcp_error")
    if isinstance(failed, Mapping):
        code = failed.get("code")
        code = code if isinstance(code, str) else "UPSTREAM_ERROR"
        if failed.get("recovery") in ("correctable", "terminal"):
            raise AgentRefused(failed)
        raise UpstreamError(code)
    # Never the agent's: the context is the request's, the layer mark ours.
    return {name: value for name, value in payload.items() if name not in _NOT_THE_AGENTS}


_NOT_THE_AGENTS = frozenset({"context", LAYER})


def storable(payload: Mapping[str, Any]) -> bool:
    """False for what must never be cached as an answer: the rejected arm, a partial answer
    (``incomplete[]``), an ``unchanged`` one; a products answer must hold its products."""
    if payload.get("status") == "rejected" or payload.get("incomplete"):
        return False
    if payload.get("unchanged") is True:  # no feed at all: a probe's answer, never kept
        return False
    return "products" not in payload or isinstance(payload.get("products"), list)


def _given(answer: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """A call that answers ``answer`` (the public layer, filled from an account's call)."""

    async def call() -> dict[str, Any]:
        return answer

    return call


#: What an ``unchanged: true`` answer must echo as the held answer has it to mean "the same".
_ECHOED = ("wholesale_feed_version", "pricing_version", "cache_scope")


def adcp_client_call(url: str, token: str | None, timeout: float) -> AgentCall:
    """An :data:`AgentCall` on the ``adcp`` client (MCP, streamable HTTP): one client per
    call (its session belongs to the loop that made it), pinned to AdCP 3.2 so that no
    ``get_adcp_capabilities`` round trip precedes each call; the answer's wire payload.
    ``timeout`` is the client's transport timeout: the surface's deadline bounds the call
    before it, so keep it longer."""
    from adcp import ADCPClient
    from adcp.types import AgentConfig, Protocol
    from adcp.validation.client_hooks import ValidationHookConfig

    config = AgentConfig(
        id="upstream", agent_uri=url, protocol=Protocol.MCP, mcp_transport="streamable_http",
        auth_token=token, auth_type="bearer", auth_header="Authorization", timeout=timeout,
        debug=True,  # the wire payload, as the agent wrote it (debug_info.response)
    )  # fmt: skip
    # We read the wire payload ourselves: the client's response checks warn, never refuse.
    checks = ValidationHookConfig(requests="off", responses="warn")

    async def call(tool: str, params: dict[str, Any]) -> dict[str, Any]:
        client = ADCPClient(config, server_version="3.2", validation=checks,
                            account_policy="off", raise_account_errors=False)  # fmt: skip
        async with client:
            try:
                # The adapter's task methods take and give dicts (the typed ones would
                # parse the answer into models and back): get_products, get_signals, ...
                result = await getattr(client.adapter, tool)(params)
            except asyncio.CancelledError:
                cancelling = getattr(asyncio.current_task(), "cancelling", None)  # 3.11+
                if cancelling is None or cancelling():
                    raise  # ours: the deadline, or the request went away
                # adcp 9.x with mcp 2.x: a refused or broken connection surfaces as a
                # cancellation of the client's own scope. Say which it was.
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
    """What an unreachable agent's address says to a bare connection attempt."""
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
