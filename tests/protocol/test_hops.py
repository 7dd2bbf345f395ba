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
from adcp_stale_cache.adcp.hops import delivered, directives_of

from ..conftest import FakeClock

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
    assert directives_of({"products": [], "errors": [{"code": "OTHER", "message": "m"}]}) is None


def test_an_sdks_stale_response_counts_too() -> None:
    """Relayed, an SDK's entry would state an age frozen at its hop: it is read, as the
    producer's are, and the oldest wins."""
    sdk = stale(500, source="sdk", sdk_id="adcontextprotocol-adcp-python@9.2.0")
    said = directives_of(answer(stale(30), sdk))
    assert said is not None and said.age == 500


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
    assert said is not None and said.age == 120 and not said.age_known
    error["details"].pop("freshness_target_seconds")
    said = directives_of(answer(error))
    assert said is not None and said.age == 0 and not said.age_known


@pytest.mark.parametrize("age", [None, "400", True, -5, {"s": 1}])
async def test_a_stale_serve_of_unreadable_age_is_announced_at_least_at_our_target(
    cache: UpstreamCache, age: Any, assert_valid_advisory: Any
) -> None:
    sub = SubAgent()
    sub.payload = answer(stale(age))
    value, [advisory] = await ask(cache, sub)
    assert_valid_advisory(advisory)
    assert advisory["details"]["cache_age_seconds"] == 60  # our target: at least that old
    assert "errors" not in delivered(value)


async def test_an_errors_object_is_read_as_a_list_of_it(cache: UpstreamCache) -> None:
    sub = SubAgent()
    sub.payload = {"products": [], "errors": stale(400)}
    value, [advisory] = await ask(cache, sub)
    assert advisory["details"]["cache_age_seconds"] == 400
    assert "errors" not in delivered(value)
    assert "errors" not in delivered({"products": [], "errors": "oops"})


def test_an_odd_code_is_not_repeated() -> None:
    said = directives_of(answer(stale(100, "refused by db-01.internal:5432")))
    assert said is not None and said.stale_at_source is not None
    assert said.stale_at_source.code == "STALE_RESPONSE"
    said = directives_of(answer(stale(100, code=None)))
    assert said is not None and said.stale_at_source is not None
    assert said.stale_at_source.code == "STALE_RESPONSE"


def test_delivered_keeps_what_is_not_staleness() -> None:
    sdk = stale(5, source="sdk", sdk_id="x@1")
    other = {"code": "PIXEL_TRACKER_LOSSY_DOWNGRADE", "message": "m"}
    payload = answer(stale(300), sdk, other)
    out = delivered(payload)
    assert out["errors"] == [other] and "context" not in out  # every staleness is ours to tell
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


async def test_an_answer_too_old_to_serve_never_opens_the_breaker(clock: FakeClock) -> None:
    """The upstream answered: too old for us is no outage of its own (a fresh answer next is
    asked for, not refused by an open breaker)."""
    from adcp_stale_cache.pipeline.breaker import BreakerPolicy

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock,
                          breaker=BreakerPolicy(failure_threshold=1))  # fmt: skip
    sub = SubAgent()
    sub.payload = answer(stale(5000))
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable), collect_advisories():
            await cache.fetch(SUB, "k", sub, surface="get_products", directives=directives_of)
    sub.payload = answer()
    value, advisories = await ask(cache, sub)
    assert sub.calls == 3 and advisories == [] and value["products"]


@pytest.mark.parametrize("age", [10**400, 1e308])
async def test_an_age_past_any_number_is_too_old_never_a_crash(
    cache: UpstreamCache, clock: FakeClock, age: Any
) -> None:
    """A 401-digit ``cache_age_seconds`` (no double holds it) is read as the oldest age
    there is: with a good entry held, the buyer gets that entry, announced."""
    sub = SubAgent()
    await ask(cache, sub)  # a good entry, fresh from the sub-agent
    assert directives_of(answer(stale(age))) is not None
    clock.advance(61)
    sub.payload = answer(stale(age))
    value, [advisory] = await ask(cache, sub)
    assert value["products"] == [{"product_id": "p1"}] and sub.calls == 2
    assert advisory["details"]["cache_age_seconds"] == 61  # the held entry's own age
