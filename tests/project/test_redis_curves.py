"""The Redis curves (bench/redis_curves.py) run in quick mode and write every figure; the
round trips they count are exact where the path is deterministic. No timing is asserted
(speed is the bench's to judge)."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from bench.redis_curves import count_round_trips, redis_curves, redis_server

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not installed (apt-get install redis-server; CI installs it)",
)


def test_quick_redis_curves_write_every_figure() -> None:
    figures = redis_curves(quick=True)
    for name in ("memory_hit", "redis_hit", "miss", "miss_coordinated"):
        assert 0 <= figures[f"redis_round_trips.{name}"] < 10, name
    # A Redis hit is at least its GET; a miss at least its GET and its write.
    assert figures["redis_round_trips.redis_hit"] >= 1
    assert figures["redis_round_trips.miss"] >= 2
    for name in ("memory_hit_rate", "redis_hit_rate", "miss_rate", "miss_coordinated_rate"):
        assert figures[f"redis_round_trips.{name}"] > 0, name  # requests per second achieved
    assert 0 < figures["redis_round_trips.miss_bytes_sent"] < 10_000  # key, value, labels
    for n in (2, 5, 10):
        upper = figures[f"purge_propagation_ms.{n}"]
        assert 0 <= figures[f"purge_propagation_ms.{n}.lower"] <= upper < 10_000, n
        assert 0 <= figures[f"purge_propagation_ms.{n}.median"] <= upper, n
        assert figures[f"purge_propagation_ms.{n}.woke_late"] >= 0, n


def test_round_trips_without_purge_count_reads_are_exact() -> None:
    """With the purge count read once per process (check_seconds of an hour), nothing is
    amortised: what a request sends is exactly counted."""

    async def counted() -> dict[str, float]:
        with redis_server() as url:
            return await count_round_trips(
                url, hits=300, keys=50, check_seconds=3600.0, near_max_age_seconds=3600.0
            )

    figures = asyncio.run(counted())
    assert figures["memory_hit"] == 0  # the memory tier answers: Redis never hears of it
    assert figures["redis_hit"] == 1  # one GET
    assert figures["miss"] == 2  # the GET, then the write (a script: one round trip)
    assert figures["miss_coordinated"] == 4  # and the lease: taken, then released
