"""An httpx transport that puts one named upstream behind the cache.

Mount it on the client a seller already uses for that upstream::

    inventory = Upstream(name="inventory-service")
    client = httpx.AsyncClient(
        base_url="http://inventory.internal",
        transport=CachingTransport(cache, inventory, surface="get_products"),
    )

Successful (2xx) answers are cached under a key built from the method, URL, body and the
request headers that vary the answer (credentials); 5xx, 429, timeouts, connection errors and
invalid payloads count as outages and fall back to the cached answer. An upstream is expected
to answer JSON: a 2xx whose content type is not JSON (a ``200 text/html`` maintenance page)
or whose JSON does not parse is an invalid payload, never cached over the good entry
(``expect_json=False`` for an upstream that answers other types). A 4xx is the caller's
problem: it passes through and is never cached.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import httpx
import orjson

from .cache import UpstreamCache
from .failures import InvalidPayload, UpstreamError, UpstreamHTTPError
from .keys import CREDENTIAL_HEADERS
from .policy import SurfacePolicy, Upstream

#: Request headers that make an answer principal-specific, and so are part of the key.
DEFAULT_VARY_HEADERS = CREDENTIAL_HEADERS

# Not kept with a cached answer: they describe one transfer, not the content.
_TRANSFER_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection"}
)


class CachingTransport(httpx.AsyncBaseTransport):
    """Serve one upstream's answers from the cache, stale when the upstream is down."""

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
        self.tags = tuple(tags)  # on every entry: see adcp_stale_cache.control

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer from cache or upstream, as the surface's policy decides."""
        if request.method not in self.methods:
            return await self._transport.handle_async_request(request)
        body = await request.aread()
        key = ("http", request.method, str(request.url), body, *self._varying(request))

        async def call() -> httpx.Response:
            response = await self._transport.handle_async_request(request)
            await response.aread()
            await response.aclose()
            _raise_for_outage(response, self.expect_json)
            if self._validate is not None and response.is_success:
                self._validate(response)
            return response

        return await self.cache.fetch(
            self.upstream, key, call, surface=self.surface, codec=RESPONSES, cacheable=_cacheable,
            tags=self.tags,
        )  # fmt: skip

    def _varying(self, request: httpx.Request) -> list[str]:
        """The values of the vary headers, in order ("" when absent): one pass over the
        request's headers (``Headers.get`` rescans them all for each name)."""
        values = dict.fromkeys(self._vary_raw, b"")
        for name, value in request.headers.raw:
            name = name.lower()
            if name in values:  # a repeated header counts with all its values, kept apart
                values[name] = values[name] + b"\n" + value if values[name] else value
        return [value.decode("latin-1") for value in values.values()]

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._transport.aclose()


def _raise_for_outage(response: httpx.Response, expect_json: bool) -> None:
    if response.status_code >= 500 or response.status_code == 429:
        raise UpstreamHTTPError(response.status_code, retry_after=_retry_after(response))
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


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return content_type == "application/json" or content_type.endswith("+json")


def _cacheable(response: httpx.Response) -> bool:
    cache_control = response.headers.get("cache-control", "").lower()
    return bool(response.is_success) and "no-store" not in cache_control


def _retry_after(response: httpx.Response) -> float | None:
    # RFC 9110: delay-seconds is digits only ("inf", "1e999" and "-1" are not hints); an
    # HTTP date is not worth parsing for a hint.
    value = response.headers.get("retry-after", "").strip()
    return float(value) if value.isascii() and value.isdigit() else None


class ResponseCodec:
    """An httpx response as bytes: status, headers as JSON, then the (decoded) body."""

    def dumps(self, response: httpx.Response) -> bytes:
        """Serialise status, content headers and body."""
        headers = [
            [k, v] for k, v in response.headers.items() if k.lower() not in _TRANSFER_HEADERS
        ]
        head = orjson.dumps([response.status_code, headers])
        return struct.pack(">I", len(head)) + head + response.content

    def loads(self, data: bytes) -> httpx.Response:
        """A new response, as the upstream sent it."""
        (size,) = struct.unpack_from(">I", data)
        status, headers = orjson.loads(data[4 : 4 + size])
        return httpx.Response(status, headers=headers, content=data[4 + size :])


RESPONSES = ResponseCodec()
