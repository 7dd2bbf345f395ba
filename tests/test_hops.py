"""A sub-agent's own STALE_RESPONSE across the hop: its age kept, our buyer told once."""

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
from adcp_stale_cache.hops import delivered, directives_of

from .conftest import FakeClock

PRODUCTS = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=60, max_stale_seconds=600
)
SUB = Upstream(name="sub", url="http://127.0.0.1:9/mcp")


def stale(age: Any, code: str | None = "CONNECTION_REFUSED", **extra: Any) -> dict[str, Any]:
    """A sub-agent's own advisory, as it writes it."""
    details: dict[str, Any] = {"served_from_cache": True, "cache_age_seconds": age}
    if code is not None:
        details["original_error"] = {"code": code, "message": "inventory at 10.0.0.7 refused"}
    return {"code": "STALE_RESPONSE", "message": "stale", "recovery": "transient",
            "details": details, **extra}  # fmt: skip


def answer(*errors: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"products": [{"product_id": "p1"}], "context": {"id": "theirs"}}
    if errors:
        payload["errors"] = list(errors)
    return payload


# The reading, without I/O.


def test_a_payload_without_its_own_advisory_says_nothing() -> None:
    assert directives_of(answer()) is None
    assert directives_of({"products": [], "errors": None}) is None
    assert directives_of([1, 2]) is None
    sdk = stale(500, source="sdk", sdk_id="adcontextprotocol-adcp-python@9.2.0")
    assert directives_of(answer(sdk)) is None  # an SDK's observation, not the producer's


def test_the_oldest_of_its_advisories_is_the_answers_age() -> None:
    said = directives_of(answer(stale(30, "TIMEOUT"), stale(300), {"code": "OTHER"}))
    assert said is not None and said.age == 300
    assert said.stale_at_source is not None
    assert said.stale_at_source.code == "CONNECTION_REFUSED"
    # Our message, never the sub-agent's (its text names an internal host).
    assert "10.0.0.7" not in said.stale_at_source.message


@pytest.mark.parametrize("age", [None, "300", True, -5, float("nan"), float("inf")])
def test_an_unreadable_age_counts_as_its_target(age: Any) -> None:
    error = stale(age)
    error["details"]["freshness_target_seconds"] = 120
    said = directives_of(answer(error))
    assert said is not None and said.age == 120
    error["details"].pop("freshness_target_seconds")
    said = directives_of(answer(error))
    assert said is not None and said.age == 0


def test_an_odd_code_is_not_repeated() -> None:
    said = directives_of(answer(stale(100, "refused by db-01.internal:5432")))
    assert said is not None and said.stale_at_source is not None
    assert said.stale_at_source.code == "STALE_RESPONSE"
    said = directives_of(answer(stale(100, code=None)))
    assert said is not None and said.stale_at_source is not None
    assert said.stale_at_source.code == "STALE_RESPONSE"


def test_delivered_keeps_what_is_not_the_producers_staleness() -> None:
    sdk = stale(5, source="sdk", sdk_id="x@1")
    other = {"code": "PIXEL_TRACKER_LOSSY_DOWNGRADE", "message": "m"}
    payload = answer(stale(300), sdk, other)
    out = delivered(payload)
    assert out["errors"] == [sdk, other] and "context" not in out
    assert payload["errors"][0]["code"] == "STALE_RESPONSE"  # the cached payload untouched
    assert "errors" not in delivered(answer(stale(300)))


# Through the cache.


class SubAgent:
    def __init__(self) -> None:
        self.payload: Any = answer()
        self.down = False
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError
        return self.payload


@pytest.fixture
def cache(clock: FakeClock) -> UpstreamCache:
    return UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)


async def ask(cache: UpstreamCache, sub: SubAgent) -> tuple[Any, list[dict[str, Any]]]:
    with collect_advisories() as advisories:
        value = await cache.fetch(SUB, "k", sub, surface="get_products", directives=directives_of)
    return value, advisories.errors()


async def test_an_answer_stale_at_its_source_past_our_target_is_announced_once(
    cache: UpstreamCache, clock: FakeClock, assert_valid_advisory: Any
) -> None:
    sub = SubAgent()
    sub.payload = answer(stale(300, "TIMEOUT"))
    value, [advisory] = await ask(cache, sub)
    assert value["products"] == [{"product_id": "p1"}]
    assert_valid_advisory(advisory)
    details = advisory["details"]
    assert details["upstream"] == {"name": "sub", "url": SUB.url}
    assert details["cache_age_seconds"] == 300 and details["freshness_target_seconds"] == 60
    assert details["original_error"]["code"] == "TIMEOUT"
    assert advisory["field"] == "products"
    # Stored that old: past our target, so the next request asks the sub-agent again.
    clock.advance(10)
    _, [again] = await ask(cache, sub)
    assert sub.calls == 2 and again["details"]["cache_age_seconds"] == 300


async def test_its_age_counts_from_the_bottom_when_the_sub_agent_dies_too(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    sub = SubAgent()
    sub.payload = answer(stale(100))
    await ask(cache, sub)
    clock.advance(50)
    sub.down = True
    _, [advisory] = await ask(cache, sub)
    assert advisory["details"]["cache_age_seconds"] == 150  # 100 at the bottom, 50 with us
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"  # ours now


async def test_stale_at_its_source_within_our_target_is_fresh_to_us(
    cache: UpstreamCache, clock: FakeClock
) -> None:
    sub = SubAgent()
    sub.payload = answer(stale(20))
    _, advisories = await ask(cache, sub)
    assert advisories == []  # 20 s old: within our 60 s target, nothing to tell
    clock.advance(30)
    _, advisories = await ask(cache, sub)
    assert advisories == [] and sub.calls == 1  # a fresh hit, 50 s old
    clock.advance(15)
    sub.down = True
    _, [advisory] = await ask(cache, sub)
    assert advisory["details"]["cache_age_seconds"] == 65


async def test_older_than_we_may_serve_is_a_failure_not_an_answer(
    cache: UpstreamCache,
) -> None:
    sub = SubAgent()
    sub.payload = answer(stale(5000, "TIMEOUT"))
    with pytest.raises(UpstreamUnavailable) as raised, collect_advisories():
        await cache.fetch(SUB, "k", sub, surface="get_products", directives=directives_of)
    assert raised.value.failure.code == "TIMEOUT"


async def test_every_caller_sharing_the_flight_is_told(cache: UpstreamCache) -> None:
    import asyncio

    sub = SubAgent()
    sub.payload = answer(stale(300))
    gate = asyncio.Event()

    async def slow() -> Any:
        await gate.wait()
        return await sub()

    async def one() -> list[dict[str, Any]]:
        with collect_advisories() as advisories:
            await cache.fetch(SUB, "k", slow, surface="get_products", directives=directives_of)
        return advisories.errors()

    tasks = [asyncio.ensure_future(one()) for _ in range(3)]
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert sub.calls == 1
    assert [len(r) for r in results] == [1, 1, 1]


def test_sdk_entries_are_kept_once_per_code_and_field() -> None:
    first = {"code": "FORMAT_PROJECTION_FAILED", "message": "a", "field": "products[0]",
             "source": "sdk", "sdk_id": "one@1"}  # fmt: skip
    again = {**first, "message": "b", "sdk_id": "two@2"}
    elsewhere = {**first, "field": "products[1]"}
    producer = {"code": "FORMAT_PROJECTION_FAILED", "message": "c", "field": "products[0]"}
    out = delivered(answer(first, again, elsewhere, producer, producer))
    assert out["errors"] == [first, elsewhere, producer, producer]  # the first SDK entry kept
