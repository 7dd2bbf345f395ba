"""Instruction counts of the hot paths: ``python -m bench --instructions [--check BASELINE]``.

Wall-clock ratios drift by tens of percent on a shared machine; the number of instructions
an operation executes does not. This runs the pass-through, transport-hit and wrapper-hit
operations of ``python -m bench`` (the same setups, floors included) in ONE Python process
under valgrind's callgrind, and counts each path's instructions alone:

- the process runs under ``valgrind --tool=callgrind --zero-before=getppid
  --dump-before=getpgrp``; for each path it warms the operation up, collects the garbage and
  freezes what is left (so a window's collections scan only its own objects), calls
  ``os.getppid()`` (callgrind zeroes its counters), runs N operations, calls
  ``os.getpgrp()`` (callgrind writes a dump of exactly those N operations);
- interpreter start-up, imports and set-up are never counted; one valgrind run measures
  every path; ``PYTHONHASHSEED=0`` makes string hashing, so dict and set layouts, the same
  from run to run.

The figures (``instructions`` in ``--json``) are ratios of two sides, as the wall-clock
figures are, and every side's instructions per operation.

``--check BASELINE`` compares the guarded figures (``GUARDED``) with a committed baseline
(``bench/instructions-baseline.json``) and fails (exit 1) when one is more than 3% worse, or
more than 3% better: the baseline ratchets (a figure named in ``TOLERANCES`` has its own
band). ``--write-baseline PATH`` keeps, figure by figure, the better of the baseline and the
measurement; ``--allow-rise REASON`` records the measurement as it is, with the reason (an
issue that asks for the cost). A baseline records the versions it was measured with: CI
installs those exactly (``--pins``), and the check says when they differ.

This module imports only the standard library at its top: ``--pins`` runs in any Python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "bench" / "instructions-baseline.json"

#: Operations counted per path, after WARMUP operations left uncounted (a count per
#: operation moves by 0.1% at most between 1,000 and 2,000 operations: the fixed cost of a
#: window is a few hundred instructions).
OPERATIONS = 1000
WARMUP = 200
#: How much worse (or better) than the baseline a figure may get before the check fails.
TOLERANCE = 0.03

#: The measured sides, in the order the worker runs them.
SIDES = (
    "passthrough_bare",  # a Starlette JSON route, in process (no sockets)
    "passthrough_wrapped",  # the same behind StaleAdvisoryMiddleware, no advisory
    "transport_floor",  # an httpx call to an in-memory MockTransport
    "transport_hit",  # the same call through CachingTransport, a fresh hit
    "cashews_hit",  # cashews' @cache (mem://), a hit
    "wrapper_hit",  # cache.fetch, a fresh hit (default codec: a copy per caller)
    "wrapper_hit_shared",  # the same with SharedJsonCodec
    "refresh_304_floor",  # an httpx conditional GET answered 304 by a MockTransport
    "refresh_304",  # a held 79 KB answer refreshed through CachingTransport by that 304
)
#: figure -> (numerator, denominator, whether higher is better)
RATIOS = {
    "passthrough_ratio": ("passthrough_bare", "passthrough_wrapped", True),
    "transport_hit_vs_floor": ("transport_hit", "transport_floor", False),
    "wrapper_hit_vs_cashews": ("cashews_hit", "wrapper_hit", True),
    "wrapper_hit_shared_vs_cashews": ("cashews_hit", "wrapper_hit_shared", True),
}
#: What the guard compares, and whether higher is better: the ratios, and our own
#: instructions on each path. A pass-through counts net of its floor, measured in the same
#: run: a floor's own count moves by about 1% with the heap's layout. A transport hit counts
#: whole: it builds its answer for less than the floor's upstream does (no stream decoders),
#: so what it adds is about nothing, and no share of it can be judged. A 304 refresh counts
#: whole too: the flight, the store's write and the answer are most of it.
GUARDED = {
    **{name: higher for name, (_, _, higher) in RATIOS.items()},
    "passthrough_added": False,
    "per_op.transport_hit": False,
    "per_op.wrapper_hit": False,
    "per_op.wrapper_hit_shared": False,
    "per_op.refresh_304": False,
}
#: Figures judged with a wider band, and why: what the same code read from run to run.
#: ``passthrough_added`` is a difference of two counts near a million; the heap's layout moves
#: it by a thousand or more (import-time objects of unrelated modules). Code the path does not
#: run read 34,866 to 37,391 (7.2% apart) in CI and here, from 28f540c to the commit that
#: added this band, where every other figure stayed within 0.5%.
TOLERANCES = {"passthrough_added": 0.08}
TARGETS = {"passthrough_ratio": ">= 0.97", "transport_hit_vs_floor": "<= 1.15",
           "wrapper_hit_vs_cashews": ">= 10", "wrapper_hit_shared_vs_cashews": ">= 10"}  # fmt: skip
#: The distributions whose code runs in the counted paths (their versions move the counts).
PACKAGES = ("httpx", "httpcore", "starlette", "anyio", "cashews", "orjson", "pydantic",
            "pydantic_core", "cachetools", "opentelemetry-api")  # fmt: skip


# -- the worker: runs under valgrind --------------------------------------------------------


async def _sides() -> dict[str, Any]:
    """Every side's operation, set up and warmed as ``python -m bench`` sets them up."""
    from .__main__ import passthrough_ops, revalidate_ops, transport_ops, wrapper_ops

    bare, wrapped = passthrough_ops()
    hit, floor = await transport_ops()
    wrapper = await wrapper_ops()
    refresh, conditional = await revalidate_ops()
    ops = {"passthrough_bare": bare, "passthrough_wrapped": wrapped, "transport_floor": floor,
           "transport_hit": hit, "cashews_hit": wrapper["cashews"],
           "wrapper_hit": wrapper["ours"], "wrapper_hit_shared": wrapper["ours_shared"],
           "refresh_304_floor": conditional, "refresh_304": refresh}  # fmt: skip
    return {side: ops[side] for side in SIDES}


async def _parts() -> dict[str, Any]:
    """The pieces of a fresh shared-codec hit and of a pass-through request, each alone:
    what the floors of docs/benchmarks.md ("Missed targets") are made of."""
    from adcp_stale_cache import SharedJsonCodec, StaleAdvisoryMiddleware, Upstream, UpstreamCache
    from adcp_stale_cache.asgi.middleware import route_path
    from adcp_stale_cache.asgi.peek import RequestPeek
    from adcp_stale_cache.asgi.responders import Answer
    from adcp_stale_cache.core.decision import fresh_as_stored
    from adcp_stale_cache.core.values import decode
    from adcp_stale_cache.pipeline.collector import (
        AdvisoryCollector,
        current_collector,
        enter_request,
        leave_request,
    )
    from adcp_stale_cache.pipeline.lookup import Hit

    from .__main__ import POLICY, SURFACES, json_app, products

    cache, upstream, codec = (
        UpstreamCache(surfaces=SURFACES),
        Upstream(name="inv"),
        SharedJsonCodec(),
    )
    value = {"products": products(3)}

    async def call() -> Any:
        return value

    await cache.fetch(upstream, "k", call, surface="get_products", codec=codec)
    lookups, metrics = cache.lookups, cache.serving.metrics
    found = await lookups.look_up(upstream, "k", "get_products", (), codec)
    assert isinstance(found, Hit)
    entry, key, now = found.entry, found.store_key, lookups.clock()
    middleware = StaleAdvisoryMiddleware(json_app(), surfaces=SURFACES)
    scope = {"type": "http", "method": "POST", "path": "/api/get_products", "root_path": "",
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    body = {"type": "http.response.body", "body": b"{}"}
    collector = AdvisoryCollector()

    async def receive() -> Any:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        pass

    peek = RequestPeek(SURFACES, POLICY, scope, receive, middleware._partition_by, 1 << 20, True)

    async def nothing() -> None:  # what every other part includes: one awaited coroutine
        pass

    async def hit() -> None:
        await cache.fetch(upstream, "k", call, surface="get_products", codec=codec)

    async def look_up() -> None:
        await lookups.look_up(upstream, "k", "get_products", (), codec)

    async def store_read() -> None:
        cache.store.get_now(key)  # as a look-up reads the memory store: in place

    async def store_key() -> None:
        lookups.store_key(upstream, "k", None)

    async def surface() -> None:
        lookups.policy("get_products", None)

    async def request_collector() -> None:
        current_collector()

    async def decision() -> None:
        fresh_as_stored(entry, now, found.surface)  # most hits' whole decision

    async def lookup_record() -> None:
        Hit(found.surface, upstream, key, None, found.entry, value)

    async def shared_decode() -> None:
        decode(codec, entry, upstream)  # type: ignore[arg-type]

    async def hit_event() -> None:
        metrics.hit("get_products", "inv")

    async def serve() -> None:
        cache.serving.hit(found, codec)

    async def new_collector() -> None:
        AdvisoryCollector(None, None, None, True, peek)  # as the middleware builds it

    async def new_peek() -> None:
        RequestPeek(SURFACES, POLICY, scope, receive, middleware._partition_by, 1 << 20, True)

    async def new_response() -> None:
        Answer(collector, peek, send, True, middleware._count_replaced)

    async def surface_of_path() -> None:
        middleware._surface_at(route_path(scope))

    async def context_var() -> None:
        leave_request(enter_request(collector))

    async def receive_hop() -> None:
        peek = RequestPeek(
            SURFACES, POLICY, scope, receive, middleware._partition_by, 1 << 20, True
        )
        await peek.receive()

    async def send_hops() -> None:
        answer = Answer(collector, peek, send, True, middleware._count_replaced)
        await answer.send(start)
        await answer.send(body)

    ops = locals()
    return {name: ops[name] for name in PARTS}


#: The parts ``--parts`` counts (functions of ``_parts``).
PARTS = ("nothing", "hit", "look_up", "store_read", "store_key", "surface", "request_collector",
         "decision", "lookup_record", "serve", "shared_decode", "hit_event", "new_collector",
         "new_peek", "new_response", "surface_of_path", "context_var", "receive_hop", "send_hops")  # fmt: skip


async def _count(operations: int, warmup: int, parts: bool = False) -> None:
    """Each side (or part): warmed, then N operations between the two marker calls."""
    import logging

    logging.getLogger("adcp_stale_cache").setLevel(logging.ERROR)
    await _windows(await (_parts() if parts else _sides()), operations, warmup)


async def _windows(sides: dict[str, Any], operations: int, warmup: int) -> None:
    """Run each side's window between the markers. The markers are libc functions: a call
    of ``os.getppid`` or ``os.getpgrp`` by anything else would zero the counters mid-window
    (hiding the instructions before it) or cut a window in two, so while the sides run the
    ``os`` module answers them without calling libc, and such a call fails the run
    (RuntimeError) instead of moving a count. (A C extension calling libc directly is out
    of this check's reach.)"""
    import asyncio
    import functools
    import gc

    loop = asyncio.get_running_loop()
    zero, dump = os.getppid, os.getpgrp
    stray: list[str] = []
    ppid, pgrp = zero(), os.getpgid(0)  # (before any window: zeroes nothing counted)

    def getppid() -> int:
        stray.append("os.getppid")
        return ppid

    def getpgrp() -> int:
        stray.append("os.getpgrp")
        return pgrp

    os.getppid, os.getpgrp = getppid, getpgrp
    try:
        for side, op in sides.items():
            for _ in range(warmup):
                await op()
            gc.collect()
            gc.freeze()  # this window's collections scan its own objects only
            # The loop's clock stands still in a window: a timer set before it (cashews' sweep
            # wakes every second) never comes due there, or a slower machine counts more.
            loop.time = functools.partial(float, loop.time())  # type: ignore[method-assign]
            zero()  # callgrind: --zero-before=getppid
            for _ in range(operations):
                await op()
            dump()  # callgrind: --dump-before=getpgrp
            del loop.time
            if stray:
                raise RuntimeError(f"{side}: {stray[0]} called while counting: it is a "
                                   "callgrind marker (zero or dump), the counts would be wrong")  # fmt: skip
    finally:
        os.getppid, os.getpgrp = zero, dump


def _worker(operations: int, warmup: int, parts: bool = False) -> None:
    import asyncio

    asyncio.run(_count(operations, warmup, parts))


# -- the parent: runs valgrind, reads its dumps -----------------------------------------------


def _summary(dump: Path) -> int:
    """The instructions (``Ir``) of one callgrind dump: its ``summary:`` line (the
    ``totals:`` line when a dump has none)."""
    totals = None
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
        if line.startswith("totals:"):
            totals = int(line.split()[1])
    if totals is None:
        raise RuntimeError(f"{dump}: no summary or totals line")
    return totals


def valgrind_command(out: Path) -> list[str]:
    """The valgrind command line that counts a worker's windows into dumps under ``out``."""
    return [
        "valgrind", "--tool=callgrind", "--collect-atstart=yes", "--zero-before=getppid",
        "--dump-before=getpgrp", f"--callgrind-out-file={out}/callgrind.out",
    ]  # fmt: skip


def worker_environment() -> dict[str, str]:
    """The worker's whole environment: a fixed one, not the caller's. Every variable shifts
    the heap the counted paths allocate in; ``CI=true`` alone moved ``passthrough_added``
    by 3.8%."""
    return {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}  # fmt: skip


def count(
    operations: int = OPERATIONS, warmup: int = WARMUP, parts: bool = False
) -> dict[str, int]:
    """Instructions per operation of every side (one valgrind run); ``parts``: of every
    part of a hit and of a pass-through request instead (see ``_parts``)."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        env = worker_environment()
        worker = [sys.executable, "-m", "bench.instructions", "--worker",
                  str(operations), str(warmup), str(int(parts))]  # fmt: skip
        run = subprocess.run([*valgrind_command(out), *worker], cwd=ROOT, env=env,
                             capture_output=True, text=True)  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"the counting run failed ({run.returncode}):\n{run.stderr[-3000:]}")
        # Dumps are numbered as written: callgrind.out.1 is the first side's window.
        dumps = sorted(out.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        names = PARTS if parts else SIDES
        if len(dumps) != len(names):
            raise RuntimeError(f"expected {len(names)} dumps, callgrind wrote {len(dumps)}")
        return {name: round(_summary(d) / operations) for name, d in zip(names, dumps, strict=True)}


def figures(per_op: dict[str, int]) -> dict[str, Any]:
    """The ``instructions`` object: each ratio, what our code adds, and every side's count."""
    out: dict[str, Any] = {}
    for name, (numerator, denominator, _) in RATIOS.items():
        out[name] = per_op[numerator] / per_op[denominator]
    out["passthrough_added"] = per_op["passthrough_wrapped"] - per_op["passthrough_bare"]
    out["transport_hit_added"] = per_op["transport_hit"] - per_op["transport_floor"]
    out["refresh_304_added"] = per_op["refresh_304"] - per_op["refresh_304_floor"]
    out["per_op"] = dict(per_op)
    return out


def versions() -> dict[str, Any]:
    """What the counts depend on: Python, the packages on the counted paths, this commit."""
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "adcp_stale_cache", "bench"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()  # fmt: skip
        commit += "+changes" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "machine": platform.machine(), "packages": packages, "commit": commit}  # fmt: skip


def measure(quick: bool = False) -> dict[str, Any]:
    """The ``instructions`` object of ``python -m bench --instructions --json`` (``quick``:
    fewer operations, as ``--quick`` runs: proves the harness runs)."""
    operations, warmup = (100, 50) if quick else (OPERATIONS, WARMUP)
    started = time.monotonic()
    out = figures(count(operations, warmup))
    out["operations"] = operations
    out["seconds_under_valgrind"] = round(time.monotonic() - started, 1)
    out["versions"] = versions()
    return out


# -- the guard ------------------------------------------------------------------------------


def figure(figures: dict[str, Any], name: str) -> Any:
    """A guarded figure by name (``per_op.X``: a side's count), None when absent."""
    if name.startswith("per_op."):
        return figures.get("per_op", {}).get(name.removeprefix("per_op."))
    return figures.get(name)


def _compared(
    measured: dict[str, Any], baseline: dict[str, Any]
) -> Iterator[tuple[str, Any, Any, float]]:
    """Each guarded figure the baseline has: its name, then and now, and how much worse it
    got (negative: better), each in its own direction."""
    for name, higher_is_better in GUARDED.items():
        was, now = figure(baseline, name), figure(measured, name)
        if was is not None:
            yield name, was, now, (was / now - 1) if higher_is_better else (now / was - 1)


def tolerance_of(name: str, tolerance: float = TOLERANCE) -> float:
    """How far ``name`` may move either way: its own band (``TOLERANCES``) or ``tolerance``."""
    return max(tolerance, TOLERANCES.get(name, tolerance))


def _moved(name: str, was: Any, now: Any, change: float, verdict: str) -> str:
    if isinstance(now, float):
        return f"{name}: {was:.4f} -> {now:.4f} ({change:+.1%} {verdict})"
    return f"{name}: {was} -> {now} instructions per operation ({change:+.1%}, {verdict})"


def regressions(
    measured: dict[str, Any], baseline: dict[str, Any], tolerance: float = TOLERANCE
) -> list[str]:
    """The guarded figures worse than ``baseline`` past their band, one line each."""
    return [
        _moved(name, was, now, now / was - 1, f"worse, limit {tolerance_of(name, tolerance):.0%}")
        for name, was, now, worse in _compared(measured, baseline)
        if worse > tolerance_of(name, tolerance)
    ]


def gains(
    measured: dict[str, Any], baseline: dict[str, Any], tolerance: float = TOLERANCE
) -> list[str]:
    """The guarded figures better than ``baseline`` past their band: the baseline must
    move down with them (the ratchet), or a later rise would pass unseen."""
    return [
        _moved(name, was, now, now / was - 1, "better")
        for name, was, now, worse in _compared(measured, baseline)
        if worse < -tolerance_of(name, tolerance)
    ]


def ratcheted(
    measured: dict[str, Any], baseline: dict[str, Any] | None, rise: str | None = None
) -> dict[str, Any]:
    """The baseline to write: ``measured``, with each guarded figure it does worse on kept
    from ``baseline`` (listed under ``kept``), unless a ``rise`` reason allows the rise."""
    out = json.loads(json.dumps(measured))
    if rise is not None:
        out["rise"] = rise
    if rise is not None or baseline is None:
        return out
    out["kept"] = []
    for name, was, _, worse in _compared(measured, baseline):
        if worse > 0:
            if name.startswith("per_op."):
                out["per_op"][name.removeprefix("per_op.")] = was
            else:
                out[name] = was
            out["kept"].append(name)
    return out


def differences(measured: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """The versions that differ from the baseline's (its counts may move with them)."""
    now, then = measured.get("versions", {}), baseline.get("versions", {})
    out = []
    for name in ("python", "implementation", "machine"):
        if now.get(name) != then.get(name):
            out.append(f"{name} {then.get(name)} -> {now.get(name)}")
    for name in sorted(set(now.get("packages", {})) | set(then.get("packages", {}))):
        was, is_ = then.get("packages", {}).get(name), now.get("packages", {}).get(name)
        if was != is_:
            out.append(f"{name} {was} -> {is_}")
    return out


def check(measured: dict[str, Any], baseline_path: str | Path) -> int:
    """Print the comparison with the baseline; 1 when a figure moved past its band."""
    baseline = json.loads(Path(baseline_path).read_text())
    print(
        f"\ninstruction guard against {baseline_path} (measured at {baseline['versions'].get('commit')}):"
    )
    for name in GUARDED:
        was, now = figure(baseline, name), figure(measured, name)
        change = "" if was is None else f"{now / was - 1:+.2%}"
        shown = (f"{was:12.4f} -> {now:<12.4f}" if isinstance(now, float) and was is not None
                 else f"{was!s:>12} -> {now!s:<12}")  # fmt: skip
        print(f"  {name:32} {shown} {change}")
    moved = differences(measured, baseline)
    if moved:
        print(
            "  versions differ from the baseline's (counts may move with them): " + "; ".join(moved)
        )
    found = regressions(measured, baseline)
    if found:
        print(f"REGRESSION: {len(found)} figure(s) worse than the baseline past their band:")
        for line in found:
            print(f"  {line}")
        print(
            "If an issue asks for the cost, record it: python -m bench --instructions "
            "--write-baseline bench/instructions-baseline.json --allow-rise 'issue N: why'"
        )
        return 1
    cheaper = gains(measured, baseline)
    if cheaper:
        print(f"RATCHET: {len(cheaper)} figure(s) better than the baseline past their band:")
        for line in cheaper:
            print(f"  {line}")
        print(
            "Move the baseline down with them: python -m bench --instructions "
            "--write-baseline bench/instructions-baseline.json (it keeps the better figures)"
        )
        return 1
    print(f"instruction guard: no figure more than {TOLERANCE:.0%} worse than the baseline "
          f"({', '.join(f'{n} {t:.0%}' for n, t in TOLERANCES.items())})")  # fmt: skip
    return 0


def pins(baseline_path: str | Path) -> str:
    """``name==version`` for every package the baseline recorded: what CI installs."""
    packages = json.loads(Path(baseline_path).read_text())["versions"]["packages"]
    return " ".join(f"{name}=={version}" for name, version in packages.items() if version)


def report(measured: dict[str, Any]) -> None:
    """The figures as a table (``python -m bench --instructions``)."""
    print(f"\ninstructions (callgrind, {measured['operations']} operations per side, "
          f"{measured['seconds_under_valgrind']} s under valgrind)")  # fmt: skip
    print(f"{'figure':32} {'measured':>12}  target")
    for name in RATIOS:
        print(f"{name:32} {measured[name]:12.3f}  {TARGETS[name]}")
    for name in ("passthrough_added", "transport_hit_added"):
        print(f"{name:32} {measured[name]:12d}  (instructions per operation)")
    for side, value in measured["per_op"].items():
        print(f"{'per_op.' + side:32} {value:12d}  (instructions per operation)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--worker", nargs=3, type=int, metavar=("N", "WARMUP", "PARTS"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--parts", action="store_true",
                        help="the pieces of a hit and of a pass-through request, each alone")  # fmt: skip
    parser.add_argument("--pins", metavar="BASELINE", help="print the baseline's packages as pins")
    parser.add_argument("--check", metavar="BASELINE", help="fail on a move past 3%% (TOLERANCES)")
    parser.add_argument("--write-baseline", metavar="PATH", help="ratchet the baseline at PATH")
    parser.add_argument("--allow-rise", metavar="REASON", help="write the figures as measured")
    parser.add_argument("--json", metavar="PATH", help="write the instructions object")
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker[0], args.worker[1], bool(args.worker[2]))
        return 0
    if args.parts:
        counted = count(parts=True)
        print(
            "instructions per operation, each part alone (each includes 'nothing': one awaited call)"
        )
        for name, value in counted.items():
            print(f"{name:20} {value:9d}")
        return 0
    if args.pins:
        print(pins(args.pins))
        return 0
    return run(args.check, args.write_baseline, args.json, args.allow_rise)


def run(
    check_against: str | None,
    write_baseline: str | None,
    json_path: str | None,
    allow_rise: str | None = None,
) -> int:
    """Measure, print, and check or record as asked; the exit status."""
    measured = measure()
    report(measured)
    if json_path:
        Path(json_path).write_text(json.dumps({"instructions": measured}, indent=2) + "\n")
    if write_baseline:
        path = Path(write_baseline)
        before = json.loads(path.read_text()) if path.exists() else None
        written = ratcheted(measured, before, allow_rise)
        path.write_text(json.dumps(written, indent=2) + "\n")
        kept = written.get("kept")
        print(
            f"baseline written: {write_baseline}" + (f" (kept: {', '.join(kept)})" if kept else "")
        )
    return check(measured, check_against) if check_against else 0


if __name__ == "__main__":
    sys.exit(main())
