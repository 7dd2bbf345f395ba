"""HTTP's caching contract in CachingTransport (issue 15): validators and 304s, directives
clamped by the surface policy, errors that never replace a good entry, negative caching.
One test (or more) per row of docs/http-caching.md's table, each run twice: against a respx
route and against a real uvicorn upstream on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import respx

from adcp_stale_cache import (
    CachingTransport,
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    UpstreamUnavailable,
    collect_advisories,
)
from adcp_stale_cache.core.directives import parse

from ..conftest import FakeClock

INVENTORY = Upstream(name="inventory-service")
GOOD = {"products": [{"product_id": "p1"}]}
NEWER = {"products": [{"product_id": "p2"}]}
Answer = tuple[int, Any, dict[str, str]]  # status, JSON body (None: empty), headers


class Scripted:
    """An upstream whose answers a test scripts: a function of the request's headers. Runs
    as a respx route or as a real uvicorn server on loopback (the ``upstream`` fixture)."""

    url = ""

    def __init__(self) -> None:
        self.script: Any = lambda headers: (200, GOOD, {})
        self.requests: list[dict[str, str]] = []

    def answer(self, status: int = 200, body: Any = GOOD, **headers: str) -> None:
        """Every request gets this answer from now on."""
        self.script = lambda _: (status, body, headers)

    @property
    def call_count(self) -> int:
        return len(self.requests)

    @property
    def last(self) -> dict[str, str]:
        return self.requests[-1]

    def respond(self, headers: dict[str, str]) -> Answer:
        self.requests.append(headers)
        answer: Answer = self.script(headers)
        return answer


@pytest.fixture(scope="module")
def real_server() -> Iterator[Scripted]:
    """One uvicorn server for the module's tests; each test gets it with a clean script."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from ..servers import serve

    scripted = Scripted()

    async def products(request: Request) -> Response:
        status, body, headers = scripted.respond(dict(request.headers))
        content = b"" if body is None else orjson.dumps(body)
        kind = {"content-type": "application/json"} if body is not None else {}
        return Response(content, status_code=status, headers=kind | headers)

    with serve(Starlette(routes=[Route("/products", products)])) as base:
        scripted.url = f"{base}/products"
        yield scripted


@pytest.fixture(params=["respx", "uvicorn"])
def upstream(request: pytest.FixtureRequest) -> Iterator[Scripted]:
    if request.param == "uvicorn":
        scripted: Scripted = request.getfixturevalue("real_server")
        scripted.requests.clear()
        scripted.answer()
        yield scripted
        return
    scripted = Scripted()
    scripted.url = "http://inventory.internal:9000/products"

    def mocked(req: httpx.Request) -> httpx.Response:
        status, body, headers = scripted.respond(dict(req.headers))
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    with respx.mock(assert_all_called=False) as router:
        router.get(scripted.url).mock(side_effect=mocked)
        yield scripted


def policy(**changes: Any) -> SurfacePolicy:
    settings: dict[str, Any] = {"name": "get_products", "field": "products",
                                "freshness_target_seconds": 60, "max_stale_seconds": 3600}  # fmt: skip
    return SurfacePolicy(**(settings | changes))


def client_for(clock: FakeClock, honor: bool | None = True, **options: Any) -> httpx.AsyncClient:
    surface = options.pop("surface", policy())
    breaker, metrics = options.pop("breaker", None), options.pop("metrics", None)
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(surface), clock=clock,
                          breaker=breaker, metrics=metrics)  # fmt: skip
    transport = CachingTransport(cache, INVENTORY, surface=surface.name,
                                 honor_cache_control=honor, **options)  # fmt: skip
    client = httpx.AsyncClient(transport=transport)
    client.cache = cache  # type: ignore[attr-defined]
    return client


def stale(advisories: Any) -> list[dict[str, Any]]:
    return [e for e in advisories.errors() if e["code"] == "STALE_RESPONSE"]


# Validators (always on)


async def test_etag_revalidates_and_a_304_restamps_without_a_body(
    clock: FakeClock, upstream: Scripted
) -> None:
    client, url = client_for(clock, honor=False), upstream.url
    upstream.answer(ETag='"v1"', **{"X-Version": "1"})
    await client.get(url)
    clock.advance(61)  # past the target
    upstream.answer(304, None, ETag='"v1"', **{"X-Version": "2"})
    with collect_advisories() as advisories:
        answer = await client.get(url)
    assert upstream.last["if-none-match"] == '"v1"'
    assert answer.status_code == 200 and answer.json() == GOOD  # the full answer
    assert answer.headers["x-version"] == "2"  # headers updated from the 304 (RFC 9111 4.3.4)
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert advisories.errors() == []  # a successful refresh: no advisory
    clock.advance(30)
    await client.get(url)
    assert upstream.call_count == 2  # re-stamped: fresh again for 60 s, no call


async def test_a_304_naming_another_etag_updates_nothing(
    clock: FakeClock, upstream: Scripted
) -> None:
    """RFC 9111 4.3.4 (issue 22, item 4): an upstream judging If-Modified-Since alone answers
    304 with the new representation's ETag; the held body is not that one, so it is fetched
    whole, never re-stamped under the new ETag (which every later revalidation would match)."""
    client, url = client_for(clock, honor=False), upstream.url
    stamp = "Wed, 21 Oct 2026 07:28:00 GMT"
    upstream.answer(ETag='"v1"', **{"Last-Modified": stamp})
    await client.get(url)
    clock.advance(61)

    def script(headers: dict[str, str]) -> Answer:
        if "if-modified-since" in headers:  # changed within Last-Modified's second
            return 304, None, {"ETag": '"v2"', "Last-Modified": stamp}
        return 200, NEWER, {"ETag": '"v2"', "Last-Modified": stamp}

    upstream.script = script
    answer = await client.get(url)
    assert answer.json() == NEWER and answer.headers["etag"] == '"v2"'
    assert upstream.call_count == 3  # the conditional request, then the whole one
    clock.advance(61)
    assert (await client.get(url)).json() == NEWER  # and so on: the old body is gone


async def test_a_304_with_the_weak_form_of_the_held_etag_validates(
    clock: FakeClock, upstream: Scripted
) -> None:
    client, url = client_for(clock, honor=False), upstream.url
    upstream.answer(ETag='"v1"')
    await client.get(url)
    clock.advance(61)
    upstream.answer(304, None, ETag='W/"v1"')
    assert (await client.get(url)).json() == GOOD
    assert upstream.call_count == 2


async def test_last_modified_revalidates_with_if_modified_since(
    clock: FakeClock, upstream: Scripted
) -> None:
    client, url = client_for(clock, honor=False), upstream.url
    stamp = "Wed, 21 Oct 2026 07:28:00 GMT"
    upstream.answer(**{"Last-Modified": stamp})
    await client.get(url)
    clock.advance(61)
    upstream.answer(304, None)
    assert (await client.get(url)).json() == GOOD
    assert upstream.last["if-modified-since"] == stamp


async def test_a_304_counts_as_a_success_for_the_breaker(
    clock: FakeClock, upstream: Scripted
) -> None:
    from adcp_stale_cache.pipeline.breaker import BreakerPolicy

    client = client_for(clock, honor=False, surface=policy(freshness_target_seconds=1),
                        breaker=BreakerPolicy(failure_threshold=2))  # fmt: skip
    upstream.answer(ETag='"v1"')
    await client.get(upstream.url)
    for status in (503, 304, 503):
        clock.advance(2)
        upstream.answer(status, None)
        with collect_advisories():
            await client.get(upstream.url)
    assert not client.cache.breaker_open(INVENTORY)  # type: ignore[attr-defined]


async def test_keep_holds_an_entry_for_revalidation_only(
    clock: FakeClock, upstream: Scripted
) -> None:
    client = client_for(clock, honor=False,
                        surface=policy(max_stale_seconds=100, keep_seconds=1000))  # fmt: skip
    upstream.answer(ETag='"v1"')
    await client.get(upstream.url)
    clock.advance(500)  # past target + max-stale, within keep
    upstream.answer(304, None)
    assert (await client.get(upstream.url)).json() == GOOD  # revalidated: no body transferred
    assert upstream.last["if-none-match"] == '"v1"'
    clock.advance(500)
    upstream.answer(503, None)
    with pytest.raises(UpstreamUnavailable):  # kept, but never served past max-stale
        await client.get(upstream.url)


async def test_a_5xx_during_revalidation_leaves_the_entry(
    clock: FakeClock, upstream: Scripted
) -> None:
    client = client_for(clock, honor=False)
    upstream.answer(ETag='"v1"')
    await client.get(upstream.url)
    clock.advance(61)
    upstream.answer(503, None)
    with collect_advisories() as advisories:
        assert (await client.get(upstream.url)).json() == GOOD
    assert len(stale(advisories)) == 1
    upstream.answer(304, None)
    answer = await client.get(upstream.url)  # the entry is still there, with its validator
    assert answer.json() == GOOD and upstream.last["if-none-match"] == '"v1"'


# Directives (opt-in)


@pytest.mark.parametrize(
    ("cache_control", "changes", "fresh_for"),
    [
        ("max-age=5", {}, 5),  # shorter than the policy's target: taken
        ("max-age=3600", {}, 60),  # longer: clamped to the policy's target
        ("max-age=3600", {"max_freshness_seconds": 600}, 600),  # the seller allows up to 600
        ("max-age=1", {"min_freshness_seconds": 10}, 10),  # the seller's floor
        ("max-age=5, s-maxage=20", {}, 20),  # a shared cache takes s-maxage
        ("no-cache", {}, 0),  # revalidate every time
        ("max-age=soon", {}, 60),  # malformed: as if absent
    ],
)
async def test_max_age_sets_freshness_within_the_policys_range(
    clock: FakeClock,
    upstream: Scripted,
    cache_control: str,
    changes: dict[str, Any],
    fresh_for: int,
) -> None:
    client = client_for(clock, surface=policy(**changes))
    upstream.answer(**{"Cache-Control": cache_control})
    await client.get(upstream.url)
    if fresh_for:
        clock.advance(fresh_for - 0.5)
        await client.get(upstream.url)
        assert upstream.call_count == 1  # still fresh
    clock.advance(1)
    await client.get(upstream.url)
    assert upstream.call_count == 2  # past the entry's own target: refreshed


async def test_directives_are_ignored_unless_honoured(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock, honor=None)  # the policy's default: not honoured
    upstream.answer(**{"Cache-Control": "max-age=5"})
    await client.get(upstream.url)
    clock.advance(30)
    await client.get(upstream.url)
    assert upstream.call_count == 1
    client = client_for(clock, honor=None, surface=policy(honor_cache_control=True))
    await client.get(upstream.url)
    clock.advance(30)
    await client.get(upstream.url)
    assert upstream.call_count == 3  # the surface honours it: 5 s


async def test_stale_if_error_caps_max_stale(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock)  # the policy allows 3600 s past the target
    upstream.answer(**{"Cache-Control": "max-age=10, stale-if-error=5"})
    await client.get(upstream.url)
    upstream.answer(503, None)
    clock.advance(14)
    with collect_advisories() as advisories:
        assert (await client.get(upstream.url)).json() == GOOD  # 4 s past the target: stale
    [advisory] = stale(advisories)
    assert advisory["details"]["freshness_target_seconds"] == 10  # the entry's own target
    assert advisory["details"]["cache_age_seconds"] == 14
    clock.advance(2)  # 6 s past the target: beyond stale-if-error
    with pytest.raises(UpstreamUnavailable):
        await client.get(upstream.url)


async def test_stale_if_error_never_widens_the_policy(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock, surface=policy(max_stale_seconds=5))
    upstream.answer(**{"Cache-Control": "max-age=10, stale-if-error=600"})
    await client.get(upstream.url)
    upstream.answer(503, None)
    clock.advance(16)
    with pytest.raises(UpstreamUnavailable):
        await client.get(upstream.url)


async def test_stale_while_revalidate_serves_at_once_and_refreshes_behind(
    clock: FakeClock, upstream: Scripted
) -> None:
    client = client_for(clock)
    cc = {"Cache-Control": "max-age=10, stale-while-revalidate=30"}
    upstream.answer(**cc)
    await client.get(upstream.url)
    clock.advance(20)  # in the window
    upstream.answer(200, NEWER, **cc)
    with collect_advisories() as advisories:
        assert (await client.get(upstream.url)).json() == GOOD  # at once, the held answer
    assert len(stale(advisories)) == 1  # past its target: said so
    for _ in range(100):  # the refresh behind it lands
        if upstream.call_count == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert (await client.get(upstream.url)).json() == NEWER  # refreshed behind
    clock.advance(50)  # past the window: refreshed before answering
    upstream.answer(200, {"products": []}, **cc)
    assert (await client.get(upstream.url)).json() == {"products": []}


async def test_age_counts_into_the_entrys_age(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock)
    upstream.answer(**{"Cache-Control": "max-age=60", "Age": "50"})
    await client.get(upstream.url)
    clock.advance(9)
    await client.get(upstream.url)
    assert upstream.call_count == 1
    clock.advance(2)  # 50 + 11 > 60
    upstream.answer(503, None)
    with collect_advisories() as advisories:
        await client.get(upstream.url)
    assert stale(advisories)[0]["details"]["cache_age_seconds"] == 61


async def test_private_is_never_shared_across_callers(clock: FakeClock, upstream: Scripted) -> None:
    shared = policy(shared_across_callers=True)
    client = client_for(clock, surface=shared)
    upstream.script = lambda headers: (
        200, {"products": [headers.get("authorization", "")]},
        {"Cache-Control": "private, max-age=60"},
    )  # fmt: skip
    with collect_advisories(surface=shared, partition="alice"):
        alice = await client.get(upstream.url, headers={"Authorization": "Bearer alice"})
    with collect_advisories(surface=shared, partition="bob"):
        bob = await client.get(upstream.url, headers={"Authorization": "Bearer bob"})
    assert alice.json() != bob.json() and upstream.call_count == 2
    # On a surface keyed per caller, a private answer is that caller's own: kept.
    client = client_for(clock, surface=policy())
    with collect_advisories(partition="alice"):
        await client.get(upstream.url, headers={"Authorization": "Bearer alice"})
        await client.get(upstream.url, headers={"Authorization": "Bearer alice"})
    assert upstream.call_count == 3


async def test_vary_keeps_variants_side_by_side(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock)
    upstream.script = lambda headers: (
        200, {"products": [headers.get("accept-language", "")]}, {"Vary": "Accept-Language"}
    )  # fmt: skip
    english, french = {"Accept-Language": "en"}, {"Accept-Language": "fr"}
    assert (await client.get(upstream.url, headers=english)).json() == {"products": ["en"]}
    assert (await client.get(upstream.url, headers=english)).json() == {"products": ["en"]}
    assert (await client.get(upstream.url, headers=french)).json() == {"products": ["fr"]}
    calls = upstream.call_count
    assert (await client.get(upstream.url, headers=english)).json() == {"products": ["en"]}
    assert (await client.get(upstream.url, headers=french)).json() == {"products": ["fr"]}
    assert upstream.call_count == calls == 3  # both variants kept (the first answer learned)


async def test_vary_star_and_no_store_are_never_stored(
    clock: FakeClock, upstream: Scripted
) -> None:
    for headers in ({"Vary": "*"}, {"Cache-Control": "no-store"}):
        client = client_for(clock)
        upstream.requests.clear()
        upstream.answer(**headers)
        await client.get(upstream.url)
        await client.get(upstream.url)
        assert upstream.call_count == 2


# Errors and negative caching


async def test_negative_caching_is_brief_and_never_an_outage_fallback(
    clock: FakeClock, upstream: Scripted
) -> None:
    client = client_for(clock, honor=False, negative_ttl_seconds=10)
    upstream.answer(404, {"error": "gone"})
    assert (await client.get(upstream.url)).status_code == 404
    clock.advance(5)
    assert (await client.get(upstream.url)).status_code == 404
    assert upstream.call_count == 1  # kept for 10 s
    clock.advance(6)
    upstream.answer(503, None)
    with pytest.raises(UpstreamUnavailable):  # never served stale for an outage
        await client.get(upstream.url)


async def test_exists_but_denied_is_cached_exactly_as_not_found(clock: FakeClock) -> None:
    """AdCP's existence-leak uniformity: negative caching, headers, timings and metric
    events never tell a 403 ("exists, not yours") from a 404 ("no such thing")."""
    from adcp_stale_cache.ops.metrics import CacheMetrics

    class Recording(CacheMetrics):
        def __init__(self) -> None:
            self.events: list[tuple[str, ...]] = []

        def hit(self, surface: str, upstream: str) -> None:
            self.events.append(("hit", surface, upstream))

        def miss(self, surface: str, upstream: str) -> None:
            self.events.append(("miss", surface, upstream))

    seen: dict[int, list[tuple[str, ...]]] = {}
    for status in (403, 404):
        recording = Recording()
        with respx.mock(assert_all_called=False) as mock:
            route = mock.get("https://inventory.example/products").mock(
                return_value=httpx.Response(status, json={"error": "not found"})
            )
            client = client_for(clock, honor=False, negative_ttl_seconds=10, metrics=recording)
            answers = [await client.get("https://inventory.example/products") for _ in range(3)]
        assert route.call_count == 1, status  # kept, as a 404 is
        assert [a.status_code for a in answers] == [status] * 3
        headers = [sorted(k for k in a.headers if k not in ("content-length",)) for a in answers]
        seen[status] = [*recording.events, *map(tuple, headers)]
    assert seen[403] == seen[404]


async def test_a_404_never_replaces_a_good_entry(clock: FakeClock, upstream: Scripted) -> None:
    client = client_for(clock, honor=False, negative_ttl_seconds=10)
    await client.get(upstream.url)
    clock.advance(61)
    upstream.answer(410, None)
    assert (await client.get(upstream.url)).status_code == 410  # passed through
    upstream.answer(503, None)
    with collect_advisories() as advisories:
        assert (await client.get(upstream.url)).json() == GOOD  # still the fallback
    assert len(stale(advisories)) == 1


def test_parse_reads_rfc_9111_and_5861_directives() -> None:
    said = parse({"cache-control": 'Max-Age=5, s-maxage="7", private, no-cache, '
                  "stale-if-error=9, stale-while-revalidate=11, x-ext", "age": "3",
                  "vary": "Accept-Language, accept-encoding"})  # fmt: skip
    assert (said.max_age, said.private, said.no_cache, said.stale_if_error) == (7, True, True, 9)
    assert said.stale_while_revalidate == 11 and said.age == 3
    assert said.vary == ("accept-language", "accept-encoding")
    for odd in ("max-age=-1", "max-age=1e9", "max-age=inf", "max-age="):
        assert parse({"cache-control": odd}).max_age is None
    assert parse({"cache-control": "max-age=99999999999"}).max_age == 2**31


async def test_denied_and_not_found_look_alike_through_the_whole_seller(clock: FakeClock) -> None:
    """Existence-leak uniformity past the transport: a seller with the middleware, negative
    caching, Prometheus metrics, span events and a start-up warm. The buyer's statuses,
    headers (``Age``/``Cache-Status`` included) and bodies' shapes, the metric samples, the
    span events and the warm count are the same for a 403 and a 404, fresh, cached and
    while the upstream is down past the entry's target."""
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from adcp_stale_cache import StaleAdvisoryMiddleware, service_unavailable
    from adcp_stale_cache.ops.control import CacheControl, Warm
    from adcp_stale_cache.ops.metrics import CombinedMetrics, PrometheusMetrics
    from adcp_stale_cache.pipeline.tracing import SpanEvents

    async def observe(status: int) -> list[Any]:
        registry = CollectorRegistry()
        surface = policy(paths=("/api/get_products",), freshness_target_seconds=10)
        spans = SpanEvents()
        cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(surface), clock=clock,
                              breaker=None, metrics=CombinedMetrics(PrometheusMetrics(registry), spans),
                              tracing=False)  # fmt: skip
        transport = CachingTransport(cache, INVENTORY, surface="get_products",
                                     negative_ttl_seconds=10)  # fmt: skip
        inventory = httpx.AsyncClient(transport=transport)

        async def get_products(request: Request) -> Response:
            try:
                answer = await inventory.get("https://inventory.example/products")
            except UpstreamUnavailable as exc:  # a negative entry is never served stale
                error = service_unavailable(exc, field="products").to_dict()
                return JSONResponse({"adcp_error": error, "errors": [error]}, status_code=503)
            return Response(answer.content, status_code=answer.status_code,
                            media_type="application/json")  # fmt: skip

        app = StaleAdvisoryMiddleware(
            Starlette(routes=[Route("/api/get_products", get_products, methods=["POST"])]),
            surfaces=cache.surfaces,
        )
        tracer = TracerProvider().get_tracer("test")
        seen: list[Any] = []
        statuses: list[int] = []
        with respx.mock(assert_all_called=False) as mock:
            route = mock.get("https://inventory.example/products").mock(
                return_value=httpx.Response(status, json={"error": "no such product list"})
            )
            mock.route(host="seller").pass_through()
            control = CacheControl(cache)

            async def product_list() -> Any:  # what a warmer asks: the list, or an error
                answer = await inventory.get("https://inventory.example/products")
                return answer.raise_for_status().json()

            warmed = await control.warm([Warm(INVENTORY, "product list", product_list)])
            seen.append(("warmed", warmed))
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://seller") as buyer:  # fmt: skip
                for moment in ("cached", "cached again", "down past the target"):
                    if moment == "down past the target":
                        clock.advance(11)
                        route.mock(side_effect=httpx.ConnectError("refused"))
                    with tracer.start_as_current_span("request") as span:
                        response = await buyer.post("/api/get_products", json={})
                    events = [
                        (e.name, {k: v for k, v in (e.attributes or {}).items()
                                  if not k.endswith("duration_ms")})  # timings differ
                        for e in span.events  # type: ignore[attr-defined]
                    ]  # fmt: skip
                    headers = {k: v for k, v in response.headers.items() if k != "content-length"}
                    statuses.append(response.status_code)
                    seen.append((moment, headers, events))
        samples = [
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for metric in registry.collect() for s in metric.samples
            # timings (histogram sums and buckets) and creation times differ between runs
            if not s.name.endswith(("_created", "_seconds_sum", "_seconds_bucket"))
        ]  # fmt: skip
        return [statuses, *seen, sorted(samples)]

    denied, not_found = await observe(403), await observe(404)
    assert denied[0] == [403, 403, 503] and not_found[0] == [404, 404, 503]  # told as is
    for moment_403, moment_404 in zip(denied[1:], not_found[1:], strict=True):
        assert moment_403 == moment_404
    assert denied[1] == ("warmed", 0)  # a warmer's failure, the same for both


@pytest.mark.parametrize("digits", [11, 401, 5000])
def test_numbers_too_long_for_any_conversion_are_capped_never_raised(digits: int) -> None:
    """``Age``, ``max-age`` and ``Retry-After`` of thousands of digits (``int()`` refuses
    4,300 and more; a double holds none past 308) state RFC 9111's cap, 2^31 seconds."""
    from adcp_stale_cache.core.directives import parse
    from adcp_stale_cache.core.failures import MAX_STATED_SECONDS, retry_after_of

    huge = "9" * digits
    said = parse({"age": huge, "cache-control": f"max-age={huge}, stale-if-error={huge}"})
    assert said.age == said.max_age == said.stale_if_error == MAX_STATED_SECONDS
    assert retry_after_of({"retry-after": huge}) == MAX_STATED_SECONDS
    assert parse({"age": "0" * 20 + "7"}).age == 7


async def test_a_post_revalidates_with_its_own_body_and_one_validator(clock: FakeClock) -> None:
    """The conditional request is the caller's, body and headers, with the held answer's
    validators. (A POST carrying a validator of its own is a precondition: it passes
    straight through, see test_httpx_transport.)"""
    url = "http://inventory.internal:9000/search"
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers.get("if-none-match") == '"v1"':
            return httpx.Response(304, headers={"ETag": '"v1"'})
        return httpx.Response(200, json=GOOD, headers={"ETag": '"v1"'})

    client = client_for(clock, honor=False)
    body = b'{"brief": "display in Ohio"}'
    headers = {"X-Trace": "t-1", "Content-Type": "application/json"}
    with respx.mock() as router:
        router.post(url).mock(side_effect=answer)
        assert (await client.post(url, content=body, headers=headers)).json() == GOOD
        clock.advance(61)
        again = await client.post(url, content=body, headers=headers)
    assert again.status_code == 200 and again.json() == GOOD
    conditional = seen[-1]
    assert len(seen) == 2 and conditional.content == body
    assert conditional.headers.get_list("if-none-match") == ['"v1"']
    assert conditional.headers["x-trace"] == "t-1"
    assert conditional.headers["content-length"] == str(len(body))
