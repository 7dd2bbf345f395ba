"""AdCP's wholesale conditional fetch, sans-I/O: canonical filters, scope-keyed feed tokens
and the spec's evaluation order (``get_products`` in ``buying_mode: "wholesale"``, AdCP 3.1).

A buyer mirroring a seller's wholesale feed sends back the ``wholesale_feed_version`` (and
``pricing_version``) of its last read as ``if_wholesale_feed_version`` (and
``if_pricing_version``); a seller whose feed has not changed for the request's scope may
answer ``unchanged: true`` without the products. Three rules make that safe, and each is one
function here:

- :func:`canonical` puts a request in one form before it keys anything: keys sorted, an
  omitted key equal to a null one, and to its schema default (and, in a token's scope, an
  empty object to an omitted one); an array is a set (sorted, deduplicated) only where the
  tool's request schema of the request's release says so (:mod:`.request_shapes`, generated
  from the schemas), every other array, and every array of a member no schema knows, is a
  sequence kept in order (GeoJSON coordinates, say); values nested deeper than
  :data:`MAX_DEPTH` are refused. The cache's keys and the token keyspace both read it, so two
  spellings of one request are one entry and one token, and two meanings never are.
- :func:`feed_scope` is the token's scope: every member of the request but those that never
  change its answer (:data:`NOT_THE_SCOPE`: ``context``, the tokens themselves,
  ``pagination.cursor``...), so that a member a release adds (3.2's
  ``media_buy_frequency_cap``, ``required_media_buy_support``) scopes the token unless it is
  known not to; plus the agent, and the account for ``cache_scope: "account"``.
  :func:`feed_version` mints a token
  from that scope and what the answer was composed of, so a token minted under one scope can
  never match a request resolved to another, it changes exactly when the content does, and
  every process sharing the content agrees on it (and a restart does not change it).
- :func:`evaluate` applies the spec's order: a lone ``if_pricing_version`` is
  ``INVALID_REQUEST``; feed token mismatch: full answer; feed match, pricing mismatch: full;
  both match: ``unchanged``. A seller that cannot know the current version (its upstream is
  down and the entry past its target) passes ``known=False``: the answer is then full, with
  its ``STALE_RESPONSE`` (``unchanged: true`` would claim a freshness the seller cannot
  know, and an advisory may only ride on a non-empty payload).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .request_shapes import SHAPES

#: How deep a request value may nest: deeper is refused (``ValueError``), never recursed
#: into until the interpreter's own limit.
MAX_DEPTH = 32

#: Request members that never change which products (or signals) answer it: every other
#: member is part of a feed token's scope. ``account`` enters as the seller's account
#: identity, for ``cache_scope: "account"`` only.
NOT_THE_SCOPE = frozenset({
    "context", "context_id", "idempotency_key", "push_notification_config", "time_budget",
    "if_wholesale_feed_version", "if_pricing_version", "if_feed_version", "cursor",
    "adcp_version", "adcp_major_version", "account",
})  # fmt: skip

#: The version of this module's token derivation: part of every token, so that a change of
#: derivation (wf2: the scope holds every member that selects, arrays are sets only where
#: the schema says so) never lets an old token match.
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
    """What ``tool``'s request schema of ``release`` says of its arrays and defaults (see
    :mod:`.request_shapes`): None, or a release it does not know, gives what every known
    release agrees on; an unknown tool, nothing (every array a sequence)."""
    releases = SHAPES.get(tool or "", {})
    found: Mapping[str, Any] = releases.get(release or "any", releases.get("any", {}))
    return found


def canonical(
    value: Any, tool: str | None = None, release: str | None = None, *,
    at: tuple[str, ...] = (),
) -> Any:  # fmt: skip
    """``value`` in the one form that keys it (see the module's rules): a request of
    ``tool`` at ``release``, or its member at path ``at`` (``("filters",)``). Raises
    :class:`TypeError` for what JSON cannot carry (a request never holds it), and
    :class:`ValueError` past :data:`MAX_DEPTH` levels of nesting."""
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
    request: Mapping[str, Any], scope: Scope, account: str | None = None, agent: str = "",
    tool: str = GET_PRODUCTS,
) -> dict[str, Any]:  # fmt: skip
    """What a feed token of ``request`` (to ``tool``) is scoped to: its members but
    :data:`NOT_THE_SCOPE` and ``pagination.cursor``, canonical, with ``account`` (its
    identity, as the seller keys accounts) for ``Scope.ACCOUNT``."""
    selecting = {k: v for k, v in request.items() if k not in NOT_THE_SCOPE}
    pagination = selecting.get("pagination")
    if isinstance(pagination, Mapping):  # the page, never the feed
        selecting["pagination"] = {k: v for k, v in pagination.items() if k != "cursor"}
    members = canonical(selecting, tool, release_of(request))
    scoped: dict[str, Any] = {
        "agent": agent, "cache_scope": scope.value,
        "request": {k: v for k, v in members.items() if v != {}},  # {} is an omitted one
    }  # fmt: skip
    if scope is Scope.ACCOUNT:
        if not account:
            raise ValueError("an account-scoped token needs the account it is scoped to")
        scoped["account"] = account
    return scoped


def feed_version(scoped: Mapping[str, Any], contents: Iterable[bytes | str]) -> str:
    """An opaque token for a feed answer: the digest of its scope (see :func:`feed_scope`)
    and of what it was composed of (the stored content of every entry it read, in any
    order). Equal scope and content give an equal token in every process, at every start."""
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
    """The spec's evaluation order for a request against the current ``feed`` token (and
    ``pricing`` token, None when pricing is not tracked apart). ``known=False``: the seller
    cannot know its current version (an outage past the target): never unchanged."""
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
    """The body of an ``unchanged: true`` answer: no products, the tokens and scope echoed
    (and the request's own ``context``)."""
    answer: dict[str, Any] = {"unchanged": True, "wholesale_feed_version": feed,
                              "cache_scope": scope.value}  # fmt: skip
    if pricing is not None:
        answer["pricing_version"] = pricing
    if context is not None:
        answer["context"] = context
    return answer


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
