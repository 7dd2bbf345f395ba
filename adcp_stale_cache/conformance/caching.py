"""AdCP's own caching contract, as checks over what a seller answered (no I/O): release
echo, wholesale conditional fetch and its scope isolation, each only where the seller
declares it (else reported not applicable, never passed)."""

from __future__ import annotations

import re
from typing import Any

from .rules import Result, stale_advisories
from .wire import Reply

#: The account the official storyboards use to elicit an account-scoped answer.
OVERLAY_ACCOUNT = "account-overlay.example"
#: The ordinary account of the storyboards' test kit.
ACCOUNT = {"brand": {"domain": "acmeoutdoor.example"}, "operator": "pinnacle-agency.example"}
OVERLAY = {"brand": {"domain": OVERLAY_ACCOUNT}, "operator": "pinnacle-agency.example"}

_RELEASE = re.compile(
    r"^(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?)?$"
)
_SINCE_3_2 = re.compile(r"^(?:3\.(?:[2-9]|[1-9][0-9]+)|(?:[4-9]|[1-9][0-9]+)\.\d+)")


def declared(capabilities: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the seller declares conditional fetch, and account overlays."""
    versioning = capabilities.get("wholesale_feed_versioning")
    if not isinstance(versioning, dict) or versioning.get("supported") is not True:
        return False, False
    return True, versioning.get("cache_scope_account") is True


def speaks_3_2(capabilities: dict[str, Any]) -> bool:
    """Whether the seller advertises (or serves) a release of 3.2 or later."""
    adcp = capabilities.get("adcp") if isinstance(capabilities.get("adcp"), dict) else {}
    supported = adcp.get("supported_versions") if isinstance(adcp, dict) else None
    listed = supported if isinstance(supported, list) else []
    return any(
        isinstance(v, str) and bool(_SINCE_3_2.match(v))
        for v in [*listed, capabilities.get("adcp_version")]
    )


def versions(capabilities: dict[str, Any]) -> list[Result]:
    """``adcp.supported_versions`` advertised and ``adcp_version`` echoed (3.2 and later)."""
    adcp = capabilities.get("adcp") if isinstance(capabilities.get("adcp"), dict) else {}
    supported = adcp.get("supported_versions") if isinstance(adcp, dict) else None
    echoed = capabilities.get("adcp_version")
    if not speaks_3_2(capabilities):
        return [
            Result(
                "adcp_version_echoed",
                None,
                "not applicable: no release of 3.2 or later "
                "advertised (older releases keep their own bundles)",
            )
        ]
    listed = (
        isinstance(supported, list)
        and bool(supported)
        and all(isinstance(v, str) and _RELEASE.fullmatch(v) for v in supported)
    )
    return [
        Result("supported_versions_advertised", listed, f"adcp.supported_versions={supported!r}"),
        Result(
            "adcp_version_echoed",
            isinstance(echoed, str) and bool(_RELEASE.fullmatch(echoed)),
            f"adcp_version={echoed!r}",
        ),
    ]


def bootstrap(reply: Reply, context: dict[str, Any]) -> list[Result]:
    """A wholesale read: products, an opaque feed token, a ``cache_scope``, the context."""
    payload = reply.payload or {}
    token, scope = payload.get("wholesale_feed_version"), payload.get("cache_scope")
    return [
        Result(
            "wholesale_bootstrap",
            reply.transport_ok and _products(payload) and "unchanged" not in payload,
            f"{reply.transport}, {_shape(payload)}",
        ),
        Result("wholesale_feed_version", isinstance(token, str) and bool(token), repr(token)),
        Result("cache_scope_declared", scope in ("public", "account"), repr(scope)),
        _context(payload, context),
    ]


def probe(reply: Reply, token: str, scope: Any, context: dict[str, Any]) -> list[Result]:
    """A matching probe: ``unchanged: true``, no products, the token and scope echoed."""
    payload = reply.payload or {}
    unchanged = reply.transport_ok and payload.get("unchanged") is True
    echoed = payload.get("wholesale_feed_version"), payload.get("cache_scope")
    return [
        Result(
            "unchanged_probe",
            unchanged and "products" not in payload,
            f"{reply.transport}, {_shape(payload)}",
        ),
        Result(
            "unchanged_echoes_token_and_scope",
            echoed == (token, scope),
            f"{echoed[0]!r}, {echoed[1]!r}",
        ),
        _context(payload, context),
    ]


def echoes_release(reply: Reply, tool: str) -> Result:
    """``adcp_version`` echoed on an answer other than the capabilities' (every answer)."""
    echoed = (reply.payload or {}).get("adcp_version")
    return Result(
        f"adcp_version_echoed ({tool})",
        isinstance(echoed, str) and bool(_RELEASE.fullmatch(echoed)),
        f"adcp_version={echoed!r}",
    )


def mismatched_token(reply: Reply, sent: str) -> Result:
    """A probe with a token that is not the current one: the full feed with the
    current token, never ``unchanged`` nor the token sent."""
    payload = reply.payload or {}
    token = payload.get("wholesale_feed_version")
    full = reply.transport_ok and "unchanged" not in payload and _products(payload)
    return Result(
        "mismatched_token_full",
        full and isinstance(token, str) and token != sent,
        f"{reply.transport}, {_shape(payload)}, token {token!r}",
    )


def lone_pricing_token(reply: Reply) -> Result:
    """``if_pricing_version`` without ``if_wholesale_feed_version``: ``INVALID_REQUEST``."""
    payload = reply.payload or {}
    error = payload.get("adcp_error")
    errors = payload.get("errors")
    listed = errors if isinstance(errors, list) else []
    codes = [e.get("code") for e in [error, *listed] if isinstance(e, dict)]
    refused = "INVALID_REQUEST" in codes and not _products(payload)
    return Result("lone_pricing_token_refused", refused, f"{reply.transport}, codes {codes}")


def scope_isolation(reply: Reply, public_token: str) -> list[Result]:
    """The overlay account's read with the public token: its own full feed, ``account``."""
    payload = reply.payload or {}
    return [
        Result(
            "overlay_is_account_scoped",
            payload.get("cache_scope") == "account",
            repr(payload.get("cache_scope")),
        ),
        Result(
            "no_token_across_scopes",
            reply.transport_ok
            and "unchanged" not in payload
            and _products(payload)
            and payload.get("wholesale_feed_version") != public_token,
            f"{reply.transport}, {_shape(payload)}",
        ),
    ]


def stale_and_unchanged(reply: Reply, token: str) -> Result:
    """A probe while the upstream is down past the target: never ``unchanged`` (the seller
    cannot know its version), the full cached feed, one ``STALE_RESPONSE``, its token."""
    payload = reply.payload or {}
    advisories = stale_advisories(payload)
    full = reply.transport_ok and "unchanged" not in payload and _products(payload)
    held = full and len(advisories) == 1 and payload.get("wholesale_feed_version") == token
    return Result(
        "stale_probe_is_full",
        held,
        f"{reply.transport}, {_shape(payload)}, {len(advisories)} STALE_RESPONSE",
    )


def _products(payload: dict[str, Any]) -> bool:
    products = payload.get("products")
    return isinstance(products, list) and bool(products)


def _shape(payload: dict[str, Any]) -> str:
    products = payload.get("products")
    rows = f"{len(products)} products" if isinstance(products, list) else "no products"
    return f"{rows}, unchanged={payload.get('unchanged')!r}"


def _context(payload: dict[str, Any], context: dict[str, Any]) -> Result:
    return Result(
        "context_echoed", payload.get("context") == context, f"context={payload.get('context')!r}"
    )
