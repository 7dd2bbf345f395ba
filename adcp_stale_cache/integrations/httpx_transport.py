"""An httpx transport that puts one named upstream behind the cache, with HTTP's caching
contract (RFC 9111, RFC 5861): validators always, directives and negative caching opt-in
(docs: HTTP caching contract).
"""

from __future__ import annotations

import datetime
import functools
import struct
import time
import weakref
from collections.abc import Callable, Iterable, Sequence

import httpx
import orjson
from cachetools import LRUCache

from ..core.directives import Directives, parse, vary_of
from ..core.failures import InvalidPayload, UpstreamError, UpstreamHTTPError, retry_after_of
from ..core.keys import CREDENTIAL_HEADERS
from ..core.policy import SurfacePolicy, Upstream
from ..pipeline.cache import UpstreamCache

#: Request headers that make an answer principal-specific, and so are part of the key.
DEFAULT_VARY_HEADERS = CREDENTIAL_HEADERS

# They describe one transfer, not the content.
_TRANSFER_HEADERS = frozenset(
    {b"content-length", b"content-encoding", b"transfer-encoding", b"connection"}
)
# A cookie is set by the exchange that received it: replayed by a hit, it would reset the
# client's cookie jar to a session the upstream may have rotated since, or hand one
# caller's new session to another (nginx and Varnish do not cache such answers at all).
_COOKIE_HEADERS = frozenset({b"set-cookie", b"set-cookie2"})
_NOT_STORED = _TRANSFER_HEADERS | _COOKIE_HEADERS


class CachingTransport(httpx.AsyncBaseTransport):
    """Serve one upstream's answers from the cache, stale when the upstream is down.

    2xx answers are cached; a 5xx, 429, timeout, connection error or non-JSON 2xx (unless
    ``expect_json=False``) is an outage; a 4xx passes through uncached.
    """

    def __init__(
        self,
        cache: UpstreamCache,
        upstream: Upstream,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        surface: str | SurfacePolicy | None = None,
        methods: Iterable[str] = ("GET", "POST"),
        vary_headers: Iterable[str] = DEFAULT_VARY_HEADERS,
        validate: Callable[[httpx.Response], object] | None = None,
        expect_json: bool = True,
        tags: Iterable[str] = (),
        honor_cache_control: bool | None = None,
        negative_ttl_seconds: float | None = None,
        max_learned_vary: int = 10_000,
    ) -> None:
        self.cache = cache
        self.upstream = upstream
        self.surface = surface
        self.methods = frozenset(m.upper() for m in methods)
        self.vary_headers = tuple(h.lower() for h in vary_headers)
        self._vary_raw = tuple(h.encode("latin-1") for h in self.vary_headers)
        self._transport = transport or httpx.AsyncHTTPTransport()
        self._validate = validate
        self.expect_json = expect_json
        self.tags = tuple(tags)  # on every entry: see adcp_stale_cache.ops.control
        self.honor_cache_control = honor_cache_control
        self._honor = honor_cache_control
        if negative_ttl_seconds is not None and not 0 < negative_ttl_seconds < 2**31:
            raise ValueError("negative_ttl_seconds must be a positive number of seconds")
        self.negative_ttl_seconds = negative_ttl_seconds
        # The request headers each (method, URL) varies on, as its answers said.
        self._vary: LRUCache[tuple[str, str], tuple[str, ...]] = LRUCache(max_learned_vary)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer from cache or upstream, as the surface's policy decides."""
        if request.method not in self.methods:
            return await self._transport.handle_async_request(request)
        started = time.perf_counter()
        varying, preconditioned = self._varying(request)
        if preconditioned:  # the upstream's to judge: never answered here, nor joined
            return await self._transport.handle_async_request(request)
        body, url = await request.aread(), str(request.url)
        key: tuple[object, ...] = ("http", request.method, url, body, *varying)
        honor = self._honor
        if honor is None:  # as the surface's policy says: a named one is looked up once
            honor = self.cache.policy_for(self.surface).honor_cache_control
            if self.surface is not None:
                self._honor = honor
        varies = self._vary.get((request.method, url), ()) if honor else ()
        if varies:  # the variant's key: the values of the headers its answers vary on
            key = (*key, tuple(request.headers.get_list(name) for name in varies))

        cookies: Sequence[tuple[bytes, bytes]] = ()  # set by the answer of this request's call

        async def send(held: httpx.Response | None) -> httpx.Response:
            nonlocal cookies
            response = await self._exchange(request, held)
            cookies = [(k, v) for k, v in response.headers.raw if k.lower() in _COOKIE_HEADERS]
            response.extensions[_CALLED_BY] = request  # an answer not stored goes to joiners
            return response

        def cacheable(response: httpx.Response) -> bool:
            if response.extensions.get(_KEEP_HELD):
                return False
            if not (response.is_success or self._negative(response)):
                return False
            if response.status_code == 206:  # a part, under the whole's key
                return False
            if _no_store(response.headers.raw):
                return False
            if honor:  # an answer that varies on headers not in this key is not kept under it
                said = vary_of(response.headers)
                if not set(said) <= set(varies):
                    self._vary[(request.method, url)] = tuple(sorted(said))
                    return False
            return True

        def directives(response: httpx.Response) -> Directives | None:
            if self._negative(response):  # kept briefly, never an outage fallback
                return Directives(max_age=self.negative_ttl_seconds, stale_if_error=0)
            return parse(response.headers) if honor else None

        answer = await self.cache.fetch(
            self.upstream,
            key,
            lambda: send(None),
            surface=self.surface,
            codec=RESPONSES,
            cacheable=cacheable,
            tags=self.tags,
            revalidate=send,
            directives=directives,
        )
        caller = answer.extensions.get(_CALLED_BY)  # None: a copy of what was stored
        if caller is not None and caller is not request:  # another's call's own answer
            # Built as a stored copy is: its body decoded, its cookies another's.
            answer = _read(
                answer.status_code, _without(answer.headers.raw, _NOT_STORED), answer.content
            )
        elif cookies and caller is None:
            answer.headers = httpx.Headers([*answer.headers.raw, *cookies])  # stored without
        # Read already, so httpx never times it: without, reading .elapsed would raise.
        answer.elapsed = datetime.timedelta(0, time.perf_counter() - started)
        return answer

    async def _exchange(
        self, request: httpx.Request, held: httpx.Response | None
    ) -> httpx.Response:
        """One call upstream: conditional when an answer is held, raising on an outage."""
        whole = _whole(request)  # every caller joining the call takes its answer
        outgoing = _conditional(whole, held) if held is not None else whole
        response = await self._transport.handle_async_request(outgoing)
        await response.aread()
        await response.aclose()
        if response.status_code == 304 and held is not None and outgoing is not whole:
            if _validates(response, held):
                return _refreshed(held, response)  # the held body, updated headers
            # RFC 9111 4.3.4: a 304 naming another representation: ask for it whole.
            response = await self._transport.handle_async_request(whole)
            await response.aread()
            await response.aclose()
        _raise_for_outage(response, self.expect_json)
        if self._validate is not None and response.is_success:
            self._validate(response)
        if held is not None and held.is_success and not response.is_success:
            response.extensions[_KEEP_HELD] = True  # an error never replaces a good entry
        return response

    def _negative(self, response: httpx.Response) -> bool:
        # A 403 is kept exactly as a 404: nothing may tell "exists but denied" from "not
        # found" (AdCP's existence-leak uniformity); keys are per caller.
        return self.negative_ttl_seconds is not None and response.status_code in (403, 404, 410)

    def _varying(self, request: httpx.Request) -> tuple[list[str], bool]:
        """The values of the vary headers, in order ("" when absent), and whether the
        request carries a precondition (RFC 9110 13.1: If-Match or If-Unmodified-Since, or a
        validator on a method other than GET, as a POST's ``If-None-Match: *``), in one pass
        over its headers."""
        values: dict[bytes, bytes | None] = dict.fromkeys(self._vary_raw)
        conditions = _PRECONDITIONS if request.method == "GET" else _CONDITIONS
        preconditioned = False
        for name, value in request.headers.raw:
            name = name.lower()
            if name in values:  # a repeated header counts with all its values, kept apart
                held = values[name]  # (an empty first value too: "", "x" is not "x")
                values[name] = value if held is None else held + b"\n" + value
            elif name in conditions:
                preconditioned = True
        varying = ["" if value is None else value.decode("latin-1") for value in values.values()]
        return varying, preconditioned

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._transport.aclose()


def _raise_for_outage(response: httpx.Response, expect_json: bool) -> None:
    if response.status_code >= 500 or response.status_code == 429:
        raise UpstreamHTTPError(response.status_code, retry_after=retry_after_of(response.headers))
    if not response.is_success or response.status_code == 204:
        return
    if not _is_json(response):
        if expect_json:
            raise InvalidPayload("upstream answered 2xx with a content type that is not JSON")
        return
    try:
        payload = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise InvalidPayload("upstream answered 2xx with a body that is not JSON") from None
    if isinstance(payload, dict) and isinstance(payload.get("adcp_error"), dict):
        code = payload["adcp_error"].get("code")
        raise UpstreamError(code if isinstance(code, str) else "UPSTREAM_ERROR")


def _no_store(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a Cache-Control says ``no-store``, read raw (see :func:`_etag`)."""
    for name, value in headers:
        if name.lower() == b"cache-control" and b"no-store" in value.lower():
            return True
    return False


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


def _whole(request: httpx.Request) -> httpx.Request:
    """``request`` asking for the whole current answer: without a range or a validator of
    the caller's own, which would make its answer (a 206, a 304) wrong for the callers
    joining its call and for the key it is stored under. RFC 9110 14.2 lets a cache ignore
    a range; the held answer's validators take the place of the caller's."""
    raw = request.headers.raw
    if not any(name.lower() in _PARTIAL for name, _ in raw):
        return request
    headers = [(name, value) for name, value in raw if name.lower() not in _PARTIAL]
    whole = httpx.Request(request.method, request.url, headers=headers,
                          stream=request.stream, extensions=request.extensions)  # fmt: skip
    whole.read()
    return whole


# What a caller may ask for that only its own answer could hold.
_PARTIAL = frozenset({b"range", b"if-range", b"if-none-match", b"if-modified-since"})


# Preconditions its upstream judges (see CachingTransport._varying).
_PRECONDITIONS = frozenset({b"if-match", b"if-unmodified-since"})
_CONDITIONS = _PRECONDITIONS | {b"if-none-match", b"if-modified-since"}


def _conditional(request: httpx.Request, held: httpx.Response) -> httpx.Request:
    validators = [
        (_ASKS[name.lower()], value)
        for name, value in held.headers.raw
        if name.lower() in _ASKS  # a repeated one is sent as the held answer repeated it
    ]
    if not validators or not held.is_success:
        return request
    sent = {name.lower() for name, _ in validators}  # in place of the caller's own
    headers = [(name, value) for name, value in request.headers.raw if name.lower() not in sent]
    # Built on the request's own stream (read already) as httpx copies one for a redirect.
    conditional = httpx.Request(
        request.method,
        request.url,
        headers=headers + validators,
        stream=request.stream,
        extensions=request.extensions,
    )
    conditional.read()
    return conditional


# The validators of a held answer, and the request headers that send them back.
_ASKS = {b"etag": b"if-none-match", b"last-modified": b"if-modified-since"}

# Marks an answer that must not replace the entry held for its key.
_KEEP_HELD = "adcp_stale_cache.keep_held"
# Names the request whose call received an answer.
_CALLED_BY = "adcp_stale_cache.called_by"


# Until the transport times its answer.
_NO_TIME = datetime.timedelta(0)


def _without(
    headers: list[tuple[bytes, bytes]], names: frozenset[bytes] | set[bytes]
) -> list[tuple[bytes, bytes]]:
    """``headers`` less those ``names`` names (lower case)."""
    return [(name, value) for name, value in headers if name.lower() not in names]


# Never taken from a 304 into the stored answer (RFC 9111 3.2): they describe its transfer.
_NOT_UPDATED = _TRANSFER_HEADERS | {b"content-type"}


def _validates(not_modified: httpx.Response, held: httpx.Response) -> bool:
    """True when a 304 names the held answer (RFC 9111 4.3.4): no ETag, or the held one
    (weak comparison)."""
    said = _etag(not_modified.headers.raw)
    if said is None:
        return True
    kept = _etag(held.headers.raw)
    return kept is not None and said.removeprefix(b"W/") == kept.removeprefix(b"W/")


def _etag(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The ETag, stripped (repeated, its values joined as ``Headers.get`` joins them): read
    raw, as a lookup on a new ``httpx.Headers`` first decodes every header."""
    values = [value for name, value in headers if name.lower() == b"etag"]
    return b", ".join(values).strip() if values else None


def _refreshed(held: httpx.Response, not_modified: httpx.Response) -> httpx.Response:
    """The held answer, its headers updated in place by the 304 that validated it (its
    Content-Length last, where a stored copy reads it)."""
    updates = [(k, v) for k, v in not_modified.headers.raw if k.lower() not in _NOT_UPDATED]
    replaced = {name.lower() for name, _ in updates}
    raw = held.headers.raw  # (a list built on each read)
    kept = _without(raw, replaced | _COOKIE_HEADERS | {b"content-length"})
    length = [(k, v) for k, v in raw if k.lower() == b"content-length"]
    held.headers = httpx.Headers(kept + updates + length)
    _RENEWED.add(held)
    return held


#: Held answers 304s renewed, while they live: what the codec hands over.
_RENEWED: weakref.WeakSet[httpx.Response] = weakref.WeakSet()


class ResponseCodec:
    """An httpx response as bytes: status, headers as JSON, then the (decoded) body."""

    #: Every write loads back: a store need not check it (a third of a 304's work).
    round_trips = True

    def hands_over(self, response: httpx.Response) -> bool:
        """True for a held answer a 304 renewed: read back from the store for this refresh
        alone, it reads as its copy would, but for the 304's cookies (the transport keeps them
        to its own request). Any other answer, the upstream's own object, is copied."""
        return response in _RENEWED

    def dumps(self, response: httpx.Response) -> bytes:
        """Serialise status, content headers (each as sent: a repeated one repeated, its bytes
        as Latin-1; no cookie set) and body."""
        stored = _without(response.headers.raw, _NOT_STORED)
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in stored]
        head = orjson.dumps([response.status_code, headers])
        return struct.pack(">I", len(head)) + head + response.content

    def loads(self, data: bytes) -> httpx.Response:
        """A new response, as the upstream sent it (no cookie: an earlier build stored them)."""
        (size,) = struct.unpack_from(">I", data)
        head = data[4 : 4 + size]
        status, headers = orjson.loads(head)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if head.lower().find(b"set-cookie") >= 0:  # (find: `in` is twice as slow on bytes)
            raw = _without(raw, _COOKIE_HEADERS)
        return _read(status, raw, data[4 + size :])

    def content(self, data: bytes) -> bytes:
        """The status and body, without the headers a revalidation changes (``Date``)."""
        (size,) = struct.unpack_from(">I", data)
        status, _ = orjson.loads(data[4 : 4 + size])
        return str(status).encode() + b"\n" + data[4 + size :]


def _read_already(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
    """What ``httpx.Response(content=body)`` makes, without running a body held in memory
    through httpx's stream decoders: they cost most of a hit (38 of 45 us at 1 KB). The
    headers are read raw: a lookup on a new ``httpx.Headers`` costs more than the scan."""
    sized = False
    for name, _ in headers:
        name = name.lower()
        if name == b"content-encoding":  # not written by dumps: let httpx decode
            return _read_by_httpx(status, headers, body)
        sized = sized or name == b"content-length"
    if body and not sized:  # where httpx puts it
        headers = [*headers, (b"Content-Length", b"%d" % len(body))]
    response = httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))
    response._content = body  # read: what Response.read() fills, and then never reads again
    response._elapsed = _NO_TIME  # the transport's to set: a slot added later slowed httpx
    response.is_stream_consumed = response.is_closed = True
    return response


def _read_by_httpx(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
    return httpx.Response(status, headers=headers, content=body)


@functools.cache
def _reads_alike() -> bool:
    """Whether this httpx leaves :func:`_read_already`'s responses as it leaves its own."""
    try:
        return _alike()
    except Exception:  # an httpx that no longer builds them so (read-only state, say)
        return False


# What differs by design: the stream and its decoder (never run), headers (compared raw),
# and the time (httpx sets it as it closes a stream, which a response read already never is).
_UNCOMPARED = frozenset({"stream", "_decoder", "headers", "_elapsed"})


def _alike() -> bool:
    for body in (b"", b'{"products": []}'):
        headers = [(b"content-type", b"application/json"), (b"etag", b'"v1"')]
        ours, its = _read_already(200, headers, body), _read_by_httpx(200, headers, body)
        ours_state, its_state = vars(ours), vars(its)
        if ours_state.keys() - _UNCOMPARED != its_state.keys() - _UNCOMPARED:
            return False
        for name, value in its_state.items():
            if name not in _UNCOMPARED and ours_state[name] != value:
                return False
        if ours.headers.raw != its.headers.raw or type(ours.stream) is not type(its.stream):
            return False
    return True


def _read(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
    """A stored answer's response: built read already where this httpx allows it, else by
    httpx (checked on first use, not at import: no work for those who never hit)."""
    return (_read_already if _reads_alike() else _read_by_httpx)(status, headers, body)


RESPONSES = ResponseCodec()
