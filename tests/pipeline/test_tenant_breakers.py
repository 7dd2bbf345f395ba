"""Breakers keyed by what a failure is about (issue 32, 7): a rate limit is the quota of the
credentials that hit it, an upstream down is down for everyone. Each test failed before."""

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
from adcp_stale_cache.core.failures import UpstreamError, UpstreamHTTPError
from adcp_stale_cache.pipeline.breaker import BreakerPolicy

from ..conftest import FakeClock

POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, max_stale_seconds=1000
)
BREAKER = BreakerPolicy(failure_threshold=2, window_seconds=60, cooldown_seconds=30)
AGENT = "https://agent.example/mcp"
TENANT_A = Upstream(name="agent", url=AGENT, credentials="token-of-a")
TENANT_B = Upstream(name="agent", url=AGENT, credentials="token-of-b")


class Agent:
    """One upstream as each tenant's calls meet it: ``fails`` raises for every call."""

    def __init__(self, fails: BaseException | None = None) -> None:
        self.calls = 0
        self.fails = fails

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.fails is not None:
            raise self.fails
        return {"products": [self.calls]}


class SharingStore(MemoryStore):
    """A store that shares breakers between caches, as the Redis store does."""

    def __init__(self, clock: FakeClock, published: dict[str, str]) -> None:
        super().__init__(clock=clock)
        self.published = published

    async def breaker_state(self, name: str) -> bytes | None:
        state = self.published.get(name)
        return None if state is None else state.encode()

    async def breaker_opened(self, name: str, state: str, seconds: float) -> None:
        self.published[name] = state

    async def breaker_closed(self, name: str) -> None:
        self.published.pop(name, None)


def cache_of(clock: FakeClock, store: MemoryStore | None = None, share: bool = False) -> Any:
    return UpstreamCache(
        store or MemoryStore(clock=clock),
        surfaces=Surfaces.of(POLICY),
        clock=clock,
        breaker=BREAKER,
        share_breakers=share,
    )


async def fail_twice(cache: UpstreamCache, upstream: Upstream, agent: Agent) -> None:
    for _ in range(2):
        with collect_advisories(), pytest.raises(UpstreamUnavailable):
            await cache.fetch(upstream, "k", agent, surface=POLICY)


@pytest.mark.parametrize(
    "limit",
    [
        UpstreamHTTPError(429, retry_after=60),
        UpstreamError("RATE_LIMITED"),
        # About the caller too (review 32b: one revoked token held every tenant back).
        UpstreamError("AUTH_INVALID"),
        UpstreamError("ACCOUNT_SUSPENDED"),
        UpstreamError("AGENT_SUSPENDED"),
    ],
    ids=["HTTP 429", "AdCP RATE_LIMITED", "AUTH_INVALID", "ACCOUNT_SUSPENDED", "AGENT_SUSPENDED"],
)
async def test_one_tenants_rate_limit_never_holds_another_back(
    clock: FakeClock, limit: BaseException
) -> None:
    cache = cache_of(clock)
    await fail_twice(cache, TENANT_A, Agent(fails=limit))
    assert cache.breaker_open(TENANT_A) and cache.breaker_open("agent")  # any of that name
    assert not cache.breaker_open(TENANT_B)
    agent_b = Agent()
    with collect_advisories():
        assert await cache.fetch(TENANT_B, "k", agent_b, surface=POLICY) == {"products": [1]}
    assert agent_b.calls == 1
    rate_limited = Agent(fails=limit)
    with collect_advisories(), pytest.raises(UpstreamUnavailable):  # A's own: held back
        await cache.fetch(TENANT_A, "k", rate_limited, surface=POLICY)
    assert rate_limited.calls == 0


async def test_an_upstream_down_is_down_for_every_tenant(clock: FakeClock) -> None:
    cache = cache_of(clock)
    await fail_twice(cache, TENANT_A, Agent(fails=ConnectionRefusedError()))
    agent_b = Agent()
    with collect_advisories(), pytest.raises(UpstreamUnavailable):
        await cache.fetch(TENANT_B, "k", agent_b, surface=POLICY)
    assert agent_b.calls == 0 and cache.breaker_open(TENANT_B)


async def test_a_probe_answered_with_a_rate_limit_says_the_upstream_is_up(clock: FakeClock) -> None:
    cache = cache_of(clock)
    await fail_twice(cache, TENANT_A, Agent(fails=ConnectionRefusedError()))
    clock.advance(30)  # the probe: A's call meets A's own rate limit
    await fail_twice(cache, TENANT_A, Agent(fails=UpstreamHTTPError(429)))
    agent_b = Agent()
    with collect_advisories():
        assert await cache.fetch(TENANT_B, "k", agent_b, surface=POLICY) == {"products": [1]}
    assert cache.breaker_open(TENANT_A) and not cache.breaker_open(TENANT_B)


async def test_shared_breakers_follow_the_same_key(clock: FakeClock) -> None:
    published: dict[str, str] = {}
    one = cache_of(clock, SharingStore(clock, published), share=True)
    other = cache_of(clock, SharingStore(clock, published), share=True)
    await fail_twice(one, TENANT_A, Agent(fails=UpstreamHTTPError(429)))
    assert len(published) == 1
    assert not any("token" in name for name in published)  # a digest, never the credentials
    agent_b, agent_a = Agent(), Agent()
    with collect_advisories():
        await other.fetch(TENANT_B, "k", agent_b, surface=POLICY)
    with collect_advisories(), pytest.raises(UpstreamUnavailable):
        await other.fetch(TENANT_A, "k", agent_a, surface=POLICY)
    assert (agent_b.calls, agent_a.calls) == (1, 0)


async def test_agents_told_apart_by_query_or_userinfo_have_their_own_breakers(
    clock: FakeClock,
) -> None:
    """Two agents at one public URL, told apart by what it strips (``?tenant=``, userinfo):
    one down is not the other down, here or through shared breakers, whose names carry a
    digest of what was stripped, never the secret (review 31)."""
    published: dict[str, str] = {}
    one = cache_of(clock, SharingStore(clock, published), share=True)
    other = cache_of(clock, SharingStore(clock, published), share=True)
    for url_a, url_b in (
        (f"{AGENT}?tenant=a&api_key=key-of-a", f"{AGENT}?tenant=b&api_key=key-of-b"),
        ("https://a:secret-a@agent.example/mcp", "https://b:secret-b@agent.example/mcp"),
    ):
        agent_a, agent_b = (Upstream(name="agent", url=url) for url in (url_a, url_b))
        await fail_twice(one, agent_a, Agent(fails=ConnectionRefusedError()))
        assert one.breaker_open(agent_a) and not one.breaker_open(agent_b)
        assert not any("secret" in name or "key-of" in name for name in published)
        for cache in (one, other):
            healthy = Agent()
            with collect_advisories():
                assert await cache.fetch(agent_b, "k", healthy, surface=POLICY) is not None
            assert healthy.calls == 1
