"""AdCP's wholesale conditional fetch, sans-I/O: canonical filters, scope-keyed feed tokens
and the spec's evaluation order (``get_products`` in ``buying_mode: "wholesale"``, AdCP 3.1).

A buyer mirroring a seller's wholesale feed sends back the ``wholesale_feed_version`` (and
``pricing_version``) of its last read as ``if_wholesale_feed_version`` (and
``if_pricing_version``); a seller whose feed has not changed for the request's scope may
answer ``unchanged: true`` without the products. Three rules make that safe, and each is one
function here:

- :func:`canonical` puts a request's filters in one form before they key anything: keys
  sorted, an omitted key equal to a null one (and, in a token's scope, an empty object to an
  omitted one), set-semantics arrays sorted and deduplicated
  (every array, and every field this library does not know, unless it is a sequence:
  ``preferred_delivery_types``, ``refine``), sequence arrays kept in order; values nested
  deeper than :data:`MAX_DEPTH` are refused. The cache's keys and the
  token keyspace both read it, so two spellings of one request are one entry and one token.
- :func:`feed_scope` is the token's scope: ``(agent, buying_mode, filters, targeting_overlay,
  required_overlay_support, property_list, catalog)``, plus the account for ``cache_scope:
  "account"``; ``pagination.cursor`` is never part of it. :func:`feed_version` mints a token
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

#: Arrays whose order means something (the spec's sequence arrays); every other array of a
#: request is a set (the spec's default for fields it adds later).
SEQUENCE_FIELDS = frozenset({"preferred_delivery_types", "refine"})

#: How deep a request value may nest: deeper is refused (``ValueError``), never recursed
#: into until the interpreter's own limit.
MAX_DEPTH = 32

#: The request fields a feed token is scoped to (``cache_scope: "account"`` adds the account).
SCOPE_FIELDS = (
    "buying_mode", "filters", "targeting_overlay", "required_overlay_support",
    "property_list", "catalog",
)  # fmt: skip

#: The version of this module's token derivation: part of every token, so that a change of
#: derivation never lets an old token match.
TOKEN_VERSION = "wf1"


class Scope(str, enum.Enum):
    """A products answer's ``cache_scope``: whom buyers may share it with."""

    PUBLIC = "public"  # every account of the buyer reads the same rows (a rate card)
    ACCOUNT = "account"  # this account's own rows (overrides, negotiated prices)


def canonical(value: Any, field: str | None = None, depth: int = 0) -> Any:
    """``value`` in the one form that keys it (see the module's rules). Raises
    :class:`TypeError` for what JSON cannot carry (a request never holds it), and
    :class:`ValueError` past :data:`MAX_DEPTH` levels of nesting."""
    if depth > MAX_DEPTH:
        raise ValueError(f"request values nest deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        pairs = ((str(k), canonical(v, str(k), depth + 1)) for k, v in value.items()
                 if v is not None)  # fmt: skip
        return dict(sorted(pairs, key=lambda pair: pair[0]))
    if isinstance(value, (list, tuple)):
        items = [canonical(item, None, depth + 1) for item in value]
        if field in SEQUENCE_FIELDS:
            return items
        unique = {_json(item): item for item in items}  # a set: order and repeats mean nothing
        return [unique[key] for key in sorted(unique)]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{type(value).__name__} is not a request value")


def feed_scope(
    request: Mapping[str, Any], scope: Scope, account: str | None = None, agent: str = ""
) -> dict[str, Any]:
    """What a feed token of ``request`` is scoped to: the spec's scoping tuple, canonical,
    with ``account`` (its identity, as the seller keys accounts) for ``Scope.ACCOUNT``."""
    scoped: dict[str, Any] = {"agent": agent, "cache_scope": scope.value}
    for name in SCOPE_FIELDS:
        value = canonical(request.get(name), name)
        if value is not None and value != {}:  # an empty object is an omitted one
            scoped[name] = value
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
