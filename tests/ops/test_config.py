"""Configuration from files and environment variables: what loads, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adcp_stale_cache import StaleAdvisoryMiddleware
from adcp_stale_cache.ops.config import ConfigError, StaleCacheConfig, load_config
from adcp_stale_cache.ops.config_reference import reference_markdown
from adcp_stale_cache.stores import MemoryStore, TieredStore

if sys.version_info >= (3, 11):
    import tomllib
else:  # the backport the package itself reads TOML with there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "configuration.md").read_text()


def doc_block(language: str, index: int = 0) -> str:
    return DOC.split(f"```{language}\n")[index + 1].split("```", 1)[0]


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "stale-cache.toml"
    path.write_text(doc_block("toml"))
    return path


def test_the_documented_file_loads(toml_file: Path) -> None:
    config = load_config(toml_file, environ={})
    products = config.surfaces["get_products"]
    formats = config.surfaces["list_creative_formats"]
    assert (products.freshness_target_seconds, products.max_stale_seconds) == (60, 3600)
    assert products.upstream_timeout_seconds == 2  # from [defaults]
    assert (formats.freshness_target_seconds, formats.max_stale_seconds) == (300, 86400)
    assert config.upstream("creative-agent-acme").url == "https://creative.acme.example/mcp"
    assert config.upstream("inventory-service").url is None
    registry = config.surface_registry()
    assert registry.for_path("/api/get_products") is products
    assert registry.for_tool("unnamed_tool").freshness_target_seconds == 60
    cache = config.build_cache()
    assert cache.surfaces is config.middleware_options()["surfaces"]  # one registry, shared
    from adcp_stale_cache.stores import TieredStore
    from adcp_stale_cache.stores.sqlite import SqliteStore

    assert isinstance(cache.store, TieredStore)  # memory in front of the file
    assert isinstance(cache.store.near, MemoryStore) and cache.store.near.max_entries == 10000
    assert isinstance(cache.store.far, SqliteStore)
    assert str(cache.store.far.path) == "/var/cache/seller.db"
    assert cache.breakers.policy is not None and cache.breakers.policy.cooldown_seconds == 5


def test_the_documented_python_runs(toml_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(toml_file.parent)
    namespace: dict[str, Any] = {}
    exec(compile(doc_block("python"), "docs/configuration.md", "exec"), namespace)
    middleware = [m for m in namespace["app"].user_middleware if m.cls is StaleAdvisoryMiddleware]
    assert middleware[0].kwargs["surfaces"].find("get_products") is not None


def test_yaml_and_json_give_the_same_config(toml_file: Path, tmp_path: Path) -> None:
    expected = load_config(toml_file, environ={})
    data = tomllib.loads(toml_file.read_text())
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert load_config(tmp_path / "c.yaml", environ={}) == expected
    assert load_config(tmp_path / "c.json", environ={}) == expected


def test_environment_overrides_the_file(toml_file: Path) -> None:
    environ = {
        "ADCP_STALE_CACHE_CONFIG": str(toml_file),
        "ADCP_STALE_CACHE_SURFACES__GET_PRODUCTS__MAX_STALE_SECONDS": "600",
        "ADCP_STALE_CACHE_UPSTREAMS__CREATIVE_AGENT_ACME__TIMEOUT_SECONDS": "1.5",
        "ADCP_STALE_CACHE_DEFAULTS__STALE_ON": "timeout, connection",
        "ADCP_STALE_CACHE_BREAKER__ENABLED": "false",
        "ADCP_STALE_CACHE_STORE__KIND": "tiered",
        "ADCP_STALE_CACHE_STALE_HEADERS": "0",
        "ADCP_STALE_CACHE_TRACING": "none",
        "UNRELATED": "ignored",
    }
    config = load_config(environ=environ)
    assert config.surfaces["get_products"].max_stale_seconds == 600
    assert config.surfaces["list_creative_formats"].max_stale_seconds == 86400  # file's own
    assert {k.value for k in config.surfaces["get_products"].stale_on} == {"timeout", "connection"}
    assert config.upstream("creative-agent-acme").timeout_seconds == 1.5
    assert config.middleware_options()["stale_headers"] is False
    assert config.tracing is None
    cache = config.build_cache()
    assert cache.breakers.policy is None
    assert isinstance(cache.store, TieredStore)


def test_settings_from_code_are_the_base_layer(toml_file: Path) -> None:
    base = {"surfaces": {"sync_creatives": {"freshness_target_seconds": 5}}}
    environ = {"ADCP_STALE_CACHE_SURFACES__SYNC_CREATIVES__MAX_STALE_SECONDS": "7"}
    config = load_config(toml_file, environ=environ, base=base)
    assert config.surfaces["sync_creatives"].freshness_target_seconds == 5
    assert config.surfaces["sync_creatives"].max_stale_seconds == 7
    assert "get_products" in config.surfaces


def test_no_file_gives_the_defaults() -> None:
    assert load_config(environ={}) == StaleCacheConfig()


BAD_FILES = {
    "negative target": (
        "[surfaces.get_products]\nfreshness_target_seconds = -5\n",
        "surfaces.get_products.freshness_target_seconds: Input should be greater than or equal to 0 (got -5)",
    ),
    "negative max-stale in defaults": (
        "[defaults]\nmax_stale_seconds = -1\n[surfaces.a]\n",
        "defaults.max_stale_seconds: Input should be greater than or equal to 0 (got -1)",
    ),
    "fractional target": (
        "[surfaces.a]\nfreshness_target_seconds = 1.5\n",
        "surfaces.a.freshness_target_seconds: Input should be a valid integer",
    ),
    "typo": (
        "[surfaces.a]\nfreshness_target = 60\n",
        "surfaces.a.freshness_target: not a setting (a typo?)",
    ),
    "unknown store kind": ('[store]\nkind = "memcached"\n', "store.kind: Input should be"),
    "unknown failure kind": ('[defaults]\nstale_on = ["timeout", "oops"]\n', "defaults.stale_on.1"),
    "unknown upstream": (
        '[surfaces.a]\nupstreams = ["b"]\n[upstreams.c]\n',
        "surfaces.a.upstreams: unknown upstream 'b' (known: c)",
    ),
    "path on two surfaces": (
        '[surfaces.a]\npaths = ["/x"]\n[surfaces.b]\npaths = ["/x"]\n',
        "a route path belongs to one surface only",
    ),
    "credential-free URL check": (
        '[upstreams.a]\nurl = "ftp://host/x"\n',
        "upstreams.a.url: must be an absolute http(s) URL",
    ),
    "not TOML": ("[surfaces.a\n", "not valid TOML"),
    "surfaces not a table": ('surfaces = "a"\n', "surfaces: expected a table, got str"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_file_values_get_one_line_naming_the_field(name: str, tmp_path: Path) -> None:
    text, expected = BAD_FILES[name]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert expected in message


BAD_ENV = {
    "ADCP_STALE_CACHE_SURFACES__GET_PRODCTS__MAX_STALE_SECONDS": "unknown surface 'get_prodcts' (known: get_products, list_creative_formats)",
    "ADCP_STALE_CACHE_UPSTREAMS__NOPE__URL": "unknown upstream 'nope'",
    "ADCP_STALE_CACHE_STORE__KINDS": "StoreSettings has no field 'kinds'",
    "ADCP_STALE_CACHE_WHATEVER": "not a setting",
    "ADCP_STALE_CACHE_SURFACES__GET_PRODUCTS__MAX_STALE_SECONDS": "surfaces.get_products.max_stale_seconds: Input should be a valid integer",
}


@pytest.mark.parametrize("variable", BAD_ENV)
def test_bad_environment_values_name_the_variable_or_field(variable: str, toml_file: Path) -> None:
    value = "soon" if variable.endswith("MAX_STALE_SECONDS") else "x"
    with pytest.raises(ConfigError) as raised:
        load_config(toml_file, environ={variable: value})
    assert "\n" not in str(raised.value)
    assert BAD_ENV[variable] in str(raised.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.toml: cannot read"):
        load_config(tmp_path / "nope.toml", environ={})
    (tmp_path / "c.ini").write_text("")
    with pytest.raises(ConfigError, match=r"unknown format '.ini'"):
        load_config(tmp_path / "c.ini", environ={})


def test_cli_check_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[surfaces.get_products]\nmax_stale_seconds = -5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADCP_STALE_CACHE_")}
    run = subprocess.run(
        [sys.executable, "-m", "adcp_stale_cache.cli", "config", "check", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert "surfaces.get_products.max_stale_seconds" in run.stderr


def test_reference_page_is_generated_from_the_models() -> None:
    committed = (ROOT / "docs" / "configuration-reference.md").read_text()
    assert committed == reference_markdown(), (
        "run: adcp-stale-cache config reference > docs/configuration-reference.md"
    )
    for field in StaleCacheConfig.model_fields["defaults"].annotation.model_fields:  # type: ignore[union-attr]
        if field != "name":
            assert f"`{field}`" in committed


def test_every_redis_url_form_works_as_the_store_shorthand_and_no_password_is_shown() -> None:
    """Issue 22, Low: the store shorthand refused the Cluster and Sentinel URLs the docs offer,
    quoting the whole URL with its password; a mistyped ``redis_url`` scheme was quoted with
    its password; ``redacted()`` left ``?password=`` in the query."""
    from adcp_stale_cache.ops.config import ConfigError, load_config
    from adcp_stale_cache.stores.redis_urls import redacted

    for url in ("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2:7000",
                "rediss+sentinel://:s3cret@10.0.0.1:26379/mymaster", "rediss://:s3cret@h:6380/0"):  # fmt: skip
        store = load_config(environ={"ADCP_STALE_CACHE_STORE": url}).store
        assert (store.kind, store.redis_url) == ("tiered", url)
        assert "s3cret" not in repr(store)
    for environ in ({"ADCP_STALE_CACHE_STORE": "redsi://:s3cret@h:6379"},
                    {"ADCP_STALE_CACHE_STORE__REDIS_URL": "redsi://:s3cret@h:6379"},
                    {"ADCP_STALE_CACHE_STORE__REDIS_URL": "redis://u:s3cret@[h:1"}):  # fmt: skip
        with pytest.raises(ConfigError) as raised:
            load_config(environ=environ)
        assert "s3cret" not in str(raised.value), raised.value
    assert redacted("redis://h/0?password=s3cret&ssl_cert_reqs=none") == (
        "redis://h/0?password=***&ssl_cert_reqs=none"
    )
    assert redacted("redis://u:s3cret@h/0?Password=s3cret") == "redis://u:***@h/0?Password=***"
    assert redacted("redis://u:s3cret@[h:1") == "redis://u:***@[h:1"
    # Found by the hostile review: passwords holding # or /, ssl_password, no scheme.
    assert redacted("redis://:s3cr#et@host:6379/0") == "redis://:***@host:6379/0"
    assert redacted("redis://:s3/cret@host/0") == "redis://:***@host/0"
    assert redacted("rediss://h/0?ssl_password=s3cret") == "rediss://h/0?ssl_password=***"
    assert redacted("default:s3cret@redis.internal:6379") == "default:***@redis.internal:6379"
    for url in ("redis://:s3cr#et@host:6379/0", "redis://:s3/cret@host/0",
                "default:s3cret@redis.internal:6379", "redis:/default:s3cret@h/0"):  # fmt: skip
        for variable in ("ADCP_STALE_CACHE_STORE", "ADCP_STALE_CACHE_STORE__REDIS_URL"):
            with pytest.raises(ConfigError) as raised:
                load_config(environ={variable: url})
            assert "s3" not in str(raised.value), raised.value
    # Second review: a query value holding an @ (a certificate's path, the password itself).
    for url in ("redis://h:6379/0?password=Top@s3cret", "rediss://h/0?ssl_ca_certs=/ca@corp.pem"
                "&password=s3cret", "redis://:pw@host/0?ssl_certfile=/a@b.pem&password=s3cret"):  # fmt: skip
        assert "s3cret" not in redacted(url), redacted(url)
    from adcp_stale_cache.ops.config import StoreSettings

    with pytest.raises(ValueError) as direct:  # the Python API, not the loader
        StoreSettings(redis_url="redis://:s3cret@h:x/0")
    assert "s3cret" not in str(direct.value)
    from adcp_stale_cache.stores.redis_urls import client_from_url

    assert client_from_url("redis+cluster://[::1],[::1]:7001", socket_timeout=0.1) is not None

    for url in ("redis+sentinel://:s3cr#et@h:26379/mymaster", "redis://:s3cr#et@host:6379/0",
                "redis+cluster://:s3cr#et@h:7000"):  # fmt: skip
        with pytest.raises(ValueError) as failed:
            client_from_url(url, socket_timeout=0.1)
        assert "s3cr" not in str(failed.value), failed.value
