"""Cache keys: stable digests, remembered for hashable keys, never confusable."""

from __future__ import annotations

from adcp_stale_cache.core.keys import _store_key, cache_key


def test_remembered_keys_equal_computed_ones() -> None:
    for key in ("k", ("partition", "k"), (None, 1), (None, {"brief": "video", "max": 3})):
        parts = key if isinstance(key, tuple) else (key,)
        assert (
            cache_key("ns", "up", key)
            == cache_key("ns", "up", key)
            == _store_key("ns", "up", parts)
        )


def test_equal_comparing_keys_of_other_types_stay_apart() -> None:
    keys = {cache_key("ns", "up", (None, k)) for k in (1, 1.0, True, "1", b"1")}
    assert len(keys) == 5


def test_unhashable_keys_are_digested_by_content() -> None:
    a = cache_key("ns", "up", (None, {"b": 1, "a": [1, 2]}))
    b = cache_key("ns", "up", (None, {"a": [1, 2], "b": 1}))
    assert a == b  # canonical JSON: key order does not matter
    assert a != cache_key("ns", "up", (None, {"a": [2, 1], "b": 1}))
    assert a.startswith("ns:up:")


def test_long_parts_are_digested_not_remembered() -> None:
    from adcp_stale_cache.core.keys import _recent_key

    before = _recent_key.cache_info().currsize
    body = b"x" * 5000
    assert cache_key("ns", "up", ("http", "POST", "/u", body)) == _store_key(
        "ns", "up", ("http", "POST", "/u", body)
    )
    assert _recent_key.cache_info().currsize == before  # a large body is not kept alive
