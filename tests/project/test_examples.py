"""The examples users copy from run and do what they say."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import respx

from ..conftest import age_entries

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def readme_quickstart() -> ModuleType:
    """The README's quick start, run as it is written."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    module = ModuleType("readme_quickstart")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    return module


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@respx.mock
async def test_quickstart_serves_stale_with_advisory() -> None:
    quickstart = readme_quickstart()
    products = respx.get("http://inventory.internal/products")
    products.mock(return_value=httpx.Response(200, json={"products": [{"product_id": "p1"}]}))
    transport = httpx.ASGITransport(app=quickstart.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as buyer:
        healthy = (await buyer.post("/api/get_products")).json()
        await age_entries(quickstart.cache.store, 61)  # past the 60 s target
        products.mock(side_effect=httpx.ConnectError("[Errno 111] Connection refused"))
        response = await buyer.post("/api/get_products")
    assert healthy == {"products": [{"product_id": "p1"}]}
    assert response.status_code == 200
    body = response.json()
    assert body["products"] == [{"product_id": "p1"}]
    [advisory] = body["errors"]
    assert advisory["code"] == "STALE_RESPONSE"
    assert advisory["details"]["original_error"]["code"] == "CONNECTION_REFUSED"


def test_generic_wrapper_example_prints_an_advisory() -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "generic_wrapper.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["products"] == [{"product_id": "US-display-1"}]
    [advisory] = out["errors"]
    assert advisory["details"]["upstream"] == {"name": "catalogue-db"}
    assert "5432" not in run.stdout


@respx.mock
async def test_starlette_example_fatal_then_stale() -> None:
    example = load("starlette_seller")
    route = respx.get("https://creative.acme.example/formats.json")
    transport = httpx.ASGITransport(app=example.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller") as buyer:
        route.mock(return_value=httpx.Response(503))
        cold = await buyer.post("/api/list_creative_formats")
        route.mock(return_value=httpx.Response(200, json={"formats": [{"name": "f"}]}))
        warm = await buyer.post("/api/list_creative_formats")
        route.mock(return_value=httpx.Response(502))
        await age_entries(example.cache.store, 301)  # past the 300 s target
        stale = await buyer.post("/api/list_creative_formats")
    assert cold.status_code == 503
    assert cold.json()["adcp_error"]["details"]["original_error"]["code"] == "UPSTREAM_HTTP_503"
    assert warm.json() == {"formats": [{"name": "f"}]}
    assert stale.status_code == 200
    body = stale.json()
    assert body["formats"] == [{"name": "f"}]
    [advisory] = body["errors"]
    assert advisory["field"] == "formats"
    assert advisory["details"]["upstream"]["url"] == "https://creative.acme.example/mcp"
    assert advisory["details"]["original_error"]["code"] == "UPSTREAM_HTTP_502"
