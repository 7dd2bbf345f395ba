"""The ``adcp-stale-cache`` console script: the example apps and the demo."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._version import __version__

#: What the example apps (and so the demo) import: the ``examples`` extra's packages.
EXAMPLES_EXTRA = ("uvicorn", "fastapi", "mcp", "a2a")


def _signing_key(value: str) -> tuple[str, str]:
    """``KID=PATH``: a key id and the PEM private key file at ``PATH``."""
    kid, sep, path = value.partition("=")
    if not sep or not kid or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"expected KID=PATH of a PEM file, got {value!r}")
    return kid, path


def _named_jwks(value: str) -> tuple[str, dict[str, Any]]:
    """``NAME=PATH``: a sub-seller's name and the JWKS in the file at ``PATH``."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {value!r}")
    try:
        keys = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from exc
    if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
        raise argparse.ArgumentTypeError(f"{path}: not a JWKS (no keys list)")
    return name, keys


def _agent(value: str) -> tuple[str, str]:
    name, sep, url = value.partition("=")
    if not sep or not name or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {value!r}")
    return name, url


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adcp-stale-cache", description="Serve stale on upstream error, for AdCP sellers."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    example = commands.add_parser("example", help="run one of the example apps")
    apps = example.add_subparsers(dest="app", required=True)

    def served(name: str, help: str) -> argparse.ArgumentParser:
        sub = apps.add_parser(name, help=help)
        sub.add_argument("--host", default="127.0.0.1")
        sub.add_argument("--port", type=int, required=True)
        sub.add_argument(
            "--keep-alive",
            type=float,
            default=5.0,
            metavar="S",
            help="close idle connections after S seconds (uvicorn's timeout_keep_alive): "
            "longer than the clients' own idle expiry, or a request may meet a closing one",
        )
        return sub

    agent = served("creative-agent", "a mock creative agent over MCP at /mcp")
    agent.add_argument("--name", required=True)
    agent.add_argument("--formats", type=int, default=3)

    inventory = served("inventory-service", "a mock inventory service (GET /products)")
    inventory.add_argument("--products", type=int, default=3)
    inventory.add_argument("--name", help="prefix of its product ids")
    inventory.add_argument(
        "--max-age", type=int, metavar="S", help="answer with Cache-Control: max-age=S"
    )

    seller = served("seller", "the example seller (FastAPI)")
    seller.add_argument(
        "--creative-agent", type=_agent, action="append", default=[], metavar="NAME=URL"
    )
    seller.add_argument("--inventory-service", required=True, metavar="URL")
    seller.add_argument(
        "--sub-seller",
        type=_agent,
        action="append",
        default=[],
        metavar="NAME=URL",
        help="another AdCP seller's MCP endpoint: sell its public wholesale feed too "
        "(needs the adcp-server extra)",
    )
    seller.add_argument(
        "--webhook-jwks",
        type=_named_jwks,
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a sub-seller's webhook-signing keys (a JWKS file): receive its signed feed "
        "events at /webhooks/NAME",
    )
    seller.add_argument(
        "--webhook-signing-key",
        type=_signing_key,
        metavar="KID=PATH",
        help="this seller's webhook-signing private key (PEM): buyers register feed webhooks "
        "with sync_accounts and get signed events when the public feed changes (one worker)",
    )
    seller.add_argument("--freshness-target", type=int, default=60, metavar="S")
    seller.add_argument("--max-stale", type=int, default=3600, metavar="S")
    seller.add_argument("--upstream-timeout", type=float, default=5.0, metavar="S")
    seller.add_argument(
        "--redis", metavar="URL", help="share the cache through Redis (two tiers: memory, Redis)"
    )
    seller.add_argument(
        "--cache-file",
        metavar="PATH",
        help="keep the cache in a file too (SQLite): it survives restarts, workers share it",
    )
    seller.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="uvicorn worker processes (share their cache through --cache-file or --redis)",
    )
    seller.add_argument(
        "--schema-version", metavar="V", help="entries written under another version are never read"
    )
    seller.add_argument(
        "--coordinate-refreshes",
        action="store_true",
        help="with --redis: processes refresh an expired key once between them (lease lock)",
    )
    seller.add_argument(
        "--honor-cache-control",
        action="store_true",
        help="let the inventory service's Cache-Control set freshness within the policy",
    )
    seller.add_argument(
        "--admin-token",
        default=os.environ.get("ADCP_STALE_CACHE_ADMIN_TOKEN"),
        metavar="TOKEN",
        help="mount the operator app at /admin, guarded by TOKEN (16+ characters; default: "
        "$ADCP_STALE_CACHE_ADMIN_TOKEN; without one there is no /admin)",
    )
    seller.add_argument(
        "--test-controller",
        action="store_true",
        help="sandbox only: expose comply_test_controller (force_upstream_unavailable)",
    )

    commands.add_parser("demo", help="play the scripted outage story on loopback")

    invalidate = commands.add_parser(
        "invalidate", help="invalidate entries of a shared cache (Redis, a cache file)"
    )
    where = invalidate.add_mutually_exclusive_group(required=True)
    where.add_argument("--redis", metavar="URL", help="the sellers' Redis")
    where.add_argument("--cache-file", metavar="PATH", help="the sellers' cache file")
    invalidate.add_argument("--namespace", default="adcp-stale-cache", help="the Redis prefix")
    invalidate.add_argument("--upstream", metavar="NAME")
    invalidate.add_argument("--surface", metavar="NAME")
    invalidate.add_argument("--tag", action="append", default=[], metavar="TAG")
    invalidate.add_argument(
        "--hard", action="store_true", help="forget the entries (default: soft, refresh next)"
    )

    seller_check = commands.add_parser(
        "check", help="check a running seller against the STALE_RESPONSE rules (conformance)"
    )
    seller_check.add_argument("url", help="the seller's MCP endpoint (…/mcp) or A2A agent URL")
    seller_check.add_argument("--transport", choices=["mcp", "a2a"], required=True)
    seller_check.add_argument("--tool", default="get_products")
    seller_check.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="NAME",
        help="the upstream to force down (repeat: each must get its own advisory); "
        "default: the tool's default upstream",
    )
    seller_check.add_argument(
        "--cache-age",
        type=int,
        default=120,
        metavar="S",
        help="the forced cache_age_seconds (default 120: within most sellers' max-stale)",
    )
    seller_check.add_argument("--auth", metavar="TOKEN", help="a bearer token for every call")
    seller_check.add_argument("--json", metavar="PATH", help="write the report as JSON")
    seller_check.add_argument("--timeout", type=float, default=30.0, metavar="S")

    config = commands.add_parser("config", help="check a configuration, print its reference")
    actions = config.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="validate a file plus ADCP_STALE_CACHE_* variables")
    check.add_argument(
        "file", nargs="?", help="TOML, YAML or JSON (default: $ADCP_STALE_CACHE_CONFIG)"
    )
    actions.add_parser("reference", help="print the configuration reference (Markdown)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    if args.command in ("demo", "example") and not _has_examples_extra():
        print(
            "the example apps need the 'examples' extra: pip install 'adcp-stale-cache[examples]'"
        )
        return 2
    if args.command == "demo":
        from .demo.story import run_demo

        return run_demo()
    if args.command == "config":
        return _config(args)
    if args.command == "invalidate":
        return _invalidate(args)
    if args.command == "check":
        return _check(args)
    return _serve(args)


def _check(args: argparse.Namespace) -> int:
    """Run the conformance check; one line per rule, exit 0 only when every rule passed."""
    import asyncio
    import logging

    from .conformance import check_seller

    logging.getLogger("httpx").setLevel(logging.WARNING)
    report = asyncio.run(
        check_seller(
            args.url,
            transport=args.transport,
            tool=args.tool,
            upstreams=args.upstream,
            cache_age=args.cache_age,
            auth=args.auth,
            timeout=args.timeout,
        )
    )
    print(report.text())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report.to_json(), out, indent=2)
    return 0 if report.passed else 1


def _invalidate(args: argparse.Namespace) -> int:
    """Purge a shared store by upstream, surface and tags; prints how many entries."""
    import asyncio

    from .ops.control import CacheControl, PurgeIncomplete
    from .pipeline.cache import UpstreamCache

    store: Any
    if args.redis:
        from .stores.redis import RedisStore

        store = RedisStore(url=args.redis, prefix=args.namespace)
    else:
        from .stores.sqlite import SqliteStore

        store = SqliteStore(args.cache_file)
    control = CacheControl(UpstreamCache(store, breaker=None, tracing=False))

    async def run() -> int:
        count = await control.invalidate(
            upstream=args.upstream, surface=args.surface, tags=args.tag, soft=not args.hard
        )
        if args.redis:
            await store.aclose()
        else:
            await asyncio.to_thread(store.close)
        return count

    try:
        count = asyncio.run(run())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PurgeIncomplete as exc:  # unreachable, or failed midway: never a quiet "0"
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"invalidated {count} ({'hard' if args.hard else 'soft'})")
    return 0


def _config(args: argparse.Namespace) -> int:
    from .ops.config import ConfigError, load_config

    if args.action == "reference":
        from .ops.config_reference import reference_markdown

        sys.stdout.write(reference_markdown())
        return 0
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    surfaces = ", ".join(config.surfaces) or "none (defaults only)"
    print(f"ok: store={config.store.kind} surfaces={surfaces} upstreams={len(config.upstreams)}")
    return 0


def _has_examples_extra() -> bool:
    """Whether the examples extra is installed, looked up without importing it."""
    return all(importlib.util.find_spec(name) is not None for name in EXAMPLES_EXTRA)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    app: Any
    if args.app == "creative-agent":
        from .demo.creative_agent import create_creative_agent_app

        public_url = f"http://{args.host}:{args.port}/mcp"
        app = create_creative_agent_app(name=args.name, public_url=public_url, formats=args.formats)
    elif args.app == "inventory-service":
        from .demo.inventory_service import create_inventory_app

        app = create_inventory_app(count=args.products, max_age=args.max_age, name=args.name)
    else:
        options = {
            "creative_agents": dict(args.creative_agent),
            "inventory_url": args.inventory_service,
            "sub_sellers": dict(args.sub_seller),
            "webhook_jwks": dict(args.webhook_jwks),
            "webhook_signing_key": args.webhook_signing_key,
            "freshness_target": args.freshness_target,
            "max_stale": args.max_stale,
            "upstream_timeout": args.upstream_timeout,
            "public_url": f"http://{args.host}:{args.port}",
            "test_controller": args.test_controller,
            "redis_url": args.redis,
            "cache_file": args.cache_file,
            "coordinate_refreshes": args.coordinate_refreshes,
            "schema_version": args.schema_version,
            "admin_token": args.admin_token,
            "honor_cache_control": args.honor_cache_control,
        }
        if args.workers > 1 and args.webhook_signing_key:  # subscribers live in one process
            raise SystemExit("--webhook-signing-key needs one worker")
        if args.workers > 1:
            # Each worker process builds the app from the same options (uvicorn imports it).
            os.environ[SELLER_OPTIONS] = json.dumps(options)
            uvicorn.run(
                "adcp_stale_cache.cli:seller_from_environment",
                factory=True,
                host=args.host,
                port=args.port,
                workers=args.workers,
                log_level="warning",
                timeout_keep_alive=args.keep_alive,
            )
            return 0
        app = seller_app(**options)
    uvicorn.run(
        app, host=args.host, port=args.port, log_level="warning", timeout_keep_alive=args.keep_alive
    )
    return 0


#: Where ``--workers`` hands the seller's options to its worker processes.
SELLER_OPTIONS = "ADCP_STALE_CACHE_EXAMPLE_SELLER"


def seller_from_environment() -> Any:
    """The example seller of one ``--workers`` worker process."""
    return seller_app(**json.loads(os.environ[SELLER_OPTIONS]))


def seller_app(
    *,
    redis_url: str | None,
    cache_file: str | None,
    webhook_signing_key: Sequence[str] | None = None,
    **options: Any,
) -> Any:
    """The example seller on a store of ``redis_url`` and ``cache_file``, signing feed events
    with ``webhook_signing_key`` (``(kid, PEM path)``)."""
    from .demo.seller import create_seller_app

    if webhook_signing_key:
        from .demo.feed_events import Signer

        kid, path = webhook_signing_key
        options["webhook_signer"] = Signer.from_pem(kid, Path(path).read_bytes())
    return create_seller_app(store=_store(redis_url, cache_file), **options)


def _store(redis_url: str | None, cache_file: str | None) -> Any:
    """Memory, in front of the file and then Redis when they are given (None: memory only)."""
    from .stores import TieredStore

    far: Any = None
    if redis_url:
        from .stores.redis import RedisStore

        far = RedisStore(url=redis_url)
    if cache_file:
        from .stores.sqlite import SqliteStore

        far = SqliteStore(cache_file) if far is None else TieredStore(far, SqliteStore(cache_file))
    return TieredStore(far) if far is not None else None


if __name__ == "__main__":
    sys.exit(main())
