"""What a stored value holds in memory: the bytes it says it has, not its encoder's buffer.

orjson returns its answer in its whole write buffer (4 KiB at least): a small answer kept as
orjson gave it held about 4 KiB in a memory store, twenty times what ``Entry.size`` (and so
``MemoryStore(max_bytes=...)``) counted. Measured with tracemalloc, not timed."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from adcp_stale_cache import JSON, MemoryStore, SharedJsonCodec, Upstream, UpstreamCache
from adcp_stale_cache.core.values import encode

UPSTREAM = Upstream(name="inventory")
VALUE = {"products": [{"product_id": f"p-{i}", "name": "Run of network display"} for i in range(3)]}


def held_per_object(make: Any, count: int = 200) -> float:
    """Bytes tracemalloc sees held per object ``make()`` returns (all kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(count)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(kept) == count
    return held / count


def test_an_encoded_value_holds_about_its_length() -> None:
    for codec in (JSON, SharedJsonCodec()):
        encoded = encode(codec, VALUE, UPSTREAM)
        assert encoded is not None and len(encoded.data) < 300

        def stored(c: Any = codec) -> bytes:
            written = encode(c, VALUE, UPSTREAM)
            assert written is not None
            return written.data

        # A bytes object's header is 33 bytes; allocators round up a little.
        assert held_per_object(stored) < len(encoded.data) + 100


def test_a_memory_store_filled_by_fetch_holds_about_its_entries_sizes() -> None:
    async def fill(n: int) -> tuple[float, int]:
        store = MemoryStore(max_entries=n + 1)
        cache = UpstreamCache(store)

        async def call() -> dict[str, Any]:
            return VALUE

        await cache.fetch(UPSTREAM, "warm", call)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(n):
                await cache.fetch(UPSTREAM, i, call)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        entry = await store.get(cache.store_key(UPSTREAM, 0))
        assert entry is not None
        return held / n, entry.size

    per_entry, size = asyncio.run(fill(500))
    # The entry, its key, labels and the store's bookkeeping: well under 2 KB besides its
    # 173 bytes (it was over 4 KB with orjson's buffer behind every value).
    assert per_entry < size + 2_000, (per_entry, size)


def test_a_codec_reusing_its_buffer_never_changes_what_is_stored() -> None:
    """A codec may answer a bytearray it writes into again: what is stored is a copy, or the
    entry (and its store's byte count) would change under the store."""

    class Reusing:
        buffer = bytearray()

        def dumps(self, value: Any) -> bytes:
            self.buffer[:] = repr(value).encode()
            return self.buffer  # type: ignore[return-value]

        def loads(self, data: bytes) -> Any:
            return data.decode()

    codec = Reusing()
    encoded = encode(codec, "first", UPSTREAM)
    encode(codec, "a longer second value", UPSTREAM)
    assert encoded is not None
    assert encoded.data == b"'first'" and type(encoded.data) is bytes
