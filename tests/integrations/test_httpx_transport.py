"""CachingTransport with respx: upstream faults at the unit level."""

from __future__ import annotations

import asyncio
import datetime
import gzip
from typing import Any

import httpx
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

from ..conftest import FakeClock

PRODUCTS = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=5, max_stale_seconds=60
)
INVENTORY = Upstream(name="inventory-service")
URL = "http://inventory.internal:9000/products"
GOOD = {"products": [{"product_id": "p1"}]}


@pytest.fixture
def client(clock: FakeClock) -> httpx.AsyncClient:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(cache, INVENTORY, surface="get_products")
    return httpx.AsyncClient(transport=transport)


async def warm(client: httpx.AsyncClient, route: respx.Route, clock: FakeClock) -> None:
    route.mock(return_value=httpx.Response(200, json=GOOD))
    assert (await client.get(URL)).json() == GOOD
    clock.advance(6)


FAULTS: list[tuple[Any, str]] = [
    (httpx.ConnectError("[Errno 111] Connection refused"), "CONNECTION_REFUSED"),
    (httpx.ConnectTimeout("timed out"), "TIMEOUT"),
    (httpx.ReadTimeout("timed out"), "TIMEOUT"),
    (httpx.RemoteProtocolError("peer closed connection"), "CONNECTION_RESET"),
    (httpx.ConnectError("[Errno -2] Name or service not known"), "DNS_FAILURE"),
    (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]"), "TLS_ERROR"),
    (httpx.Response(500), "UPSTREAM_HTTP_500"),
    (httpx.Response(502), "UPSTREAM_HTTP_502"),
    (httpx.Response(503, headers={"Retry-After": "30"}), "UPSTREAM_HTTP_503"),
    (httpx.Response(504), "UPSTREAM_HTTP_504"),
    (httpx.Response(429, headers={"Retry-After": "7"}), "UPSTREAM_HTTP_429"),
    (
        httpx.Response(200, text="<html>oops", headers={"content-type": "application/json"}),
        "INVALID_PAYLOAD",
    ),
    (
        httpx.Response(200, json={"adcp_error": {"code": "SERVICE_UNAVAILABLE", "message": "x"}}),
        "SERVICE_UNAVAILABLE",
    ),
]


@pytest.mark.parametrize(("fault", "code"), FAULTS)
@respx.mock
async def test_outage_serves_stale(
    fault: Any, code: str, client: httpx.AsyncClient, clock: FakeClock, assert_valid_advisory: Any
) -> None:
    route = respx.get(URL)
    await warm(client, route, clock)
    if isinstance(fault, Exception):
        route.mock(side_effect=fault)
    else:
        route.mock(return_value=fault)
    with collect_advisories() as advisories:
        response = await client.get(URL)
    assert response.status_code == 200
    assert response.json() == GOOD
    [error] = advisories.errors()
    assert_valid_advisory(error)
    assert error["details"]["original_error"]["code"] == code
    assert error["details"]["upstream"] == {"name": "inventory-service"}
    assert error["details"]["cache_age_seconds"] == 6
    assert "inventory.internal" not in str(error)


@pytest.mark.parametrize(("fault", "code"), FAULTS[:3] + FAULTS[6:8])
@respx.mock
async def test_outage_without_entry_raises(
    fault: Any, code: str, client: httpx.AsyncClient
) -> None:
    route = respx.get(URL)
    if isinstance(fault, Exception):
        route.mock(side_effect=fault)
    else:
        route.mock(return_value=fault)
    with collect_advisories() as advisories, pytest.raises(UpstreamUnavailable) as raised:
        await client.get(URL)
    assert raised.value.failure.code == code
    assert not advisories


@respx.mock
async def test_fresh_hit_makes_no_call(client: httpx.AsyncClient, clock: FakeClock) -> None:
    route = respx.get(URL).mock(return_value=httpx.Response(200, json=GOOD))
    await client.get(URL)
    clock.advance(4.9)
    response = await client.get(URL)
    assert response.json() == GOOD
    assert route.call_count == 1


@respx.mock
async def test_4xx_passes_through_and_is_never_cached(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    route = respx.get(URL)
    await warm(client, route, clock)
    route.mock(return_value=httpx.Response(404, json={"errors": [{"code": "NOT_FOUND"}]}))
    with collect_advisories() as advisories:
        response = await client.get(URL)
    assert response.status_code == 404
    assert not advisories
    # The 404 did not replace the good entry.
    route.mock(side_effect=httpx.ConnectError("refused"))
    with collect_advisories() as advisories:
        assert (await client.get(URL)).json() == GOOD
    assert len(advisories) == 1


@respx.mock
async def test_no_store_answers_are_not_cached(client: httpx.AsyncClient, clock: FakeClock) -> None:
    route = respx.get(URL).mock(
        return_value=httpx.Response(200, json=GOOD, headers={"cache-control": "no-store"})
    )
    await client.get(URL)
    await client.get(URL)
    assert route.call_count == 2
    route.mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(UpstreamUnavailable):
        await client.get(URL)


@respx.mock
async def test_key_varies_with_credentials_method_and_body(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    route = respx.route(url=URL).mock(
        side_effect=lambda request: httpx.Response(
            200,
            json={"who": request.headers.get("authorization"), "body": request.content.decode()},
        )
    )
    alice = (
        await client.post(URL, headers={"Authorization": "Bearer alice"}, json={"q": 1})
    ).json()
    bob = (await client.post(URL, headers={"Authorization": "Bearer bob"}, json={"q": 1})).json()
    other_body = (
        await client.post(URL, headers={"Authorization": "Bearer alice"}, json={"q": 2})
    ).json()
    assert alice["who"] == "Bearer alice" and bob["who"] == "Bearer bob"
    assert other_body["body"] == '{"q":2}'
    assert route.call_count == 3
    # Stale serves keep each principal on its own entry.
    clock.advance(6)
    route.mock(side_effect=httpx.ConnectError("refused"))
    again = (await client.post(URL, headers={"Authorization": "Bearer bob"}, json={"q": 1})).json()
    assert again["who"] == "Bearer bob"


@respx.mock
async def test_store_keeps_no_credential_in_clear(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = UpstreamCache(store, surfaces=Surfaces.of(PRODUCTS), clock=clock)
    client = httpx.AsyncClient(transport=CachingTransport(cache, INVENTORY, surface="get_products"))
    respx.get(URL).mock(return_value=httpx.Response(200, json=GOOD))
    await client.get(URL, headers={"Authorization": "Bearer s3cret-token"})
    keys = [key for key, _ in await store.scan()]
    assert keys and all("s3cret" not in k and "inventory.internal" not in k for k in keys)


@respx.mock
async def test_gzip_upstream_answer_is_cached_decoded(
    client: httpx.AsyncClient, clock: FakeClock
) -> None:
    import gzip

    import orjson

    respx.get(URL).mock(
        return_value=httpx.Response(
            200,
            content=gzip.compress(orjson.dumps(GOOD)),
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )
    )
    assert (await client.get(URL)).json() == GOOD
    clock.advance(6)
    respx.get(URL).mock(side_effect=httpx.ConnectError("refused"))
    with collect_advisories():
        stale = await client.get(URL)
    assert stale.json() == GOOD
    assert "content-encoding" not in stale.headers


@respx.mock
async def test_unlisted_methods_bypass_the_cache(client: httpx.AsyncClient) -> None:
    route = respx.delete(URL).mock(return_value=httpx.Response(204))
    await client.delete(URL)
    await client.delete(URL)
    assert route.call_count == 2


async def test_repeated_credential_headers_all_vary_the_key() -> None:
    from adcp_stale_cache.integrations.httpx_transport import CachingTransport as Transport

    transport = Transport(UpstreamCache(), Upstream(name="u"))
    one = httpx.Request("GET", "http://u/x", headers=[("Authorization", "Bearer a")])
    two = httpx.Request(
        "GET", "http://u/x", headers=[("authorization", "Bearer a"), ("AUTHORIZATION", "b")]
    )
    assert transport._varying(one)[0][0] == "Bearer a"
    assert transport._varying(two)[0][0] == "Bearer a\nb"  # kept apart from one "Bearer a, b"
    assert transport._varying(two)[0][1:] == ["", "", "", ""]


def test_a_stored_response_is_not_read_back_to_check_it() -> None:
    """The response codec's writes load back by construction (status, header strings, body
    bytes): storing one decodes nothing, where a codec without that promise is read back once
    per store (a 304 revalidation decoded its 100 KB answer three times, now twice)."""
    from adcp_stale_cache.core.values import encode
    from adcp_stale_cache.integrations import httpx_transport
    from adcp_stale_cache.integrations.httpx_transport import RESPONSES

    class Counting(type(RESPONSES)):  # type: ignore[misc]
        loads_calls = 0

        def loads(self, data: bytes) -> httpx.Response:
            Counting.loads_calls += 1
            return super().loads(data)

    response = httpx.Response(200, json={"products": []}, headers={"etag": '"v1"'})
    codec = Counting()
    encoded = encode(codec, response, Upstream(name="u"))
    assert encoded is not None and encoded.data == RESPONSES.dumps(response)
    assert Counting.loads_calls == 0
    assert encoded.spare == ()  # the upstream's own object: never handed over
    held = RESPONSES.loads(RESPONSES.dumps(response))
    renewed = httpx_transport._refreshed(held, httpx.Response(304, headers={"etag": '"v1"'}))
    handed = encode(codec, renewed, Upstream(name="u"))
    assert handed is not None and handed.spare == (renewed,)  # read back alone: handed over
    codec.round_trips = False  # without the promise: read back once
    encode(codec, response, Upstream(name="u"))
    assert Counting.loads_calls == 1


def test_a_codecs_optional_capabilities_are_protocols() -> None:
    from adcp_stale_cache.core.values import (
        JSON,
        ContentReading,
        HandingOver,
        RoundTripping,
        content_of,
    )
    from adcp_stale_cache.integrations.httpx_transport import RESPONSES

    for capability in (RoundTripping, ContentReading, HandingOver):
        assert isinstance(RESPONSES, capability) and not isinstance(JSON, capability)
    data = RESPONSES.dumps(httpx.Response(200, content=b"x", headers={"date": "today"}))
    assert content_of(RESPONSES, data) == b"200\nx" and content_of(JSON, b"[1]") == b"[1]"


@pytest.mark.parametrize("body", [b"", b"{}", b'{"products": [' + b"1," * 5000 + b"1]}"])
async def test_a_stored_answer_comes_back_as_httpx_reads_one(body: bytes) -> None:
    """A hit builds its response read already (httpx's stream decoders skipped, most of a hit's
    cost): on the httpx installed, it is what ``httpx.Response(content=)`` makes, through a
    client too (content, headers, stream state), and a streaming reader reads the same."""
    from adcp_stale_cache.integrations import httpx_transport
    from adcp_stale_cache.integrations.httpx_transport import RESPONSES

    assert httpx_transport._reads_alike()  # else CI's httpx moved on: hits pay its decoders
    stored = httpx.Response(200, content=body, headers={"etag": '"v1"', "x-a": "1"})
    data = RESPONSES.dumps(stored)
    ours, its = (
        RESPONSES.loads(data),
        httpx_transport._read_by_httpx(200, [(b"etag", b'"v1"'), (b"x-a", b"1")], body),
    )
    assert ours.headers.raw == its.headers.raw and ours.content == its.content == body
    assert (ours.is_closed, ours.is_stream_consumed) == (its.is_closed, its.is_stream_consumed)
    for response in (RESPONSES.loads(data), its):
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r, a=response: a)) as c:
            whole = await c.get("http://u/")
            assert whole.content == body and whole.headers.raw == its.headers.raw
            async with c.stream("GET", "http://u/") as streamed:
                assert b"".join([part async for part in streamed.aiter_bytes()]) == body


def test_a_hit_falls_back_to_httpx_s_own_build_when_its_internals_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adcp_stale_cache.integrations import httpx_transport

    def renamed(status: int, headers: list[Any], body: bytes) -> httpx.Response:
        response = httpx_transport._read_by_httpx(status, headers, body)
        response.is_stream_consumed = False  # as if httpx kept its state elsewhere
        return response

    monkeypatch.setattr(httpx_transport, "_read_already", renamed)
    assert not httpx_transport._reads_alike.__wrapped__()


def test_a_hit_falls_back_when_httpx_can_no_longer_build_it_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adcp_stale_cache.integrations import httpx_transport

    def gone(status: int, headers: list[Any], body: bytes) -> httpx.Response:
        raise AttributeError("module 'httpx' has no attribute 'ByteStream'")

    monkeypatch.setattr(httpx_transport, "_read_already", gone)
    assert not httpx_transport._reads_alike.__wrapped__()
    monkeypatch.setattr(httpx_transport, "_reads_alike", lambda: False)
    data = httpx_transport.RESPONSES.dumps(httpx.Response(200, content=b"{}"))
    assert httpx_transport.RESPONSES.loads(data).content == b"{}"  # built by httpx


async def test_headers_come_back_as_the_upstream_sent_them(clock: FakeClock) -> None:
    """Every header as sent, byte for byte: a Latin-1 byte (which made every call fail, the
    entry unreadable once stored) and a repeated Link (merged into one)."""
    sent = [
        (b"content-type", b"application/json"),
        (b"x-name", b"caf\xe9"),
        (b"link", b"</a>; rel=next"),
        (b"link", b"</b>; rel=prev"),
    ]
    calls = 0

    def upstream(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200, content=b'{"products": []}', headers=sent)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(2):  # a miss, then a hit
            response = await client.get("http://u/products")
            assert [h for h in response.headers.raw if h[0] != b"Content-Length"] == sent
            assert response.headers.get_list("link") == ["</a>; rel=next", "</b>; rel=prev"]
    assert calls == 1


SESSION = [(b"set-cookie", b"session=s1; Path=/"), (b"set-cookie", b"route=a; Path=/")]


async def test_a_cookie_reaches_the_call_it_answered_and_no_hit_after(clock: FakeClock) -> None:
    """A Set-Cookie goes to the request whose call received it, never stored: a hit that
    replayed it would reset the client's jar to a session the upstream rotated since, or hand
    one caller's session to another."""
    sessions = iter(range(1, 100))

    def upstream(request: httpx.Request) -> httpx.Response:
        cookie = f"session=s{next(sessions)}; Path=/".encode()
        headers = [(b"content-type", b"application/json"), (b"set-cookie", cookie)]
        return httpx.Response(200, content=b'{"products": []}', headers=headers)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    first, other = httpx.AsyncClient(transport=transport), httpx.AsyncClient(transport=transport)
    async with first, other:  # two callers with no cookie yet share the entry
        missed = await first.get("http://u/products")
        assert missed.headers.get_list("set-cookie") == ["session=s1; Path=/"]
        assert first.cookies.get("session") == "s1"
        hit = await other.get("http://u/products")
        assert "set-cookie" not in hit.headers and hit.json() == {"products": []}
        assert not other.cookies  # the first caller's session is not handed to another
        clock.advance(6)  # past the target: refreshed, and this call's cookie reaches it
        refreshed = await other.get("http://u/products")
        assert refreshed.headers.get_list("set-cookie") == ["session=s2; Path=/"]
        other.cookies.clear()  # (a cookie sent is part of the key)
        assert "set-cookie" not in (await other.get("http://u/products")).headers


@pytest.mark.parametrize("framing", ["gzip", "chunked", "empty"])
async def test_a_miss_reads_as_the_hit_after_it_whatever_its_framing(
    clock: FakeClock, framing: str
) -> None:
    """An answer sent gzipped, chunked or empty reaches its own caller as its stored copy
    reaches the next: its body decoded, so no header of its transfer (a body labelled gzip,
    decoded already, would mislead whoever passes it on), and a Content-Length only of a body."""
    body = b"" if framing == "empty" else b'{"products": [1, 2, 3]}'

    async def chunks() -> Any:
        yield body[:10]
        yield body[10:]

    def upstream(request: httpx.Request) -> httpx.Response:
        json_type = {"content-type": "application/json"}
        if framing == "gzip":
            headers = {**json_type, "content-encoding": "gzip"}
            return httpx.Response(200, content=gzip.compress(body), headers=headers)
        if framing == "empty":
            return httpx.Response(204, headers={**json_type, "content-length": "0"})
        return httpx.Response(200, content=chunks(), headers=json_type)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    async with httpx.AsyncClient(transport=transport) as client:
        miss, hit = [await client.get("http://u/products") for _ in range(2)]
    for answer in (miss, hit):
        assert answer.content == body and answer.headers.raw == hit.headers.raw
        assert answer.headers.get("content-length") == (str(len(body)) if body else None)


async def three_callers_of_one_call(clock: FakeClock, answer: httpx.Response) -> list[Any]:
    """Three concurrent GETs of one key, answered by one upstream call: ``answer``."""
    release = asyncio.Event()

    async def upstream(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return answer

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    async with httpx.AsyncClient(transport=transport) as client:
        calls = [asyncio.ensure_future(client.get("http://u/products")) for _ in range(3)]
        await asyncio.sleep(0.01)
        release.set()
        return list(await asyncio.gather(*calls))


@pytest.mark.parametrize(
    ("status", "extra"),
    [(200, []), (200, [(b"cache-control", b"no-store")]), (401, [])],
    ids=["stored", "no-store", "401"],
)
async def test_callers_joining_a_call_get_none_of_its_cookies(
    clock: FakeClock, status: int, extra: list[tuple[bytes, bytes]]
) -> None:
    """Stored or not (then the call's own answer is what every caller gets), a caller joining
    another's call is handed none of the cookies that call received."""
    headers = [(b"content-type", b"application/json"), *SESSION, *extra]
    answer = httpx.Response(status, content=b'{"products": []}', headers=headers)
    first, *joined = await three_callers_of_one_call(clock, answer)
    assert first.headers.get_list("set-cookie") == [v.decode() for _, v in SESSION]
    assert all("set-cookie" not in answer.headers for answer in joined)
    assert all(
        answer.status_code == status and answer.json() == {"products": []} for answer in joined
    )


async def test_a_304s_cookie_reaches_its_caller_alone(clock: FakeClock) -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        if request.headers.get("if-none-match") == '"v1"':
            return httpx.Response(304, headers=[(b"etag", b'"v1"'), SESSION[0]])
        headers = [(b"content-type", b"application/json"), (b"etag", b'"v1"'), SESSION[1]]
        return httpx.Response(200, content=b'{"products": []}', headers=headers)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get("http://u/products")).headers["set-cookie"] == "route=a; Path=/"
        clock.advance(6)
        client.cookies.clear()  # (a cookie sent is part of the key)
        revalidated = await client.get("http://u/products")
        assert revalidated.headers.get_list("set-cookie") == ["session=s1; Path=/"]
        assert revalidated.json() == {"products": []} and revalidated.headers["etag"] == '"v1"'
        client.cookies.clear()
        assert "set-cookie" not in (await client.get("http://u/products")).headers


async def test_callers_joining_a_compressed_answer_not_stored_can_read_it(
    clock: FakeClock,
) -> None:
    """A joiner's copy of an answer not stored is built as a stored one is: its body decoded,
    so without the Content-Encoding that no longer describes it (httpx failed to decode it)."""
    import gzip

    headers = [(b"content-type", b"application/json"), (b"content-encoding", b"gzip"), *SESSION]
    answer = httpx.Response(401, content=gzip.compress(b'{"error": "no"}'), headers=headers)
    first, *joined = await three_callers_of_one_call(clock, answer)
    assert [answer.json() for answer in (first, *joined)] == [{"error": "no"}] * 3
    assert first.headers.get_list("set-cookie") and not any(
        "set-cookie" in answer.headers for answer in joined
    )


async def test_every_answer_is_timed_as_httpx_times_its_own(clock: FakeClock) -> None:
    """A miss, a hit and a stale serve come back read already, which httpx never times:
    reading ``.elapsed`` on them raised, where the same client without the cache answered."""
    up = True

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if up else 503, json=GOOD)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    async with httpx.AsyncClient(transport=transport) as client:
        answers = [await client.get(URL), await client.get(URL)]
        clock.advance(6)
        up = False
        with collect_advisories(PRODUCTS):
            answers.append(await client.get(URL))
    assert [answer.json() for answer in answers] == [GOOD] * 3
    assert all(
        datetime.timedelta(0) <= answer.elapsed < datetime.timedelta(seconds=5)
        for answer in answers
    )


async def test_no_cookie_an_earlier_build_stored_is_handed_out(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry stored cookie and all (by 0.1.0, or an old process on a shared store during a
    rolling upgrade): neither a hit nor a 304 refreshing it hands one caller's session out."""
    from adcp_stale_cache.integrations import httpx_transport

    def upstream(request: httpx.Request) -> httpx.Response:
        if request.headers.get("if-none-match") == '"v1"':
            return httpx.Response(304, headers=[(b"etag", b'"v1"')])
        headers = [(b"content-type", b"application/json"), (b"etag", b'"v1"'), *SESSION]
        return httpx.Response(200, content=b'{"products": []}', headers=headers)

    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    transport = CachingTransport(
        cache, INVENTORY, transport=httpx.MockTransport(upstream), surface="get_products"
    )
    with monkeypatch.context() as earlier:  # stored as an earlier build did: cookie and all
        earlier.setattr(httpx_transport, "_NOT_STORED", httpx_transport._TRANSFER_HEADERS)
        async with httpx.AsyncClient(transport=transport) as first:
            assert (await first.get("http://u/products")).headers.get_list("set-cookie")
    async with httpx.AsyncClient(transport=transport) as other:
        hit = await other.get("http://u/products")
        assert hit.json() == {"products": []} and "set-cookie" not in hit.headers
        assert not other.cookies
    clock.advance(6)
    async with httpx.AsyncClient(transport=transport) as other:
        revalidated = await other.get("http://u/products")  # a 304, which set no cookie
        assert revalidated.headers["etag"] == '"v1"' and "set-cookie" not in revalidated.headers
        assert not other.cookies


def test_no_cookie_is_stored() -> None:
    from adcp_stale_cache.integrations.httpx_transport import RESPONSES

    sent = httpx.Response(200, content=b"{}", headers=[*SESSION, (b"x", b"1")])
    stored = RESPONSES.dumps(sent)
    assert b"session=" not in stored and b"route=" not in stored
    assert RESPONSES.loads(stored).headers["x"] == "1"


def test_a_stored_answer_naming_its_encoding_is_decoded_by_httpx() -> None:
    """The codec never stores a Content-Encoding; another writer's entry that does is read
    as httpx reads one (decoded), not handed out still encoded."""
    import gzip
    import struct

    import orjson

    from adcp_stale_cache.integrations.httpx_transport import RESPONSES

    head = orjson.dumps([200, [["content-encoding", "gzip"]]])
    data = struct.pack(">I", len(head)) + head + gzip.compress(b'{"a": 1}')
    assert RESPONSES.loads(data).content == b'{"a": 1}'


def transport_to(clock: FakeClock, handler: Any) -> httpx.AsyncClient:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(PRODUCTS), clock=clock)
    return httpx.AsyncClient(transport=CachingTransport(
        cache, INVENTORY, surface="get_products", transport=httpx.MockTransport(handler)))  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "stored"),
    [
        ([(b"Cache-Control", b"private"), (b"cache-control", b"No-Store")], False),  # split
        ([(b"CACHE-CONTROL", b"NO-STORE")], False),
        ([(b"Cache-Control", b"max-age=60, no-store")], False),
        ([(b"Cache-Control", b"no-cache")], True),
        ([(b"X-Note", b"no-store")], True),  # only Cache-Control says it
    ],
)
async def test_no_store_is_read_in_any_case_and_any_cache_control_header(
    clock: FakeClock, headers: list[tuple[bytes, bytes]], stored: bool
) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json=GOOD, headers=headers)

    async with transport_to(clock, handler) as client:
        for _ in range(2):
            assert (await client.get(URL)).json() == GOOD
    assert len(calls) == (1 if stored else 2)


@pytest.mark.parametrize(
    ("said", "validates"),
    [
        (b'W/"v1"', True),
        (b'  W/"v1" ', True),  # ASCII spaces stripped
        (b'"v1"\xa0', False),  # another byte: compared byte for byte, then asked whole
        (b'"v2"', False),
    ],
)
async def test_a_304s_etag_is_compared_byte_for_byte_with_the_held_ones(
    clock: FakeClock, said: bytes, validates: bool
) -> None:
    calls: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("if-none-match"))
        if "if-none-match" in request.headers:
            return httpx.Response(304, headers=[(b"ETag", said)])
        return httpx.Response(200, json={"n": len(calls)}, headers=[(b"ETag", b' "v1" ')])

    async with transport_to(clock, handler) as client:
        await client.get(URL)
        clock.advance(6)
        answer = await client.get(URL)
    assert calls[0] is None and calls[1] == ' "v1" '  # sent back as held
    # Renewed, the held answer; else the whole one asked for again.
    assert (answer.json(), len(calls)) == (({"n": 1}, 2) if validates else ({"n": 3}, 3))


@pytest.mark.parametrize("said", [b'"v1"', b'"v0"'])
async def test_a_repeated_etag_is_read_joined_as_httpx_joins_it(
    clock: FakeClock, said: bytes
) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if "if-none-match" in request.headers:
            return httpx.Response(304, headers=[(b"ETag", said)])
        return httpx.Response(200, json=GOOD, headers=[(b"ETag", b'"v1"'), (b"ETag", b'"v0"')])

    async with transport_to(clock, handler) as client:
        await client.get(URL)
        clock.advance(6)
        assert (await client.get(URL)).json() == GOOD
    assert len(calls) == 3  # '"v1", "v0"' is neither of its values: asked again whole


async def test_a_304_naming_an_etag_renews_no_answer_held_without_one(clock: FakeClock) -> None:
    """RFC 9111 4.3.4: a strong validator in the 304 names the representation to update; a
    held answer validated by Last-Modified alone is not it, and is asked for again whole."""
    calls: list[httpx.Request] = []
    stamp = b"Wed, 21 Oct 2026 07:28:00 GMT"

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if "if-modified-since" in request.headers:
            return httpx.Response(304, headers=[(b"ETag", b'"v2"')])
        return httpx.Response(200, json={"n": len(calls)}, headers=[(b"Last-Modified", stamp)])

    async with transport_to(clock, handler) as client:
        await client.get(URL)
        clock.advance(6)
        assert (await client.get(URL)).json() == {"n": 3}
    assert len(calls) == 3


async def test_a_partial_answer_is_never_stored_under_the_whole_ones_key(
    clock: FakeClock,
) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:  # (a range is never sent: an upstream answering one anyway)
            return httpx.Response(206, json={"part": 1}, headers={"Content-Range": "bytes 0-9/99"})
        return httpx.Response(200, json=GOOD)

    async with transport_to(clock, handler) as client:
        assert (await client.get(URL)).status_code == 206
        assert (await client.get(URL)).json() == GOOD
        assert (await client.get(URL)).json() == GOOD  # the whole one is kept
    assert len(calls) == 2


async def test_a_repeated_credential_keys_with_each_of_its_values(clock: FakeClock) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"n": len(calls)})

    async with transport_to(clock, handler) as client:
        one = await client.get(URL, headers=[("Authorization", "Bearer x")])
        two = await client.get(URL, headers=[("Authorization", ""), ("Authorization", "Bearer x")])
    assert (one.json(), two.json()) == ({"n": 1}, {"n": 2})  # an empty first value counts


@pytest.mark.parametrize(
    "asked",
    [
        {"Range": "bytes=0-9"},
        {"If-None-Match": '"v1"'},
        {"Range": "bytes=99-", "If-Range": "x"},
    ],
)
async def test_a_callers_range_or_condition_never_reaches_the_callers_joining_it(
    clock: FakeClock, asked: dict[str, str]
) -> None:
    """Range and the caller's own validators are not in the key: sent upstream, their answer
    (a 206, a 304, a 416) would reach every caller of the call. The call asks for the whole."""
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        await asyncio.sleep(0.01)  # the plain caller joins meanwhile
        if "range" in request.headers:
            return httpx.Response(206, content=b'{"pro', headers={"Content-Range": "bytes 0-4/9"})
        if request.headers.get("if-none-match") == '"v1"':
            return httpx.Response(304, headers={"ETag": '"v1"'})
        return httpx.Response(200, json=GOOD, headers={"ETag": '"v1"'})

    async with transport_to(clock, handler) as client:
        answers = await asyncio.gather(client.get(URL, headers=asked), client.get(URL))
        assert [(a.status_code, a.json()) for a in answers] == [(200, GOOD)] * 2
        clock.advance(6)  # a refresh asked for by the same caller: the held answer's validator
        assert (await client.get(URL, headers=asked)).json() == GOOD
    assert len(seen) == 2 and "range" not in seen[0].headers
    assert "if-none-match" not in seen[0].headers and "if-range" not in seen[1].headers
    assert seen[1].headers.get_list("if-none-match") == ['"v1"']


@pytest.mark.parametrize(
    ("method", "asked"),
    [
        ("GET", {"If-Match": '"v0"'}),
        ("GET", {"If-Unmodified-Since": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        ("POST", {"If-None-Match": "*"}),
        ("POST", {"If-Match": '"v0"'}),
    ],
)
async def test_a_precondition_passes_straight_through_for_its_upstream_to_judge(
    clock: FakeClock, method: str, asked: dict[str, str]
) -> None:
    """A precondition is the upstream's to judge (RFC 9110 13.1): its request is never
    answered from the cache nor joined to another's call, and its 412 is its own."""
    seen: list[httpx.Request] = []
    (name,) = asked

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        await asyncio.sleep(0.01)  # a plain caller in flight meanwhile
        return httpx.Response(412) if name in request.headers else httpx.Response(200, json=GOOD)

    async with transport_to(clock, handler) as client:
        await client.request(method, URL)  # held, fresh
        judged, plain = await asyncio.gather(
            client.request(method, URL, headers=asked), client.request(method, URL)
        )
        again = await client.request(method, URL, headers=asked)
    assert (judged.status_code, plain.status_code, again.status_code) == (412, 200, 412)
    assert len(seen) == 3  # the held answer served the plain caller; each precondition went
