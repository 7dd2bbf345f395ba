"""AdCP's wholesale conditional fetch, sans-I/O (``get_products`` in ``buying_mode:
"wholesale"``, AdCP 3.1): the canonical form of a request, the scope and value of a feed
token, and the spec's evaluation order. docs/adcp-caching.md states the rules."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .request_shapes import SHAPES

#: How deep a request value may nest: deeper is refused (``ValueError``).
MAX_DEPTH = 32

#: Request members that never select the answer: every other one scopes a feed token.
NOT_THE_SCOPE = frozenset(
    {
        "context",
        "context_id",
        "idempotency_key",
        "push_notification_config",
        "time_budget",
        "if_wholesale_feed_version",
        "if_pricing_version",
        "if_feed_version",
        "cursor",
        "adcp_version",
        "adcp_major_version",
        "account",
    }
)

#: The token derivation's version, in every token: a new derivation never matches an old one.
TOKEN_VERSION = "wf2"

#: The tool whose request a wholesale answer reads, when none is named.
GET_PRODUCTS = "get_products"


class Scope(str, enum.Enum):
    """A products answer's ``cache_scope``: whom buyers may share it with."""

    PUBLIC = "public"  # every account of the buyer reads the same rows (a rate card)
    ACCOUNT = "account"  # this account's own rows (overrides, negotiated prices)


def release_of(request: Mapping[str, Any]) -> str | None:
    """The AdCP release a request pins (``adcp_version`` ``"3.2.1"``: ``"3.2"``), or None."""
    version = request.get("adcp_version")
    if not isinstance(version, str):
        return None
    return ".".join(version.split(".")[:2])


def shape(tool: str | None, release: str | None = None) -> Mapping[str, Any]:
    """What ``tool``'s request schema of ``release`` says of its arrays and defaults; an
    unknown release gives what every release agrees on, an unknown tool nothing."""
    releases = SHAPES.get(tool or "", {})
    found: Mapping[str, Any] = releases.get(release or "any", releases.get("any", {}))
    return found


def canonical(
    value: Any,
    tool: str | None = None,
    release: str | None = None,
    *,
    at: tuple[str, ...] = (),
) -> Any:
    """``value`` in the one form that keys it: a request of ``tool`` at ``release``, or
    its member at path ``at``. Raises :class:`TypeError` for what JSON cannot carry and
    :class:`ValueError` past :data:`MAX_DEPTH` levels."""
    node = shape(tool, release)
    for name in at:
        node = _child(node, name)
    return _canonical(value, node, 0)


def _child(node: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    found = node.get(name)
    if found is None and not name.startswith("@"):
        found = node.get("@any")
    return found if found is not None else {}


def _canonical(value: Any, node: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"request values nest deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        pairs = []
        for key, member in value.items():
            child = _child(node, str(key))
            form = None if member is None else _canonical(member, child, depth + 1)
            if form is None or ("@default" in child and _json(form) == _json(child["@default"])):
                continue  # omitted, null and the schema's default are one meaning
            pairs.append((str(key), form))
        return dict(sorted(pairs, key=lambda pair: pair[0]))
    if isinstance(value, (list, tuple)):
        items = [_canonical(item, _child(node, "@items"), depth + 1) for item in value]
        if not node.get("@set"):
            return items  # a sequence: every array the schema does not call a set
        unique = {_json(item): item for item in items}  # a set: order and repeats mean nothing
        return [unique[key] for key in sorted(unique)]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # JSON Schema's 50.0 is the integer 50
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{type(value).__name__} is not a request value")


def feed_scope(
    request: Mapping[str, Any],
    scope: Scope,
    account: str | None = None,
    agent: str = "",
    tool: str = GET_PRODUCTS,
) -> dict[str, Any]:
    """What a feed token of ``request`` is scoped to: its canonical members but
    :data:`NOT_THE_SCOPE` and ``pagination.cursor``, plus ``account`` for ``Scope.ACCOUNT``."""
    selecting = {k: v for k, v in request.items() if k not in NOT_THE_SCOPE}
    pagination = selecting.get("pagination")
    if isinstance(pagination, Mapping):  # the page, never the feed
        selecting["pagination"] = {k: v for k, v in pagination.items() if k != "cursor"}
    members = canonical(selecting, tool, release_of(request))
    scoped: dict[str, Any] = {
        "agent": agent,
        "cache_scope": scope.value,
        "request": {k: v for k, v in members.items() if v != {}},  # {} is an omitted one
    }
    if scope is Scope.ACCOUNT:
        if not account:
            raise ValueError("an account-scoped token needs the account it is scoped to")
        scoped["account"] = account
    return scoped


def feed_version(scoped: Mapping[str, Any], contents: Iterable[bytes | str]) -> str:
    """An opaque token for a feed answer: the digest of its scope and of the stored
    content it was composed of (in any order), equal in every process and at every start."""
    digest = hashlib.sha256(TOKEN_VERSION.encode())
    digest.update(_json(dict(scoped)).encode())
    parts = sorted(
        hashlib.sha256(c if isinstance(c, bytes) else c.encode()).digest() for c in contents
    )
    for part in parts:
        digest.update(part)
    return f"{TOKEN_VERSION}.{digest.hexdigest()[:40]}"


class Outcome(str, enum.Enum):
    """What a wholesale request gets (see :func:`evaluate`)."""

    FULL = "full"  # the products, with the current tokens
    UNCHANGED = "unchanged"  # unchanged: true, no products, the tokens and scope echoed
    INVALID = "invalid"  # INVALID_REQUEST: a pricing token without a feed token


def evaluate(
    request: Mapping[str, Any], feed: str, pricing: str | None = None, *, known: bool = True
) -> Outcome:
    """The spec's evaluation order against the current ``feed`` (and ``pricing``) token;
    ``known=False`` (the seller cannot know its current version) is never unchanged."""
    if_feed, if_pricing = (
        request.get("if_wholesale_feed_version"),
        request.get("if_pricing_version"),
    )
    if if_pricing is not None and if_feed is None:
        return Outcome.INVALID
    if request.get("buying_mode") != "wholesale" or if_feed is None or not known:
        return Outcome.FULL
    if if_feed != feed:
        return Outcome.FULL  # pricing is implicitly stale too
    if pricing is not None and if_pricing is not None and if_pricing != pricing:
        return Outcome.FULL
    return Outcome.UNCHANGED


def unchanged_answer(
    feed: str, scope: Scope, pricing: str | None = None, context: Any = None
) -> dict[str, Any]:
    """The body of an ``unchanged: true`` answer: the tokens, the scope and the
    request's ``context``."""
    answer: dict[str, Any] = {
        "unchanged": True,
        "wholesale_feed_version": feed,
        "cache_scope": scope.value,
    }
    if pricing is not None:
        answer["pricing_version"] = pricing
    if context is not None:
        answer["context"] = context
    return answer


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
