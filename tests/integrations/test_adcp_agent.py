"""AdcpAgent: a sub-agent's answers cached by the protocol's rules (a fake agent: the wire)."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache import (
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.integrations.adcp_agent import AdcpAgent, AgentRefused

from ..conftest import FakeClock

SUB = SurfacePolicy(name="sub_products", field="products", freshness_target_seconds=60,
                    max_stale_seconds=3600, shared_across_callers=True)  # fmt: skip
UPSTREAM = Upstream(name="sub", url="http://127.0.0.1:9/mcp")
WHOLESALE = {"buying_mode": "wholesale"}


class FakeAgent:
    """An AdCP agent on the wire: what it was asked, what it answers next."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.version = 1
        self.down = False
        self.next: dict[str, Any] | None = None  # one answer to give instead of the feed
        self.overlays: set[str] = set()  # accounts answered with rows of their own

    async def __call__(self, tool: str, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        if self.down:
            raise ConnectionRefusedError
        if self.next is not None:
            answer, self.next = self.next, None
            return answer
        account = (params.get("account") or {}).get("account_id")
        own = account in self.overlays
        scope, row = (
            ("account", f"{account}-v{self.version}") if own else ("public", f"p-v{self.version}")
        )
        token = f"wfv-{row}"
        if params.get("if_wholesale_feed_version") == token:
            return {"unchanged": True, "wholesale_feed_version": token, "cache_scope": scope,
                    "context": params.get("context")}  # fmt: skip
        return {"products": [{"product_id": row}], "cache_scope": scope,
                "wholesale_feed_version": token, "context": {"echo": "theirs"}}  # fmt: skip


@pytest.fixture
def agent() -> FakeAgent:
    return FakeAgent()


@pytest.fixture
def sub(clock: FakeClock, agent: FakeAgent) -> AdcpAgent:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(SUB), clock=clock)
    return AdcpAgent(cache, UPSTREAM, surface="sub_products", call=agent)


async def ask(sub: AdcpAgent, request: dict[str, Any] = WHOLESALE) -> tuple[Any, list[Any]]:
    with collect_advisories() as advisories:
        answer = await sub.get_products(request)
    return answer, advisories.errors()


async def test_a_fresh_answer_is_cached_without_its_context(
    sub: AdcpAgent, agent: FakeAgent
) -> None:
    first, _ = await ask(sub, {**WHOLESALE, "context": {"correlation_id": "buyer's"}})
    again, _ = await ask(sub)
    assert first == again and "context" not in first
    assert first["products"] == [{"product_id": "p-v1"}]
    assert len(agent.asked) == 1
    assert "context" not in agent.asked[0]  # the buyer's context stays the buyer's


async def test_past_the_target_an_unchanged_feed_is_a_probe_not_a_read(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub)
    clock.advance(61)
    answer, advisories = await ask(sub)
    assert agent.asked[1] == {**WHOLESALE, "if_wholesale_feed_version": "wfv-p-v1"}
    assert answer["products"] == [{"product_id": "p-v1"}] and not advisories
    clock.advance(30)  # re-stamped by the probe: fresh again
    await ask(sub)
    assert len(agent.asked) == 2


async def test_a_changed_feed_is_read_in_full(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub)
    agent.version = 2
    clock.advance(61)
    answer, _ = await ask(sub)
    assert answer["products"] == [{"product_id": "p-v2"}]
    assert answer["wholesale_feed_version"] == "wfv-p-v2"


async def test_a_pricing_token_rides_with_the_feed_token(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    agent.next = {"products": [], "cache_scope": "public", "wholesale_feed_version": "wfv-1",
                  "pricing_version": "pv-7"}  # fmt: skip
    await ask(sub)
    clock.advance(61)
    await ask(sub)
    assert agent.asked[1]["if_pricing_version"] == "pv-7"


async def test_an_unchanged_answer_of_another_scope_is_read_again(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub)
    clock.advance(61)
    agent.next = {"unchanged": True, "wholesale_feed_version": "wfv-1", "cache_scope": "account"}
    await ask(sub)
    assert len(agent.asked) == 3 and "if_wholesale_feed_version" not in agent.asked[2]


async def test_the_sub_agents_own_stale_serve_is_ours_to_tell(
    sub: AdcpAgent, agent: FakeAgent, assert_valid_advisory: Any
) -> None:
    stale = {
        "code": "STALE_RESPONSE",
        "message": "stale",
        "recovery": "transient",
        "details": {
            "served_from_cache": True,
            "cache_age_seconds": 400,
            "original_error": {"code": "CONNECTION_REFUSED", "message": "m"},
        },
    }
    sdk = {"code": "FORMAT_PROJECTION_FAILED", "message": "m", "source": "sdk", "sdk_id": "x@1"}
    agent.next = {"products": [{"product_id": "old"}], "cache_scope": "public",
                  "wholesale_feed_version": "wfv-1", "errors": [stale, sdk]}  # fmt: skip
    answer, [advisory] = await ask(sub)
    assert answer["errors"] == [sdk]  # the SDK's observation passes; the staleness is ours
    assert_valid_advisory(advisory)
    assert advisory["details"]["upstream"]["name"] == "sub"
    assert advisory["details"]["cache_age_seconds"] == 400
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"


async def test_when_the_sub_agent_dies_its_age_counts_from_the_bottom(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    stale = {"code": "STALE_RESPONSE", "message": "stale",
             "details": {"served_from_cache": True, "cache_age_seconds": 30}}  # fmt: skip
    agent.next = {"products": [{"product_id": "old"}], "cache_scope": "public",
                  "wholesale_feed_version": "wfv-1", "errors": [stale]}  # fmt: skip
    _, advisories = await ask(sub)
    assert advisories == []  # 30 s: within our 60 s target
    clock.advance(100)
    agent.down = True
    answer, [advisory] = await ask(sub)
    assert answer["products"] == [{"product_id": "old"}]
    assert advisory["details"]["cache_age_seconds"] == 130


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "rejected", "reason": "no inventory for that brief"},
        {"products": [{"product_id": "part"}], "cache_scope": "public",
         "incomplete": [{"scope": "pricing", "description": "later"}]},
    ],
    ids=["rejected", "incomplete"],
)  # fmt: skip
async def test_a_rejection_or_a_partial_answer_is_served_never_stored(
    sub: AdcpAgent, agent: FakeAgent, answer: dict[str, Any]
) -> None:
    agent.next = answer
    served, _ = await ask(sub)
    assert served == answer
    again, _ = await ask(sub)
    assert again["products"] == [{"product_id": "p-v1"}] and len(agent.asked) == 2


async def test_a_transient_adcp_error_falls_back_like_an_outage(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    agent.next = {"adcp_error": {"code": "SERVICE_UNAVAILABLE", "message": "m",
                                 "recovery": "transient"}}  # fmt: skip
    with pytest.raises(UpstreamUnavailable) as raised, collect_advisories():
        await sub.get_products(WHOLESALE)
    assert raised.value.failure.code == "SERVICE_UNAVAILABLE"
    await ask(sub)  # cached now
    clock.advance(61)
    agent.next = {"adcp_error": {"code": "RATE_LIMITED", "message": "m"}}
    answer, [advisory] = await ask(sub)
    assert answer["products"] == [{"product_id": "p-v1"}]
    assert advisory["details"]["original_error"]["code"] == "RATE_LIMITED"


async def test_a_correctable_adcp_error_is_the_callers_never_stale(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub)
    clock.advance(61)
    error = {"code": "INVALID_REQUEST", "message": "bad filters", "recovery": "correctable"}
    agent.next = {"adcp_error": error}
    with pytest.raises(AgentRefused) as raised, collect_advisories():
        await sub.get_products(WHOLESALE)
    assert raised.value.error == error


async def test_keys_read_the_request_canonically_and_keep_accounts_apart(
    sub: AdcpAgent, agent: FakeAgent
) -> None:
    await ask(sub, {**WHOLESALE, "filters": {"channels": ["display", "olv"]}})
    await ask(sub, {"filters": {"channels": ["olv", "display"]}, **WHOLESALE,
                    "idempotency_key": "k-2"})  # fmt: skip
    assert len(agent.asked) == 1
    await ask(sub, {**WHOLESALE, "account": {"account_id": "a"}})
    await ask(sub, {**WHOLESALE, "account": {"account_id": "b"}})
    assert len(agent.asked) == 3


def test_an_agent_needs_an_address(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(SUB), clock=clock)
    with pytest.raises(ValueError, match="URL"):
        AdcpAgent(cache, Upstream(name="internal"))


def account(name: str) -> dict[str, Any]:
    return {**WHOLESALE, "account": {"account_id": name}}


async def test_accounts_told_public_share_the_public_layer(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub, account("a"))
    await ask(sub, account("b"))
    agent.version = 2
    clock.advance(61)
    answer, _ = await ask(sub, account("a"))  # a's refresh fills the public layer...
    assert answer["products"] == [{"product_id": "p-v2"}]
    calls = len(agent.asked)
    answer, _ = await ask(sub)  # ...which a request with no account reads, fresh
    assert answer["products"] == [{"product_id": "p-v2"}] and len(agent.asked) == calls


async def test_an_overlay_is_its_accounts_alone_and_a_downgrade_drops_it(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    agent.overlays.add("big")
    overlay, _ = await ask(sub, account("big"))
    public, _ = await ask(sub, account("small"))
    assert overlay["products"] == [{"product_id": "big-v1"}]
    assert overlay["cache_scope"] == "account"
    assert public["products"] == [{"product_id": "p-v1"}]
    agent.overlays.clear()  # the agent now answers "big" from its rate card: a downgrade
    clock.advance(61)
    answer, _ = await ask(sub, account("big"))
    assert answer["products"] == [{"product_id": "p-v1"}] and answer["cache_scope"] == "public"
    calls = len(agent.asked)
    again, _ = await ask(sub, account("big"))
    assert again == answer and len(agent.asked) == calls  # the public layer, fresh


async def test_an_agent_cannot_forge_the_layer_mark(sub: AdcpAgent, agent: FakeAgent) -> None:
    from adcp_stale_cache.integrations.adcp_agent import LAYER

    agent.overlays.add("big")
    agent.next = {"products": [{"product_id": "big-own"}], "cache_scope": "account",
                  LAYER: "public"}  # fmt: skip
    answer, _ = await ask(sub, account("big"))
    assert answer["products"] == [{"product_id": "big-own"}] and LAYER not in answer


# What a hostile review found (each fails on the code before its fix).


async def test_two_tenants_tokens_never_share_an_entry(clock: FakeClock) -> None:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(SUB), clock=clock)
    answers = {"tok-A": "A-private-deal", "tok-B": "B-rate"}

    def tenant(token: str) -> AdcpAgent:
        async def call(tool: str, params: dict[str, Any]) -> dict[str, Any]:
            return {"products": [{"product_id": answers[token]}], "cache_scope": "public"}

        return AdcpAgent(cache, UPSTREAM, surface="sub_products", token=token, call=call)

    a, _ = await ask(tenant("tok-A"))
    b, _ = await ask(tenant("tok-B"))
    assert a["products"] == [{"product_id": "A-private-deal"}]
    assert b["products"] == [{"product_id": "B-rate"}]


async def test_unchanged_to_a_request_with_no_token_is_never_the_feed(
    sub: AdcpAgent, agent: FakeAgent
) -> None:
    agent.next = {"unchanged": True, "wholesale_feed_version": "wfv-p-v1", "cache_scope": "public"}
    with pytest.raises(UpstreamUnavailable) as raised, collect_advisories():
        await sub.get_products(WHOLESALE)
    assert raised.value.failure.code == "INVALID_PAYLOAD"
    answer, _ = await ask(sub)  # nothing was kept: the feed itself now
    assert answer["products"] == [{"product_id": "p-v1"}]


async def test_unchanged_naming_another_token_reads_the_feed(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock
) -> None:
    await ask(sub)
    agent.version = 2
    clock.advance(61)
    agent.next = {"unchanged": True, "wholesale_feed_version": "wfv-p-v2", "cache_scope": "public"}
    answer, _ = await ask(sub)
    assert answer["products"] == [{"product_id": "p-v2"}]  # never v1's rows under v2's token
    assert answer["wholesale_feed_version"] == "wfv-p-v2"


async def test_an_account_of_null_is_no_account(sub: AdcpAgent, agent: FakeAgent) -> None:
    import asyncio

    answer, _ = await asyncio.wait_for(ask(sub, {**WHOLESALE, "account": None}), 1)
    assert answer["products"] == [{"product_id": "p-v1"}] and len(agent.asked) == 1


async def test_the_token_sent_keys_the_entry_beside_the_upstreams_own_credentials(
    clock: FakeClock,
) -> None:
    """Two tenants' tokens on one Upstream that holds credentials of its own: the token is
    what the agent is called with, so it keys the entry too."""
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(SUB), clock=clock)
    answers = {"tok-A": "A-private-deal", "tok-B": "B-rate"}
    upstream = Upstream(name="sub", url="http://127.0.0.1:9/mcp", credentials="the-sellers-own")

    def tenant(token: str) -> AdcpAgent:
        async def call(tool: str, params: dict[str, Any]) -> dict[str, Any]:
            return {"products": [{"product_id": answers[token]}], "cache_scope": "public"}

        return AdcpAgent(cache, upstream, surface="sub_products", token=token, call=call)

    a, _ = await ask(tenant("tok-A"))
    b, _ = await ask(tenant("tok-B"))
    assert a["products"] == [{"product_id": "A-private-deal"}]
    assert b["products"] == [{"product_id": "B-rate"}]


async def test_unchanged_with_its_own_stale_response_keeps_its_age(
    sub: AdcpAgent, agent: FakeAgent, clock: FakeClock, assert_valid_advisory: Any
) -> None:
    """The agent says the feed is unchanged, but from its own stale entry: the held feed is
    re-stamped as old as the agent says, never as fresh."""
    await ask(sub)
    clock.advance(61)
    stale = {"code": "STALE_RESPONSE", "message": "stale", "recovery": "transient",
             "details": {"served_from_cache": True, "cache_age_seconds": 300}}  # fmt: skip
    agent.next = {"unchanged": True, "wholesale_feed_version": "wfv-p-v1",
                  "cache_scope": "public", "errors": [stale]}  # fmt: skip
    answer, [advisory] = await ask(sub)
    assert answer["products"] == [{"product_id": "p-v1"}] and "errors" not in answer
    assert_valid_advisory(advisory)
    assert advisory["details"]["cache_age_seconds"] == 300
    clock.advance(5)
    _, advisories = await ask(sub)  # stored that old: past our target, so asked again
    assert len(agent.asked) == 3 and advisories == []  # current now, and said so plainly


def test_an_agent_that_never_answers_is_a_timeout_within_the_agents_bound() -> None:
    """A loopback listener that accepts connections and never reads them (a frozen agent),
    called through the ``adcp`` client, behind a surface whose own deadline is far longer:
    the agent's ``timeout`` ends the call, a TIMEOUT outage, and the test's bound (60 s)
    fails a call that would wait on instead of hanging the suite."""
    import asyncio
    import socket
    import time

    pytest.importorskip("adcp", reason="the adcp extra is needed")
    patient = SUB.model_copy(update={"upstream_timeout_seconds": 120})
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshakes; nothing ever reads
        upstream = Upstream(name="sub", url=f"http://127.0.0.1:{listener.getsockname()[1]}/mcp")
        cache = UpstreamCache(MemoryStore(), surfaces=Surfaces.of(patient))
        agent = AdcpAgent(cache, upstream, surface="sub_products", timeout=1)
        started = time.monotonic()
        with pytest.raises(UpstreamUnavailable) as raised:
            asyncio.run(asyncio.wait_for(agent.get_products(WHOLESALE), 60))
        took = time.monotonic() - started
    assert raised.value.failure.code == "TIMEOUT"
    assert took < 1 + 1 + 5  # the bound, the bounded cleanup, a busy machine's margin


async def test_a_call_that_never_returns_is_a_timeout(clock: FakeClock) -> None:
    """Any ``call=`` is bounded alike: one that never returns is a TIMEOUT outage."""
    import asyncio

    async def never(tool: str, params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    patient = SUB.model_copy(update={"upstream_timeout_seconds": 120})
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(patient), clock=clock)
    agent = AdcpAgent(cache, UPSTREAM, surface="sub_products", call=never, timeout=0.2)
    with pytest.raises(UpstreamUnavailable) as raised:
        await asyncio.wait_for(agent.get_products(WHOLESALE), 30)
    assert raised.value.failure.code == "TIMEOUT"
