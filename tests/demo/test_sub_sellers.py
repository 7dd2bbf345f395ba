"""The example seller's sub-sellers: one failing, however it fails, never sinks the others."""

from __future__ import annotations

from typing import Any

import pytest

from adcp_stale_cache import MemoryStore, UpstreamCache
from adcp_stale_cache.demo.seller import seller_surfaces
from adcp_stale_cache.demo.sub_sellers import SubSellers

pytest.importorskip("adcp", reason="the adcp-server extra is needed (the adcp client)")


def answering(answer: Any) -> Any:
    async def call(tool: str, params: dict[str, Any]) -> dict[str, Any]:
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)

    return call


async def test_a_refusing_or_broken_sub_seller_is_named_and_the_others_answer() -> None:
    """What the buyer sees: every product the others had, and one non-fatal
    ``SERVICE_UNAVAILABLE`` per missing sub-seller naming it (its refusal's AdCP code as the
    original error; a failure of ours as ``UPSTREAM_ERROR``), never its own words."""
    names = ("good", "refusing", "terminal", "broken")
    surfaces = seller_surfaces(60, 3600, 2.0, names)
    subs = SubSellers(UpstreamCache(MemoryStore(), surfaces=surfaces),
                      {name: f"http://127.0.0.1:9/{name}/mcp" for name in names})  # fmt: skip
    good, refusing, terminal, broken = subs.agents
    good.call = answering({"products": [{"product_id": "g1"}], "cache_scope": "public"})
    refusing.call = answering({"adcp_error": {"code": "INVALID_REQUEST", "recovery": "correctable",
                                              "message": "bad filter at db-01.internal"}})  # fmt: skip
    terminal.call = answering({"adcp_error": {"code": "ACCOUNT_SUSPENDED", "message": "no",
                                              "recovery": "terminal"}})  # fmt: skip
    broken.call = answering(RuntimeError("a bug at 10.0.0.7"))
    products, errors = await subs.products()
    assert products == [{"product_id": "g1"}]
    assert [e["code"] for e in errors] == ["SERVICE_UNAVAILABLE"] * 3
    assert [e["details"]["upstream"]["name"] for e in errors] == ["refusing", "terminal", "broken"]
    assert [e["details"]["original_error"]["code"] for e in errors] == [
        "INVALID_REQUEST", "ACCOUNT_SUSPENDED", "UPSTREAM_ERROR"]  # fmt: skip
    assert all(e["field"] == "products" and e["recovery"] == "transient" for e in errors)
    assert "db-01" not in repr(errors) and "10.0.0.7" not in repr(errors)
