"""Wholesale conditional fetch answered from the cache (issue 24): a seller's get_products
wrapped in answer_wholesale, over a real UpstreamCache and an upstream that changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
)
from adcp_stale_cache.adcp.conditional import InvalidConditionalRequest, answer_wholesale
from adcp_stale_cache.adcp.wholesale import Scope, canonical
from adcp_stale_cache.ops.control import CacheControl

from ..conftest import FakeClock

PRODUCTS = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=2,
                         max_stale_seconds=3600, shared_across_callers=True)  # fmt: skip
INVENTORY = Upstream(name="inventory")


class Inventory:
    def __init__(self) -> None:
        self.version, self.down, self.calls = 1, False, 0

    async def read(self, filters: Any) -> list[dict[str, Any]]:
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError
        return [{"product_id": f"p{i}-v{self.version}"} for i in range(3)]


class Seller:
    """``memo``: matching probes answered without composing (``answer_wholesale(cache=)``)."""

    def __init__(
        self, clock: FakeClock, store: Any = None, memo: bool = True, more: Any = ()
    ) -> None:
        self.inventory = Inventory()
        surfaces = Surfaces.of(PRODUCTS, *more)  # ``more`` surfaces beside the products
        self.cache = UpstreamCache(store or MemoryStore(clock=clock), surfaces=surfaces,
                                   clock=clock, breaker=None)  # fmt: skip
        self.memo = memo
        self.composed = 0

    async def get_products(self, request: dict[str, Any]) -> dict[str, Any]:
        account = (request.get("account") or {}).get("account_id")
        scope = Scope.ACCOUNT if account == "account-overlay.example" else Scope.PUBLIC

        async def compose() -> dict[str, Any]:
            self.composed += 1
            filters = canonical(request.get("filters") or {}, "get_products", at=("filters",))
            key = (filters, account if scope is Scope.ACCOUNT else None)
            products = await self.cache.fetch(INVENTORY, key, lambda: self.inventory.read(filters),
                                              surface="get_products")  # fmt: skip
            return {"products": products, "context": request.get("context")}

        with collect_advisories() as advisories:
            answer = await answer_wholesale(request, compose, scope=scope,
                                            account=account if scope is Scope.ACCOUNT else None,
                                            cache=self.cache if self.memo else None)  # fmt: skip
        if advisories:
            answer["errors"] = advisories.errors()
        return answer


def wholesale(**fields: Any) -> dict[str, Any]:
    return {"buying_mode": "wholesale", "context": {"correlation_id": fields.pop("cid", "c")},
            **fields}  # fmt: skip


@pytest.mark.parametrize("memo", [True, False], ids=["memo", "composed"])
async def test_bootstrap_probe_change_and_outage(clock: FakeClock, memo: bool) -> None:
    seller = Seller(clock, memo=memo)
    first = await seller.get_products(wholesale(cid="boot"))
    token = first["wholesale_feed_version"]
    assert first["products"] and first["cache_scope"] == "public"
    assert first["context"] == {"correlation_id": "boot"}

    probe = await seller.get_products(wholesale(if_wholesale_feed_version=token, cid="probe"))
    assert probe == {"unchanged": True, "wholesale_feed_version": token, "cache_scope": "public",
                     "context": {"correlation_id": "probe"}}  # fmt: skip

    seller.inventory.version = 2  # the feed changes; within the target the cache says no
    assert (await seller.get_products(wholesale(if_wholesale_feed_version=token)))["unchanged"]
    clock.advance(3)
    changed = await seller.get_products(wholesale(if_wholesale_feed_version=token))
    assert "unchanged" not in changed and changed["products"][0]["product_id"] == "p0-v2"
    new = changed["wholesale_feed_version"]
    assert new != token

    seller.inventory.down = True
    clock.advance(3)  # past the target, the upstream down: the cached feed, told so
    stale = await seller.get_products(wholesale(if_wholesale_feed_version=new, cid="down"))
    assert "unchanged" not in stale and stale["products"] == changed["products"]
    assert stale["wholesale_feed_version"] == new  # the cached feed's token
    assert [e["code"] for e in stale["errors"]] == ["STALE_RESPONSE"]
    assert stale["context"] == {"correlation_id": "down"}


@pytest.mark.parametrize("memo", [True, False], ids=["memo", "composed"])
async def test_reordered_filters_share_a_token_and_scopes_never_do(
    clock: FakeClock, memo: bool
) -> None:
    seller = Seller(clock, memo=memo)
    one = await seller.get_products(
        wholesale(filters={"channels": ["display", "olv"], "format_kinds": ["image", "html5"]})
    )
    other = await seller.get_products(
        wholesale(filters={"format_kinds": ["html5", "image"], "channels": ["olv", "display"]})
    )
    assert one["wholesale_feed_version"] == other["wholesale_feed_version"]
    assert seller.inventory.calls == 1  # one cache entry too

    overlay = {"account_id": "account-overlay.example"}
    mine = await seller.get_products(wholesale(account=overlay))
    public = await seller.get_products(wholesale())
    assert mine["cache_scope"] == "account" and public["cache_scope"] == "public"
    assert mine["wholesale_feed_version"] != public["wholesale_feed_version"]
    crossed = await seller.get_products(
        wholesale(account=overlay, if_wholesale_feed_version=public["wholesale_feed_version"])
    )
    assert "products" in crossed and "unchanged" not in crossed  # no short-circuit across scopes
    back = await seller.get_products(
        wholesale(if_wholesale_feed_version=mine["wholesale_feed_version"])
    )
    assert "products" in back and "unchanged" not in back


async def test_a_lone_pricing_token_is_refused(clock: FakeClock) -> None:
    with pytest.raises(InvalidConditionalRequest) as refused:
        await Seller(clock).get_products(wholesale(if_pricing_version="stale-pricing-token"))
    assert refused.value.error.code == "INVALID_REQUEST"
    assert refused.value.error.field == "if_pricing_version"


async def test_two_processes_on_one_store_and_a_restart_agree_on_the_token(
    clock: FakeClock,
) -> None:
    store = MemoryStore(clock=clock)
    a, b = Seller(clock, store), Seller(clock, store)
    token = (await a.get_products(wholesale()))["wholesale_feed_version"]
    assert (await b.get_products(wholesale(if_wholesale_feed_version=token)))["unchanged"]
    restarted = Seller(clock, store)
    assert (await restarted.get_products(wholesale(if_wholesale_feed_version=token)))["unchanged"]
    assert a.inventory.calls == 1 and b.inventory.calls == restarted.inventory.calls == 0


async def test_answer_wholesale_needs_a_collector(clock: FakeClock) -> None:
    async def compose() -> dict[str, Any]:
        return {"products": []}

    with pytest.raises(RuntimeError, match="collector"):
        await answer_wholesale(wholesale(), compose)


PER_CALLER = PRODUCTS.model_copy(update={"shared_across_callers": False})


def per_caller_seller(
    clock: FakeClock, *, with_account: bool = True, test_mode: bool = False
) -> tuple[UpstreamCache, Any]:
    """A cache keyed per caller, and ``ask(partition, **fields)``: a wholesale answer (with
    the request's advisories as ``errors``) composed of that caller's own rows
    (``<partition>-rows``), for an account named as the partition when ``with_account``."""
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PER_CALLER), clock=clock,
                          breaker=None, test_mode=test_mode)  # fmt: skip

    async def ask(partition: str, **fields: Any) -> dict[str, Any]:
        async def compose() -> dict[str, Any]:
            async def read() -> list[dict[str, Any]]:
                return [{"product_id": f"{partition}-rows"}]

            return {"products": await cache.fetch(INVENTORY, "k", read, surface="get_products")}

        account = {"account": {"account_id": partition}} if with_account else {}
        with collect_advisories(PER_CALLER, partition=partition) as advisories:
            answer = await answer_wholesale(wholesale(**account, **fields), compose, cache=cache)
        return {**answer, "errors": advisories.errors()}

    return cache, ask


async def test_the_scope_follows_the_keying_and_a_public_claim_of_per_caller_rows_is_caught(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PER_CALLER), clock=clock,
                          breaker=None)  # fmt: skip

    async def compose() -> dict[str, Any]:
        async def read() -> list[dict[str, Any]]:
            return [{"product_id": "negotiated"}]

        return {"products": await cache.fetch(INVENTORY, "feed", read, surface="get_products")}

    from adcp_stale_cache import AdvisoryCollector, use_collector

    def request(**fields: Any) -> dict[str, Any]:
        return wholesale(account={"account_id": "acme"}, **fields)

    with use_collector(AdvisoryCollector(partition="acme-digest")):
        keyed = await answer_wholesale(request(), compose)
        assert keyed["cache_scope"] == "account"  # keyed per caller: an account answer
        other = await answer_wholesale(wholesale(), compose)
        assert other["cache_scope"] == "public"  # no account in the request: public
        with caplog.at_level("WARNING"):
            declared = await answer_wholesale(request(), compose, scope=Scope.PUBLIC)
        assert declared["cache_scope"] == "public"
        assert "cache_scope_contradicts_keying" in caplog.text
        from adcp_stale_cache.adcp.conditional import ScopeContradictsKeying

        with pytest.raises(ScopeContradictsKeying):
            await answer_wholesale(request(), compose, scope=Scope.PUBLIC, strict=True)
    with use_collector(AdvisoryCollector(partition="other-digest")):
        theirs = await answer_wholesale(
            request(if_wholesale_feed_version=keyed["wholesale_feed_version"]), compose
        )
    assert "unchanged" not in theirs  # another caller's account token never short-circuits


# Probes answered without composing (answer_wholesale(cache=)): the same answers, cheaper.


async def test_a_matching_probe_is_answered_without_composing(clock: FakeClock) -> None:
    seller = Seller(clock)
    token = (await seller.get_products(wholesale()))["wholesale_feed_version"]
    for cid in ("a", "b", "c"):
        probe = await seller.get_products(wholesale(if_wholesale_feed_version=token, cid=cid))
        assert probe["unchanged"] is True and probe["context"] == {"correlation_id": cid}
    assert seller.composed == 1  # the bootstrap only
    assert (await seller.get_products(wholesale(if_wholesale_feed_version="other")))["products"]
    assert seller.composed == 2  # a mismatching token: the full answer, composed


@pytest.mark.parametrize("purge", ["soft", "hard", "refresh"])
async def test_a_purge_ends_the_memory_in_every_process(clock: FakeClock, purge: str) -> None:
    """A purge through another process on the shared store, with the feed changed: the next
    probe composes, and gets the new feed; never the token of what was purged."""
    from adcp_stale_cache.ops.control import CacheControl

    store = MemoryStore(clock=clock)
    a, b = Seller(clock, store), Seller(clock, store)
    token = (await a.get_products(wholesale()))["wholesale_feed_version"]
    assert (await a.get_products(wholesale(if_wholesale_feed_version=token)))["unchanged"]
    a.inventory.version = b.inventory.version = 2
    control = CacheControl(b.cache)
    if purge == "refresh":
        await control.refresh(upstream="inventory")  # re-runs nothing remembered in b: a purge
    else:
        await control.invalidate(upstream="inventory", soft=purge == "soft")
    after = await a.get_products(wholesale(if_wholesale_feed_version=token))
    assert "unchanged" not in after and after["products"][0]["product_id"] == "p0-v2"
    assert after["wholesale_feed_version"] != token


async def test_past_the_target_the_memory_is_not_used(clock: FakeClock) -> None:
    seller = Seller(clock)
    token = (await seller.get_products(wholesale()))["wholesale_feed_version"]
    seller.inventory.down = True
    clock.advance(3)  # past the 2 s target, the upstream down: stale and told, never unchanged
    stale = await seller.get_products(wholesale(if_wholesale_feed_version=token))
    assert "unchanged" not in stale and [e["code"] for e in stale["errors"]] == ["STALE_RESPONSE"]
    # And a stale composition is never remembered: back up, within the target again.
    seller.inventory.down = False
    assert (await seller.get_products(wholesale(if_wholesale_feed_version=token)))["unchanged"]
    assert seller.composed == 3  # the bootstrap, the stale answer, the refreshed probe


async def test_the_memory_is_per_request_and_per_caller(clock: FakeClock) -> None:
    """Another account, other filters: not the remembered request. A per-caller answer is
    remembered for its caller only."""
    _, ask = per_caller_seller(clock)
    mine = (await ask("acct-a"))["wholesale_feed_version"]
    assert (await ask("acct-a", if_wholesale_feed_version=mine))["unchanged"]
    theirs = await ask("acct-b", if_wholesale_feed_version=mine)
    assert "unchanged" not in theirs and theirs["products"] == [{"product_id": "acct-b-rows"}]
    filtered = await ask("acct-a", if_wholesale_feed_version=mine, filters={"channels": ["olv"]})
    assert "unchanged" not in filtered  # other filters: another scope, another token


async def test_an_answer_composed_of_nothing_cached_is_never_remembered(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    rows = [{"product_id": "p1"}]

    async def compose() -> dict[str, Any]:
        return {"products": list(rows)}  # straight from the seller's own memory

    with collect_advisories():
        token = (await answer_wholesale(wholesale(), compose, cache=cache))[
            "wholesale_feed_version"
        ]
        rows[0] = {"product_id": "p2"}
        changed = await answer_wholesale(wholesale(if_wholesale_feed_version=token), compose,
                                         cache=cache)  # fmt: skip
    assert "unchanged" not in changed and changed["products"] == [{"product_id": "p2"}]


# Hostile review: what the memory must never do, and what is not a products answer.


async def test_a_per_caller_answer_is_remembered_for_its_caller_even_without_an_account(
    clock: FakeClock,
) -> None:
    _, ask = per_caller_seller(clock, with_account=False)
    token = (await ask("alice"))["wholesale_feed_version"]
    assert (await ask("alice", if_wholesale_feed_version=token))["unchanged"]
    bob = await ask("bob", if_wholesale_feed_version=token)
    assert "unchanged" not in bob and bob["products"] == [{"product_id": "bob-rows"}]


async def test_an_evicted_entry_ends_the_memory(clock: FakeClock) -> None:
    seller = Seller(clock, MemoryStore(clock=clock, max_entries=1))
    token = (await seller.get_products(wholesale()))["wholesale_feed_version"]
    seller.inventory.version = 2
    await seller.get_products(wholesale(filters={"channels": ["olv"]}))  # evicts the feed
    newer = await seller.get_products(wholesale())  # refetched: the new feed, a new token
    assert newer["wholesale_feed_version"] != token
    probe = await seller.get_products(wholesale(if_wholesale_feed_version=token))
    assert "unchanged" not in probe and probe["products"] == newer["products"]  # one current


async def test_a_request_that_already_drew_on_stale_data_is_never_unchanged(
    clock: FakeClock,
) -> None:
    settings = SurfacePolicy(name="settings", freshness_target_seconds=1, max_stale_seconds=60)
    seller = Seller(clock, more=[settings])
    token = (await seller.get_products(wholesale()))["wholesale_feed_version"]
    calls = {"n": 0}

    async def account_settings() -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionRefusedError
        return {"tier": "gold"}

    with collect_advisories() as advisories:
        await seller.cache.fetch(
            Upstream(name="accounts"), "s", account_settings, surface="settings"
        )
        clock.advance(1.5)  # the settings past their target, the feed still fresh
        await seller.cache.fetch(
            Upstream(name="accounts"), "s", account_settings, surface="settings"
        )

        async def compose() -> dict[str, Any]:
            return {
                "products": await seller.cache.fetch(
                    INVENTORY, ({}, None), lambda: seller.inventory.read({}), surface="get_products"
                )
            }

        answer = await answer_wholesale(wholesale(if_wholesale_feed_version=token), compose,
                                        scope=Scope.PUBLIC, cache=seller.cache)  # fmt: skip
    assert [e["code"] for e in advisories.errors()] == ["STALE_RESPONSE"]
    assert "unchanged" not in answer and answer["products"]  # the advisory rides on products


@pytest.mark.parametrize("answer", [
    {"status": "rejected", "reason": "Category not accepted on this inventory"},
    {"adcp_error": {"code": "SERVICE_UNAVAILABLE", "message": "down"}},
    {"proposals": []},
])  # fmt: skip
async def test_what_is_not_a_products_answer_gets_no_token(
    clock: FakeClock, answer: dict[str, Any]
) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)

    async def compose() -> dict[str, Any]:
        return dict(answer)

    with collect_advisories():
        first = await answer_wholesale(wholesale(), compose, cache=cache)
        probe = await answer_wholesale(wholesale(if_wholesale_feed_version="anything"), compose,
                                       cache=cache)  # fmt: skip
    assert first == answer and probe == answer  # as composed: no token, never unchanged


async def test_filters_nested_past_the_bound_are_refused_not_recursed(clock: FakeClock) -> None:
    import json

    deep = json.loads('{"x":' * 600 + "{}" + "}" * 600)
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)

    async def compose() -> dict[str, Any]:
        return {"products": []}

    for memo in (cache, None):
        with collect_advisories(), pytest.raises(InvalidConditionalRequest) as refused:
            await answer_wholesale(wholesale(filters=deep), compose, cache=memo)
        assert refused.value.error.code == "INVALID_REQUEST"


async def test_an_injected_outage_keeps_the_overlays_scope_and_token(clock: FakeClock) -> None:
    cache, ask = per_caller_seller(clock, test_mode=True)
    healthy = await ask("overlay")
    cache.force_upstream_unavailable("get_products", cache_age_seconds=120)
    forced = await ask("overlay", if_wholesale_feed_version=healthy["wholesale_feed_version"])
    assert [e["code"] for e in forced["errors"]] == ["STALE_RESPONSE"]
    assert (forced["cache_scope"], forced["wholesale_feed_version"]) == (
        "account", healthy["wholesale_feed_version"])  # fmt: skip
    assert "unchanged" not in forced


async def test_entries_keyed_by_a_tenants_credentials_are_account_scoped(clock: FakeClock) -> None:
    from pydantic import SecretStr

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    tenant = Upstream(name="inventory", credentials=SecretStr("tenant-a-token"))

    async def compose() -> dict[str, Any]:
        async def read() -> list[dict[str, Any]]:
            return [{"product_id": "a-negotiated"}]

        return {"products": await cache.fetch(tenant, "k", read, surface="get_products")}

    with collect_advisories():
        answer = await answer_wholesale(wholesale(account={"account_id": "a"}), compose)
    assert answer["cache_scope"] == "account"  # a tenant's rows are never a public rate card


async def test_a_later_answer_without_products_ends_the_memory(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    state = {"suspended": False}

    async def compose() -> dict[str, Any]:
        if state["suspended"]:  # seller-side state the cache does not hold
            return {"status": "rejected", "reason": "account suspended"}

        async def read() -> list[dict[str, Any]]:
            return [{"product_id": "p1"}]

        return {"products": await cache.fetch(INVENTORY, "k", read, surface="get_products")}

    with collect_advisories():
        token = (await answer_wholesale(wholesale(), compose, cache=cache))[
            "wholesale_feed_version"
        ]
        state["suspended"] = True
        assert (await answer_wholesale(wholesale(), compose, cache=cache))["status"] == "rejected"
        probe = await answer_wholesale(wholesale(if_wholesale_feed_version=token), compose,
                                       cache=cache)  # fmt: skip
    assert probe == {"status": "rejected", "reason": "account suspended"}


async def test_a_token_follows_an_http_upstreams_content_not_its_headers(
    clock: FakeClock,
) -> None:
    """An inventory behind the httpx transport answers a new ``Date`` on every 200 and
    304 (uvicorn does): revalidated unchanged, the feed keeps its token; a new body ends it."""
    import httpx

    from adcp_stale_cache import CachingTransport

    body = {"products": [{"product_id": "p1"}]}
    served = {"dates": 0}

    def inventory(request: httpx.Request) -> httpx.Response:
        served["dates"] += 1
        content = httpx.Response(200, json=body).content
        headers = {
            "etag": f'"{hash(content)}"',
            "date": f"Tue, 01 Dec 2026 00:00:{served['dates']:02d} GMT",
        }
        if request.headers.get("if-none-match") == headers["etag"]:
            return httpx.Response(304, headers=headers)
        return httpx.Response(
            200, content=content, headers={**headers, "content-type": "application/json"}
        )

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(cache, INVENTORY, surface="get_products",
                                 transport=httpx.MockTransport(inventory))  # fmt: skip

    async def ask() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=transport, base_url="http://inventory") as http:

            async def compose() -> dict[str, Any]:
                return {"products": (await http.get("/products")).json()["products"]}

            with collect_advisories():
                return await answer_wholesale({"buying_mode": "wholesale"}, compose)

    first = await ask()
    clock.advance(3)  # past the target: revalidated, a 304 with a new Date
    again = await ask()
    assert served["dates"] == 2
    assert again["wholesale_feed_version"] == first["wholesale_feed_version"]
    body["products"] = [{"product_id": "p2"}]
    clock.advance(3)
    changed = await ask()
    assert changed["wholesale_feed_version"] != first["wholesale_feed_version"]


async def test_an_entry_stored_with_an_age_is_never_unchanged_past_its_target(
    clock: FakeClock,
) -> None:
    """Issue 32, 5: an entry stored 1.5 s old (an upstream's ``Age``, a sub-agent's, a
    composite's) is past its 2 s target 0.5 s later; the memory counted it fresh for 2 s and
    answered ``unchanged`` while the upstream was down, with no ``STALE_RESPONSE``."""
    from adcp_stale_cache.core.directives import Directives

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          breaker=None)  # fmt: skip
    inventory = Inventory()

    async def ask(**fields: Any) -> dict[str, Any]:
        async def compose() -> dict[str, Any]:
            products = await cache.fetch(INVENTORY, "k", lambda: inventory.read(None),
                                         surface="get_products",
                                         directives=lambda _: Directives(age=1.5))  # fmt: skip
            return {"products": products}

        with collect_advisories() as advisories:
            answer = await answer_wholesale(wholesale(**fields), compose, cache=cache)
        return {**answer, "errors": advisories.errors()}

    token = (await ask())["wholesale_feed_version"]
    clock.advance(1)  # 2.5 s old: past the target
    inventory.down = True
    probe = await ask(if_wholesale_feed_version=token)
    assert "unchanged" not in probe
    assert [e["code"] for e in probe["errors"]] == ["STALE_RESPONSE"]
    assert probe["errors"][0]["details"]["cache_age_seconds"] == 2


async def test_an_account_scoped_token_is_never_another_principals_from_memory(
    clock: FakeClock,
) -> None:
    """Issue 32, 6: ``scope=ACCOUNT``, no ``account=``, entries shared across callers: the
    token is scoped to each caller's partition, so P's token never answers Q ``unchanged``
    (the memory keyed the request without the account and gave Q P's answer)."""
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          breaker=None)  # fmt: skip
    inventory = Inventory()

    async def ask(principal: str, **fields: Any) -> dict[str, Any]:
        async def compose() -> dict[str, Any]:
            read = lambda: inventory.read(None)  # noqa: E731
            return {"products": await cache.fetch(INVENTORY, "k", read, surface="get_products")}

        with collect_advisories(PRODUCTS, partition=principal):
            return await answer_wholesale(wholesale(**fields), compose, scope=Scope.ACCOUNT,
                                          cache=cache)  # fmt: skip

    p_token = (await ask("principal-p"))["wholesale_feed_version"]
    assert (await ask("principal-p", if_wholesale_feed_version=p_token))["unchanged"]
    q = await ask("principal-q", if_wholesale_feed_version=p_token)
    assert "unchanged" not in q and q["wholesale_feed_version"] != p_token
    assert q["cache_scope"] == "account" and len(q["products"]) == 3


async def test_a_composition_within_another_counts_in_the_outer_token(clock: FakeClock) -> None:
    """An answer composed partly by a nested ``answer_wholesale``: the nested parts went
    uncounted in the outer token, so a changed answer kept its token and was called unchanged."""
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          breaker=None)  # fmt: skip
    version = {"now": 1}
    request = {"buying_mode": "wholesale"}

    async def fixed() -> list[dict[str, Any]]:
        return [{"product_id": "a1"}]

    async def moving() -> list[dict[str, Any]]:
        return [{"product_id": f"b{version['now']}"}]

    async def nested() -> dict[str, Any]:
        return {
            "products": await cache.fetch(Upstream(name="b"), "b", moving, surface="get_products")
        }

    async def compose() -> dict[str, Any]:
        own = await cache.fetch(Upstream(name="a"), "a", fixed, surface="get_products")
        return {"products": own + (await answer_wholesale(request, nested))["products"]}

    async def ask(token: str | None = None) -> dict[str, Any]:
        probe = {"if_wholesale_feed_version": token} if token else {}
        with collect_advisories(PRODUCTS):
            return await answer_wholesale({**request, **probe}, compose, scope=Scope.PUBLIC)

    first = await ask()
    version["now"] = 2
    clock.advance(3)  # past the target: both parts refreshed, the nested one changed
    second = await ask(first["wholesale_feed_version"])
    assert [p["product_id"] for p in second["products"]] == ["a1", "b2"]
    assert not second.get("unchanged")
    assert second["wholesale_feed_version"] != first["wholesale_feed_version"]


async def test_a_composition_within_a_cached_call_labels_what_it_stores(clock: FakeClock) -> None:
    """Composed inside a cached call, the parts' labels went missing from the entry that call
    stored: purging a part left the answer built from it a fresh hit."""
    catalog = SurfacePolicy(name="catalog", field="products", freshness_target_seconds=600,
                            max_stale_seconds=600, shared_across_callers=True)  # fmt: skip
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS, catalog),
                          clock=clock, breaker=None)  # fmt: skip
    version = {"now": 1}

    async def inventory() -> list[dict[str, Any]]:
        return [{"product_id": f"p-v{version['now']}"}]

    async def compose() -> dict[str, Any]:
        return {"products": await cache.fetch(INVENTORY, "all", inventory, surface="get_products")}

    async def built() -> dict[str, Any]:
        return await answer_wholesale({"buying_mode": "wholesale"}, compose, scope=Scope.PUBLIC)

    async def ask() -> Any:
        with collect_advisories(catalog):
            answer = await cache.fetch(Upstream(name="catalog"), "all", built, surface="catalog")
        return [product["product_id"] for product in answer["products"]]

    assert await ask() == ["p-v1"]
    version["now"] = 2
    taken = await CacheControl(cache).invalidate(upstream="inventory", soft=False)
    assert taken == 2  # the inventory's entry, and the answer built from it
    assert await ask() == ["p-v2"]


def per_account(clock: FakeClock) -> UpstreamCache:
    """A cache whose ``accounts`` surface keys per caller (its entries label the partition)."""
    accounts = SurfacePolicy(name="accounts", field="products", freshness_target_seconds=600,
                             max_stale_seconds=600)  # fmt: skip
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS, accounts),
                          clock=clock, breaker=None)  # fmt: skip
    return cache


async def account_scoped_and_moved(
    ask: Callable[..., Awaitable[dict[str, Any]]],
    version: dict[str, int],
    clock: FakeClock,
    product: str,
) -> None:
    """``ask()``'s answer is scoped ``account``; once its per-caller part moves to version 2
    (past its target), a probe with the old token gets ``product``, not ``unchanged``."""
    first = await ask()
    assert first["cache_scope"] == "account"
    version["now"] = 2
    clock.advance(601)
    second = await ask(first["wholesale_feed_version"])
    assert not second.get("unchanged") and second["products"] == [{"product_id": product}]


class Rendezvous:
    """Where ``count`` tasks wait for each other (``asyncio.Barrier`` is 3.11's)."""

    def __init__(self, count: int) -> None:
        import asyncio

        self.count, self.everyone = count, asyncio.Event()

    async def arrive(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.everyone.set()
        await self.everyone.wait()


async def test_concurrent_compositions_in_one_request_each_answer_safely(
    clock: FakeClock,
) -> None:
    """Found by a review (session 52): two ``answer_wholesale`` calls under ``asyncio.gather``
    in one request swapped the trace's composition under each other, and one could raise.
    Each now reads into its own; one ending first counts in the other too (it cannot tell a
    sibling from an answer it is nested in), so a scope only widens and a token only moves:
    the per-caller answer is ``account``, and neither is ``unchanged`` once its data moved."""
    import asyncio

    cache = per_account(clock)
    version = {"now": 1}

    def composer(name: str, surface: str, both: Rendezvous, turns: int) -> Any:
        async def read() -> list[dict[str, Any]]:
            return [{"product_id": f"{name}-v{version['now']}"}]

        async def compose() -> dict[str, Any]:
            await both.arrive()  # each reads only once the other has started composing
            products = await cache.fetch(Upstream(name=name), name, read, surface=surface)
            for _ in range(turns):  # the other reads meanwhile
                await asyncio.sleep(0)
            return {"products": products}

        return compose

    async def ask(tokens: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        both = Rendezvous(2)
        asked = [
            answer_wholesale(
                wholesale(account={"account_id": "a"}, if_wholesale_feed_version=token)
                if token
                else wholesale(account={"account_id": "a"}),
                composer(name, surface, both, turns),
            )
            for name, surface, turns, token in zip(
                ("a", "b"), ("accounts", "get_products"), (1, 3), tokens or ("", ""), strict=True
            )
        ]
        with collect_advisories(PRODUCTS, partition="tenant-a"):
            return list(await asyncio.gather(*asked))

    # The per-caller one opens first and ends first: its reads went to the other's.
    private, public = await ask()
    assert private["cache_scope"] == "account"
    assert [p["product_id"] for p in private["products"] + public["products"]] == ["a-v1", "b-v1"]
    version["now"] = 2
    clock.advance(601)  # past both targets: both refreshed, both changed
    again = await ask((private["wholesale_feed_version"], public["wholesale_feed_version"]))
    assert not any(answer.get("unchanged") for answer in again)
    assert [p["product_id"] for answer in again for p in answer["products"]] == ["a-v2", "b-v2"]


async def test_a_read_by_a_thread_carrying_the_collector_alone_counts_in_the_answer(
    clock: FakeClock,
) -> None:
    """A thread given the request's collector by ``use_collector`` (no copy of the context)
    cannot tell which composition it reads for: its read counts in each one open, so a per-
    caller part still scopes the answer ``account`` and moves its token."""
    import asyncio

    from adcp_stale_cache import current_collector, use_collector

    cache = per_account(clock)
    version = {"now": 1}

    async def read() -> list[dict[str, Any]]:
        return [{"product_id": f"p-v{version['now']}"}]

    def in_thread(collector: Any) -> list[dict[str, Any]]:
        with use_collector(collector):
            fetched = cache.fetch(INVENTORY, "all", read, surface="accounts")
            return asyncio.run(fetched)  # type: ignore[arg-type]

    async def compose() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return {"products": await loop.run_in_executor(None, in_thread, current_collector())}

    async def ask(token: str | None = None) -> dict[str, Any]:
        probe = {"if_wholesale_feed_version": token} if token else {}
        with collect_advisories(PRODUCTS, partition="tenant-a"):
            return await answer_wholesale(wholesale(account={"account_id": "a"}, **probe), compose)

    await account_scoped_and_moved(ask, version, clock, "p-v2")


async def test_a_composition_nested_in_a_thread_counts_in_the_outer_token(
    clock: FakeClock,
) -> None:
    """Found by a review (session 53): an ``answer_wholesale`` run in a thread given the
    collector alone (``use_collector``), nested in another, kept its parts from the outer
    answer, so a changed nested part was answered ``unchanged`` with the old token."""
    import asyncio

    from adcp_stale_cache import current_collector, use_collector

    cache = per_account(clock)
    version = {"now": 1}

    async def read(name: str) -> list[dict[str, Any]]:
        return [{"product_id": f"{name}-v{version['now'] if name == 'moving' else 1}"}]

    def fetch(name: str) -> Any:
        return cache.fetch(Upstream(name=name), name, lambda: read(name), surface="get_products")

    async def nested() -> dict[str, Any]:
        return {"products": await fetch("moving")}

    def in_thread(collector: Any) -> dict[str, Any]:
        with use_collector(collector):
            return asyncio.run(answer_wholesale(wholesale(), nested))

    async def compose() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        inner = await loop.run_in_executor(None, in_thread, current_collector())
        return {"products": await fetch("fixed") + inner["products"]}

    async def ask(token: str | None = None) -> dict[str, Any]:
        probe = {"if_wholesale_feed_version": token} if token else {}
        with collect_advisories(PRODUCTS):
            return await answer_wholesale(wholesale(**probe), compose, scope=Scope.PUBLIC)

    first = await ask()
    version["now"] = 2
    clock.advance(3)  # past the target: both parts refreshed, the nested one changed
    second = await ask(first["wholesale_feed_version"])
    assert not second.get("unchanged") and second["products"][1] == {"product_id": "moving-v2"}


async def test_a_task_started_before_composing_counts_in_the_answer(clock: FakeClock) -> None:
    """Found by a review (session 53): a per-caller read started as a task before
    ``answer_wholesale`` (its context names no composition), then awaited in ``compose``,
    counted in none: the answer went out ``public``, and unchanged when the rows changed."""
    import asyncio

    cache = per_account(clock)
    version = {"now": 1}

    async def rows() -> list[dict[str, Any]]:
        return [{"product_id": f"mine-v{version['now']}"}]

    async def ask(token: str | None = None) -> dict[str, Any]:
        probe = {"if_wholesale_feed_version": token} if token else {}
        with collect_advisories(PRODUCTS, partition="tenant-a"):
            mine = asyncio.create_task(
                cache.fetch(Upstream(name="mine"), "mine", rows, surface="accounts")
            )

            async def compose() -> dict[str, Any]:
                return {"products": await mine}

            return await answer_wholesale(wholesale(account={"account_id": "a"}, **probe), compose)

    await account_scoped_and_moved(ask, version, clock, "mine-v2")
