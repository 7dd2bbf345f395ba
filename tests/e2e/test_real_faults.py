"""Socket-level faults against real loopback servers: refused, hang, reset mid-body, TLS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from adcp_stale_cache import (
    CachingTransport,
    MemoryStore,
    SurfacePolicy,
    Surfaces,
    Upstream,
    UpstreamCache,
    collect_advisories,
)
from adcp_stale_cache.demo.processes import free_port

from ..conftest import FakeClock

POLICY = SurfacePolicy(
    name="get_products", field="products", freshness_target_seconds=10, upstream_timeout_seconds=0.5
)
GOOD = b'{"products": [{"product_id": "p1"}]}'
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def healthy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(GOOD), GOOD)
    )
    await writer.drain()
    writer.close()


async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)


async def reset_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n"
        + GOOD[:10]
    )
    await writer.drain()
    writer.transport.abort()


class Switchable:
    """A loopback server whose behaviour the test switches."""

    def __init__(self) -> None:
        self.handler: Handler = healthy
        self.port = free_port()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.handler(reader, writer)


@pytest.fixture
async def server() -> AsyncIterator[Switchable]:
    switchable = Switchable()
    srv = await asyncio.start_server(switchable, "127.0.0.1", switchable.port)
    try:
        yield switchable
    finally:
        srv.close()


async def stale_code(server: Switchable, clock: FakeClock, fault: Handler) -> str:
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    transport = CachingTransport(cache, Upstream(name="inventory-service"), surface="get_products")
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(f"http://127.0.0.1:{server.port}/products")
        clock.advance(11)
        server.handler = fault
        url = f"http://127.0.0.1:{server.port}/products"
        with collect_advisories() as advisories:
            loop = asyncio.get_running_loop()
            started = loop.time()
            response = await client.get(url)
            assert loop.time() - started < 1.5
    assert response.json() == {"products": [{"product_id": "p1"}]}
    [advisory] = advisories.errors()
    return str(advisory["details"]["original_error"]["code"])


async def test_hang(server: Switchable, clock: FakeClock) -> None:
    assert await stale_code(server, clock, hang) == "TIMEOUT"


async def test_reset_mid_body(server: Switchable, clock: FakeClock) -> None:
    assert await stale_code(server, clock, reset_mid_body) == "CONNECTION_RESET"


async def plain_http_reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1)  # a TLS ClientHello: answer in plain HTTP
    writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
    await writer.drain()
    writer.close()


async def test_tls_error(server: Switchable, clock: FakeClock) -> None:
    """https to a server that does not speak TLS: the real handshake error, classified."""
    server.handler = plain_http_reply
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    agent = Upstream(name="creative-agent")

    async def seed() -> dict[str, object]:
        return {"formats": []}

    async def over_tls() -> dict[str, object]:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"https://127.0.0.1:{server.port}/formats")
            return dict(response.json())

    await cache.fetch(agent, "k", seed, surface="get_products")
    clock.advance(11)
    with collect_advisories() as advisories:
        assert await cache.fetch(agent, "k", over_tls, surface="get_products") == {"formats": []}
    assert advisories.errors()[0]["details"]["original_error"]["code"] == "TLS_ERROR"


async def test_refused(clock: FakeClock) -> None:
    switchable = Switchable()
    srv = await asyncio.start_server(switchable, "127.0.0.1", switchable.port)
    cache = UpstreamCache(MemoryStore(clock=clock), surfaces=Surfaces.of(POLICY), clock=clock)
    transport = CachingTransport(cache, Upstream(name="inventory-service"), surface="get_products")
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(f"http://127.0.0.1:{switchable.port}/products")
        srv.close()
        await srv.wait_closed()
        clock.advance(11)
        with collect_advisories() as advisories:
            await client.get(f"http://127.0.0.1:{switchable.port}/products")
    assert advisories.errors()[0]["details"]["original_error"]["code"] == "CONNECTION_REFUSED"
