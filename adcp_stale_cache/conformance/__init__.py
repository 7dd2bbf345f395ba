"""A conformance kit for sellers that serve stale: :func:`check_seller` holds a running seller
(or an ASGI app in process) to the spec's ``STALE_RESPONSE`` rules and AdCP's caching
contract, over MCP or A2A, through its sandbox ``comply_test_controller``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import httpx

from . import caching, rules
from .rules import Result
from .wire import A2aWire, McpWire, Reply, lifespan

__all__ = ["Report", "Result", "check_seller"]

CONTROLLER = "comply_test_controller"


@dataclass
class Report:
    """Every rule's result, in the order checked."""

    target: str
    transport: str
    results: list[Result] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when rules were checked and none failed but advisory ones."""
        return bool(self.results) and not any(r.blocking for r in self.results)

    def failed(self) -> list[Result]:
        """The rules that failed the seller (advisory ones are not among them)."""
        return [r for r in self.results if r.blocking]

    def advisories(self) -> list[Result]:
        """The advisory rules that failed: reported, never failing the seller."""
        return [r for r in self.results if r.passed is False and not r.blocking]

    def text(self) -> str:
        """One line per rule, then the verdict."""
        verdict = "conformant" if self.passed else f"NOT conformant: {len(self.failed())} failed"
        if self.advisories():
            verdict += f" ({len(self.advisories())} advisory failed)"
        lines = [r.line() for r in self.results]
        return "\n".join([*lines, f"{self.target} over {self.transport}: {verdict}"])

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "target": self.target,
            "transport": self.transport,
            "passed": self.passed,
            "results": [
                {"rule": r.rule, "passed": r.passed, "seen": r.seen, "severity": r.severity}
                for r in self.results
            ],
        }


async def check_seller(
    target: str | Any,
    *,
    transport: str = "mcp",
    tool: str = "get_products",
    upstreams: Iterable[str] = (),
    cache_age: int = 120,
    auth: str | None = None,
    arguments: dict[str, Any] | None = None,
    path: str | None = None,
    timeout: float = 30.0,
) -> Report:
    """Check the seller at ``target`` (a URL, or an ASGI app served in process at
    ``path``) against the ``STALE_RESPONSE`` rules.

    ``upstreams`` are forced down together (one advisory each expected; none: the tool's
    default); ``cache_age`` is the forced ``cache_age_seconds``; ``auth`` a bearer token sent
    with every call and looked for in advisories' text."""
    if transport not in ("mcp", "a2a"):
        raise ValueError("transport is 'mcp' or 'a2a'")
    upstream_names = list(upstreams)
    shown = target if isinstance(target, str) else f"{type(target).__name__} (in process)"
    report = Report(shown, transport)
    async with _client(target, auth, timeout) as (http, base):
        url = base if isinstance(target, str) else base + (path or _DEFAULT_PATHS[transport])
        wire: McpWire | A2aWire = (McpWire if transport == "mcp" else A2aWire)(http, url)
        try:
            await _run(wire, report, tool, upstream_names, cache_age, auth, arguments or {})
        except httpx.HTTPError as exc:
            report.results.append(Result("reachable", False, f"{type(exc).__name__}: {exc}"))
    return report


_DEFAULT_PATHS = {"mcp": "/mcp", "a2a": "/"}


async def _run(
    wire: McpWire | A2aWire,
    report: Report,
    tool: str,
    upstreams: list[str],
    cache_age: int,
    auth: str | None,
    arguments: dict[str, Any],
) -> None:
    results = report.results
    await wire.open()
    tools = await wire.tools()

    def call_args(step: str) -> dict[str, Any]:
        return {**arguments, "context": {"correlation_id": f"adcp-stale-cache-check--{step}"}}

    capabilities = await wire.call("get_adcp_capabilities", call_args("capabilities"))
    payload = capabilities.payload or {}
    # An unset adcp_error written as null (fastmcp writes unset fields) is no error.
    no_error = payload.get("adcp_error") is None
    results.append(
        Result(
            "capabilities",
            capabilities.transport_ok and no_error and bool(payload),
            capabilities.transport,
        )
    )
    results += caching.versions(payload)
    wholesale, overlays = caching.declared(payload) if "get_products" in tools else (False, False)
    # A tool whose response has no errors member (3.2's list_products) must never carry one.
    no_errors_in = None if rules.has_errors_member(tool) else tool
    results += rules.healthy(await wire.call(tool, call_args("healthy")), "before", no_errors_in)
    if CONTROLLER not in tools:
        results.append(
            Result(
                "controller",
                False,
                f"the seller lists no {CONTROLLER}: the stale path cannot be "
                "forced (run it with its sandbox test controller)",
            )
        )
        return
    names: list[str | None] = [*upstreams] or [None]
    for name in names:
        forced = await _force(wire, tool, name, cache_age_seconds=cache_age)
        ok = forced.transport_ok and (forced.payload or {}).get("success") is True
        seen = f"{forced.transport}, {json.dumps(forced.payload)[:200]}"
        # The storyboard grades its forcing phase advisory: an unknown scenario is reported.
        unknown = (forced.payload or {}).get("error") == "UNKNOWN_SCENARIO"
        rule = f"controller ({name or 'default upstream'})"
        results.append(Result(rule, ok, seen, "advisory" if unknown else "required"))
        if not ok:
            results.append(
                Result(
                    "stale_path",
                    None,
                    "not checked: the controller did not acknowledge force_upstream_unavailable",
                )
            )
            return
    reply: Reply = await wire.call(tool, call_args("stale"))
    if no_errors_in is not None:
        results += rules.stale_without_errors(reply, tool)
    else:
        results += rules.stale(
            reply,
            tool=tool,
            upstreams=upstreams,
            cache_age=cache_age,
            secrets=[auth] if auth else [],
            validators=rules.official_validators(),
        )
    results += rules.healthy(await wire.call(tool, call_args("after")), "after", no_errors_in)
    if wholesale:
        results += await _wholesale(wire, overlays, arguments, caching.speaks_3_2(payload))
    else:
        results.append(
            Result(
                "wholesale_conditional_fetch",
                None,
                "not applicable: the seller declares no wholesale_feed_versioning",
            )
        )
    results.append(await _nothing_cached(wire, tool, names, call_args("empty")))


async def _wholesale(
    wire: McpWire | A2aWire, overlays: bool, arguments: dict[str, Any], echoes: bool
) -> list[Result]:
    """Conditional fetch, as the ``wholesale_feed_products`` storyboards play it, then a probe
    while the upstream is forced down."""
    results: list[Result] = []

    async def read(step: str, **fields: Any) -> tuple[Reply, dict[str, Any]]:
        context = {"correlation_id": f"adcp-stale-cache-check--wholesale-{step}"}
        request = {
            **arguments,
            "buying_mode": "wholesale",
            "account": caching.ACCOUNT,
            **fields,
            "context": context,
        }
        return await wire.call("get_products", request), context

    reply, context = await read("bootstrap")
    results += caching.bootstrap(reply, context)
    if echoes:  # a 3.2 seller echoes its release on every answer, not only the capabilities
        results.append(caching.echoes_release(reply, "get_products"))
    payload = reply.payload or {}
    token, scope = payload.get("wholesale_feed_version"), payload.get("cache_scope")
    if not isinstance(token, str):
        return results
    reply, context = await read("probe", if_wholesale_feed_version=token)
    results += caching.probe(reply, token, scope, context)
    sent = f"{token}-not-current"
    reply, _ = await read("mismatch", if_wholesale_feed_version=sent)
    results.append(caching.mismatched_token(reply, sent))
    reply, _ = await read("pricing", if_pricing_version="stale-pricing-token")
    results.append(caching.lone_pricing_token(reply))
    if overlays:
        reply, _ = await read("overlay", account=caching.OVERLAY, if_wholesale_feed_version=token)
        results += caching.scope_isolation(reply, token)
    forced = await _force(wire, "get_products", None)
    if forced.transport_ok and (forced.payload or {}).get("success") is True:
        reply, _ = await read("stale-probe", if_wholesale_feed_version=token)
        results.append(caching.stale_and_unchanged(reply, token))
    else:
        results.append(
            Result(
                "stale_probe_is_full",
                None,
                "not applicable: the controller did not acknowledge force_upstream_unavailable",
            )
        )
    return results


async def _nothing_cached(
    wire: McpWire | A2aWire, tool: str, names: list[str | None], arguments: dict[str, Any]
) -> Result:
    """With nothing cached the failure stays a failure. Needs a controller that
    acknowledges ``empty_cache`` (our extension: the spec's scenario seeds a cold cache)."""
    rule = "nothing_when_nothing_cached"
    for name in names:
        forced = await _force(wire, tool, name, empty_cache=True)
        if not (forced.transport_ok and (forced.payload or {}).get("empty_cache") is True):
            return Result(
                rule,
                None,
                "not applicable: the controller does not acknowledge "
                "empty_cache (the spec's scenario seeds a cold cache)",
            )
    reply = await wire.call(tool, arguments)
    return rules.failure_stays_failure(reply, [name for name in names if name is not None])


async def _force(wire: McpWire | A2aWire, tool: str, upstream: str | None, **params: Any) -> Reply:
    """``force_upstream_unavailable`` for ``tool`` (and ``upstream``, else its default)."""
    params["tool"] = tool
    if upstream is not None:
        params["upstream_name"] = upstream
    return await wire.call(
        CONTROLLER,
        {
            "scenario": "force_upstream_unavailable",
            "params": params,
            "account": {"sandbox": True},
            "context": {"correlation_id": str(uuid4())},
        },
    )


@contextlib.asynccontextmanager
async def _client(
    target: str | Any, auth: str | None, timeout: float
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    headers = {"authorization": f"Bearer {auth}"} if auth else {}
    if isinstance(target, str):
        async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
            yield http, target
        return
    async with (
        lifespan(target),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(target), headers=headers, timeout=timeout
        ) as http,
    ):
        # MCP servers refuse Host headers other than loopback with a port (DNS rebinding).
        yield http, "http://127.0.0.1:8000"
