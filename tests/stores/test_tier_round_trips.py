"""What the memory tier saves in round trips to the shared store (issue 26), and that the
savings hear every purge: a hot key is read from the shared store once per
``near_max_age_seconds``, not once per request; a flight starts under the tier's recent
reading of the purge count instead of reading it again."""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from adcp_stale_cache import MemoryStore, SurfacePolicy, Surfaces, Upstream, UpstreamCache
from adcp_stale_cache.core.entry import Entry
from adcp_stale_cache.stores import TieredStore
from adcp_stale_cache.stores.purges import UNREADABLE, PurgeWitness

from ..conftest import FakeClock

POLICY = SurfacePolicy(name="get_products", field="products", freshness_target_seconds=600,
                       max_stale_seconds=600)  # fmt: skip
INVENTORY = Upstream(name="inventory-service")


class Shared(MemoryStore):
    """A shared store as another process sees it: its reads and purge-count reads counted."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock=clock)
        self.gets = self.counts = 0
        self.unreadable = False

    async def get(self, key: str) -> Entry | None:
        self.gets += 1
        return await super().get(key)

    async def generation(self) -> int:
        self.counts += 1
        if self.unreadable:
            raise ConnectionError("cut off")
        return await super().generation()


def tiers_on(far: Shared, clock: FakeClock, **options: Any) -> TieredStore:
    tiers = TieredStore(far, MemoryStore(clock=clock), **options)
    tiers.clock = clock  # type: ignore[method-assign]
    return tiers


async def test_a_hot_key_older_than_near_max_age_is_read_from_the_shared_store_once_a_second() -> (
    None
):
    """Before, a memory copy more than ``near_max_age_seconds`` old (one another process
    stored a while ago, or this one stored a second ago) sent every request to the shared
    store: the memory tier answered only within a second of a write."""
    clock = FakeClock()
    far = Shared(clock)
    await far.set("k", Entry(b"v", clock.now - 30), 3600)  # stored 30 s ago, elsewhere
    tiers = tiers_on(far, clock, check_seconds=0.0)
    await tiers.get("other")  # the first reading of the purge count: a copy read along
    far.gets = 0  # with it is read again, as every copy from before a first reading is
    clock.advance(0.1)
    for _ in range(20):  # 2 s of requests, every 100 ms
        entry = await tiers.get("k")
        assert entry is not None and entry.data == b"v" and not entry.revalidate
        clock.advance(0.1)
    assert far.gets == 2  # at 0 s and at 1 s: once per near_max_age_seconds, not 20


async def test_a_purge_heard_of_after_the_copy_matched_sends_the_next_read_to_the_shared_store() -> (
    None
):
    clock = FakeClock()
    far = Shared(clock)
    await far.set("k", Entry(b"v", clock.now - 30), 3600)
    tiers = tiers_on(far, clock, check_seconds=0.0)
    await tiers.get("k")  # matched: the memory copy answers for a second
    clock.advance(0.1)
    await far.purge(lambda key, entry: True, soft=True)  # another process's purge
    clock.advance(0.1)
    entry = await tiers.get("k")
    assert entry is not None and entry.revalidate  # heard of: read through, marked


async def test_a_purge_that_marks_between_its_two_counts_is_heard_after_a_copy_matched() -> None:
    """A shared store that counts a purge before it marks (Redis) counts it again once
    marked: a copy matched in between is read again once the purge is acknowledged."""
    clock = FakeClock()
    far = Shared(clock)
    await far.set("k", Entry(b"v", clock.now - 30), 3600)
    tiers = tiers_on(far, clock, check_seconds=0.0)
    await tiers.get("k")
    far._purges += 1  # the purge's first count: nothing marked yet
    clock.advance(0.1)
    await tiers.get("k")  # hears the count move, reads the unmarked copy
    clock.advance(0.1)
    await tiers.get("k")  # matches it again: noted as matching
    await far.purge(lambda key, entry: True, soft=True)  # marks, and counts again
    clock.advance(0.1)
    entry = await tiers.get("k")
    assert entry is not None and entry.revalidate


async def test_a_flight_starts_under_the_tiers_recent_reading_of_the_purge_count() -> None:
    clock = FakeClock()
    far = Shared(clock)
    tiers = tiers_on(far, clock, check_seconds=60.0)
    assert (
        await PurgeWitness(tiers).flight_count() == (0, 0) and far.counts == 1
    )  # never read: read now
    await tiers.get("k")  # a lookup reads the count (its first reading)
    read = far.counts
    assert (
        await PurgeWitness(tiers).flight_count() == (0, 0) and far.counts == read
    )  # no round trip
    # This process's own purge moves the memory tier's count, read each time.
    await tiers.purge(lambda key, entry: True, soft=True)
    assert await PurgeWitness(tiers).flight_count() == (1, 0) and far.counts == read


async def test_a_write_under_a_reused_reading_is_refused_after_a_purge_elsewhere() -> None:
    """An earlier reading is more cautious, never less: another process's purge after it
    refuses the flight's write."""
    clock = FakeClock()
    far = Shared(clock)
    tiers = tiers_on(far, clock, check_seconds=60.0)
    await tiers.get("k")
    count = await PurgeWitness(tiers).flight_count()
    await far.purge(lambda key, entry: True, soft=False)  # another process, after the reading
    assert not await tiers.set_unless_purged("k", Entry(b"old", clock.now), 60, count)
    assert await far.get("k") is None


async def test_a_count_that_could_not_be_read_is_read_by_the_flight_itself() -> None:
    clock = FakeClock()
    far = Shared(clock)
    tiers = tiers_on(far, clock, check_seconds=60.0)
    await tiers.get("k")
    tiers._checked_at = -60.0  # the next lookup asks again
    far.unreadable = True
    await tiers.get("k")  # its reading fails
    read = far.counts
    assert await PurgeWitness(tiers).flight_count() is UNREADABLE and far.counts == read + 1


async def test_a_miss_reads_the_shared_purge_count_once() -> None:
    """The lookup's reading, then the write's own check (in one step with it): before, the
    flight read the count a second time."""
    far = Shared(time.time)
    cache = UpstreamCache(TieredStore(far, MemoryStore(clock=time.time), check_seconds=60.0),
                          surfaces=Surfaces.of(POLICY), breaker=None)  # fmt: skip

    async def call() -> dict[str, Any]:
        return {"products": []}

    await cache.fetch(INVENTORY, "k", call, surface="get_products")
    assert far.counts == 2  # the lookup's, the write's (MemoryStore.set_unless_purged)


# --- on a real redis-server ---------------------------------------------------------------


@pytest.fixture
def redis_url() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    from ..redis_server import RedisServer

    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
async def redis_stores(redis_url: str) -> AsyncIterator[list[Any]]:

    made: list[Any] = []
    yield made
    for store in made:
        await store.aclose()


async def test_redis_counts_a_purge_again_once_it_marked(
    redis_url: str, redis_stores: list[Any]
) -> None:
    """A process that reads an entry while another process's purge is between its count
    and its mark notes its copy as matching; the purge's second count, once marked, makes
    that process read the entry again (before, it served the unmarked copy as fresh for up
    to ``near_max_age_seconds``)."""
    from adcp_stale_cache.stores.redis import RedisStore

    operator, reader = RedisStore(url=redis_url), RedisStore(url=redis_url)
    redis_stores.extend((operator, reader))
    clock = FakeClock(time.time())
    tiers = TieredStore(reader, MemoryStore(clock=clock), check_seconds=0.0)
    tiers.clock = clock  # type: ignore[method-assign]
    await operator.set("k", Entry(b"v", clock.now - 30), 3600)
    await tiers.get("k")
    client = operator.client
    mget = client.mget
    reads: list[str] = []

    async def marking(*args: Any) -> Any:  # the reader reads while the purge is under way
        clock.advance(0.1)
        await tiers.get("k")  # hears the first count, reads the unmarked copy
        clock.advance(0.1)
        await tiers.get("k")  # notes it as matching
        reads.append("between the counts")
        return await mget(*args)  # the purge reads what it marks, then marks it

    # (Hooked on the purge's read of its batch: the marks go in one pipeline since 9e5f8e8,
    # no EVALSHA of the client's, so a hook there never ran and the test proved nothing.)
    client.mget = marking
    await operator.purge(lambda key, entry: True, soft=True)
    assert reads == ["between the counts"]
    clock.advance(0.1)
    entry = await tiers.get("k")
    assert entry is not None and entry.revalidate


async def test_redis_sends_a_script_by_its_sha_and_its_text_once(
    redis_url: str, redis_stores: list[Any]
) -> None:
    """Scripts go by EVALSHA: a write sends its key, value and labels, not a few hundred
    bytes of Lua each time; the text goes once, when the server lacks it."""
    from adcp_stale_cache.stores.redis import RedisStore

    store = RedisStore(url=redis_url)
    redis_stores.append(store)
    count = await store.generation()
    for i in range(3):
        entry = Entry(b"v", time.time(), ("upstream=inventory",))
        assert await store.set_unless_purged(f"k{i}", entry, 60, count)
    stats = await store.client.info("commandstats")
    assert stats["cmdstat_eval"]["calls"] == 1  # after the server said NOSCRIPT, once
    assert stats["cmdstat_evalsha"]["calls"] == 3


class Gated(Shared):
    """A shared store whose purge-count reading can be held on its way (a slow round trip,
    or one queued behind another operation in the store's thread): what it answers is the
    count when it is let through, not when it was asked."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.gate: Any = None

    async def generation(self) -> int:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        return await super().generation()


async def test_a_copy_matched_while_a_slow_count_reading_was_on_its_way_is_voided_by_it() -> None:
    """Lookup 1 asks for the purge count (its reading held on the way); lookup 2, meanwhile,
    reads the shared copy and notes the memory copy as matching; another process then
    purges (hard); lookup 1's reading returns with that purge. The purge is heard of after
    the note, so the note must be void: before, the purge was timed from lookup 1's start,
    earlier than the note, and the purged copy was served fresh for up to
    ``near_max_age_seconds`` after the purge was heard of."""
    import asyncio

    clock = FakeClock()
    far = Gated(clock)
    await far.set("k", Entry(b"v", clock.now - 30), 3600)  # stored 30 s ago, elsewhere
    tiers = tiers_on(far, clock, check_seconds=0.05)
    await tiers.get("k")  # the first reading; the copy is kept in memory
    clock.advance(2.0)  # the copy's note is old: the next lookups read the shared copy
    await asyncio.sleep(0.06)  # the next lookup reads the count again (monotonic)
    held = far.gate = asyncio.Event()
    first = asyncio.ensure_future(tiers.get("k"))  # its count reading is held
    await asyncio.sleep(0)
    clock.advance(0.01)
    seen = await tiers.get("k")  # no count reading due: reads the shared copy, matches
    assert seen is not None and seen.data == b"v"
    await far.purge(lambda key, entry: True, soft=False)  # another process's hard purge
    clock.advance(0.01)
    held.set()
    await first  # lookup 1's reading returns: the purge is heard of
    clock.advance(0.01)
    assert await tiers.get("k") is None  # the purged copy is not served


async def test_nested_tiers_a_purge_the_outer_tier_hears_first_is_not_outlived_by_its_note() -> (
    None
):
    """Memory in front of a file in front of Redis: each tier reads the shared purge count
    on its own schedule. When the memory tier hears a purge first, it reads the tier beneath,
    which has not heard it yet and answers its own unmarked copy; before, the memory tier
    noted its copy as matching that answer and served it as fresh for up to
    ``near_max_age_seconds`` more, long after the tier beneath heard the purge too."""
    clock = FakeClock()
    far = Shared(clock)  # Redis, as another process sees it
    await far.set("k", Entry(b"v", clock.now - 30), 3600)
    inner = TieredStore(far, MemoryStore(clock=clock), check_seconds=60.0)  # the file tier
    inner.clock = clock  # type: ignore[method-assign]
    outer = tiers_on(inner, clock, check_seconds=0.0)  # type: ignore[arg-type]
    for _ in range(3):  # first readings, then both tiers' copies noted as matching
        await outer.get("k")
        clock.advance(0.1)
    await far.purge(lambda key, entry: True, soft=True)  # another process's purge
    clock.advance(0.1)
    served = [await outer.get("k")]  # the memory tier hears it; the file tier's not due
    clock.advance(0.1)
    served.append(await outer.get("k"))
    inner._checked_at = float("-inf")  # the file tier's own reading is due now (its 50 ms)
    for _ in range(3):
        clock.advance(0.1)
        served.append(await outer.get("k"))
    # Before: all five unmarked (the memory tier's note outlived the file tier's hearing).
    assert all(entry is not None and entry.revalidate for entry in served), served


async def test_redis_counts_a_purge_that_failed_midway_again_for_what_it_marked(
    redis_url: str, redis_stores: list[Any]
) -> None:
    """A purge marks its first batch of 500, then fails on the next (Redis cut off midway):
    the entries it marked are marked in Redis, and a process that noted its copy of one as
    matching between the purge's first count and its mark must hear of it. Before, the
    second count was skipped on a failure: that process served the unmarked copy as fresh
    for up to ``near_max_age_seconds``, though the shared copy was marked."""
    from adcp_stale_cache.ops.control import Selection
    from adcp_stale_cache.stores.redis import RedisStore

    operator, reader = RedisStore(url=redis_url), RedisStore(url=redis_url)
    redis_stores.extend((operator, reader))
    clock = FakeClock(time.time())
    tiers = TieredStore(reader, MemoryStore(clock=clock), check_seconds=0.0)
    tiers.clock = clock  # type: ignore[method-assign]
    for i in range(501):  # two batches: a000..a499, then a500
        await operator.set(f"a{i:03}", Entry(b"v", clock.now - 30, ("tag=t",)), 3600)
    await tiers.get("a000")
    client = operator.client
    mget = client.mget
    batches: list[int] = []

    async def marking(names: Any) -> Any:
        batches.append(len(names))
        if len(batches) == 2:
            raise ConnectionError("cut off midway")  # the second batch: after the first's marks
        clock.advance(0.1)
        await tiers.get("a000")  # hears the first count, reads the unmarked copy
        clock.advance(0.1)
        await tiers.get("a000")  # notes it as matching
        return await mget(names)

    client.mget = marking
    await operator.purge(Selection(frozenset({"tag=t"})), soft=True)
    assert batches == [500, 1] and operator.failures == 1  # failed on the second batch
    assert (await reader.get("a000")).revalidate  # type: ignore[union-attr]  # marked
    clock.advance(0.1)
    entry = await tiers.get("a000")
    assert entry is not None and entry.revalidate
