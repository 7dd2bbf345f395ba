"""This tree's hot paths against another commit's, in one run: ``python -m bench.against REV``.

The package as of ``REV`` (``git archive``) is imported beside this one under another name,
and each figure is a paired ratio (this tree / ``REV``, interleaved ABBA pairs, see
``side_by_side``), so a refactor is judged against the code it replaced on the same machine
in the same minute, not against figures published from another day:

- ``hit``: a fresh wrapper hit (``fetch`` of a held key);
- ``outage``: a stale serve with its advisory (the upstream down, breaker open);
- ``miss``: a fetch that calls the upstream and stores the answer;
- ``passthrough``: a request through the middleware with nothing to add (the bench's JSON
  route, in process).

A ratio of 1.00 is "no change"; below is faster. Repeated runs on this shared machine put
the noise at a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from .__main__ import asgi_caller, json_app, side_by_side

ROOT = Path(__file__).resolve().parents[1]


def package_at(rev: str, into: Path) -> ModuleType:
    """The package as of ``rev``, importable as ``adcp_stale_cache_at_rev``."""
    archive = subprocess.run(["git", "archive", rev, "adcp_stale_cache"], cwd=ROOT,
                             capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    old = into / "adcp_stale_cache_at_rev"
    (into / "adcp_stale_cache").rename(old)
    for path in old.rglob("*.py"):  # absolute self-imports, renamed with the package
        text = path.read_text()
        path.write_text(re.sub(r"\badcp_stale_cache\b(?=[.\s])", "adcp_stale_cache_at_rev", text))
    sys.path.insert(0, str(into))
    return importlib.import_module("adcp_stale_cache_at_rev")


def operations(pkg: Any) -> dict[str, Any]:
    """The three hot paths of one version of the package, ready to time."""
    policy = pkg.SurfacePolicy(name="get_products", field="products",
                               freshness_target_seconds=3600, max_stale_seconds=86400)  # fmt: skip
    surfaces = pkg.Surfaces.of(policy)
    upstream = pkg.Upstream(name="inv")
    value = {"products": [{"product_id": f"p{i}", "name": "x" * 40} for i in range(3)]}

    async def call() -> dict[str, Any]:
        return value

    async def down() -> dict[str, Any]:
        raise ConnectionRefusedError

    hits = pkg.UpstreamCache(surfaces=surfaces)
    clock = [0.0]
    stale = pkg.UpstreamCache(surfaces=surfaces, clock=lambda: clock[0])
    misses = pkg.UpstreamCache(surfaces=surfaces, breaker=None)
    counter = [0]

    async def hit() -> None:
        await hits.fetch(upstream, "k", call, surface="get_products")

    async def outage() -> None:
        with pkg.collect_advisories():
            await stale.fetch(upstream, "k", down, surface="get_products")

    async def miss() -> None:
        counter[0] += 1
        await misses.fetch(upstream, counter[0], call, surface="get_products")

    async def prepare() -> None:
        await hit()
        await stale.fetch(upstream, "k", call, surface="get_products")
        clock[0] += 7200  # past the target: every fetch refreshes, fails, serves stale
        for _ in range(3):  # the breaker opens: the outage path answers from cache at once
            await outage()

    passthrough = asgi_caller(pkg.StaleAdvisoryMiddleware(json_app(), surfaces=surfaces))
    return {"hit": hit, "outage": outage, "miss": miss, "passthrough": passthrough,
            "prepare": prepare}  # fmt: skip


async def compare(rev: str, n: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as into:
        import logging

        import adcp_stale_cache as this

        logging.getLogger("adcp_stale_cache").setLevel(logging.ERROR)
        ours, theirs = operations(this), operations(package_at(rev, Path(into)))
        await ours["prepare"]()
        await theirs["prepare"]()
        ratios = {}
        for name in ("hit", "outage", "miss", "passthrough"):
            t_ours, t_theirs = await side_by_side(ours[name], theirs[name], n, rounds)
            ratios[f"{name}_vs_{rev}"] = t_ours / t_theirs
            ratios[f"{name}_us"] = t_ours * 1e6
        return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.against", description=__doc__)
    parser.add_argument("rev", help="the commit to compare against (e.g. HEAD~1)")
    parser.add_argument("-n", type=int, default=20_000, help="operations per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="write the figures as one JSON object")
    args = parser.parse_args(argv)
    figures = asyncio.run(compare(args.rev, args.n, args.rounds))
    for name, figure in figures.items():
        print(f"{name:28} {figure:8.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
