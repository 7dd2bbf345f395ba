"""The curves as pictures: ``python -m bench.plots results.json docs/images``.

Reads the ``curves`` object that ``python -m bench --curves --json results.json`` wrote and
draws one PNG per question a seller asks, named for what it shows:

- ``scaling-hit-cost.png``: a fresh hit's cost against the number of entries, per store;
- ``scaling-bytes-per-entry.png``: what an entry takes in the memory store, against entries;
- ``purge-cost.png``: a purge by tag against what it selects and the cache's size, per store;
- ``redis-round-trips.png``: round trips to Redis per request, by what answered it;
- ``purge-propagation.png``: a purge's p99 time to reach every process, against processes.

A figure whose keys the run did not write is left out (and said). Needs matplotlib (the
``bench`` extra); draws off screen.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

STORES = ("memory", "file", "redis")
#: The targets, drawn as dashed lines where they bound one figure.
ROUND_TRIP_TARGETS = {"memory_hit": 0.05, "redis_hit": 1.0, "miss": 2.0}
PROPAGATION_TARGET_MS = 150.0


def series(curves: dict[str, float], prefix: str) -> dict[str, list[tuple[float, float]]]:
    """``{name: [(x, value), ...]}`` from keys ``<prefix>.<name>.<x>`` (x numeric, sorted)."""
    out: dict[str, list[tuple[float, float]]] = {}
    pattern = re.compile(rf"^{re.escape(prefix)}\.([a-z_]+)\.([0-9.]+)$")
    for key, value in curves.items():
        found = pattern.match(key)
        if found:
            out.setdefault(found[1], []).append((float(found[2]), float(value)))
    return {name: sorted(points) for name, points in out.items()}


def points(curves: dict[str, float], prefix: str) -> list[tuple[float, float]]:
    """``[(x, value), ...]`` from keys ``<prefix>.<x>`` (x numeric, sorted)."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.([0-9.]+)$")
    return sorted(
        (float(m[1]), float(v)) for k, v in curves.items() if (m := pattern.match(k)) is not None
    )


def hit_cost(curves: dict[str, float], axes: Any) -> bool:
    lines = series(curves, "hit_us")
    for store in STORES:
        if store in lines:
            xs, ys = zip(*lines[store], strict=True)
            axes.plot(xs, ys, marker="o", label=store)
    axes.set(xscale="log", xlabel="entries in the store", ylabel="fresh hit (µs)",
             title="A fresh hit's cost as the cache grows")  # fmt: skip
    axes.set_ylim(bottom=0)
    return bool(lines)


def bytes_per_entry(curves: dict[str, float], axes: Any) -> bool:
    found = points(curves, "memory_bytes_per_entry")
    if found:
        xs, ys = zip(*found, strict=True)
        axes.plot(xs, ys, marker="o", label="memory store")
    axes.set(xscale="log", xlabel="entries in the store", ylabel="bytes per entry",
             title="Memory held per entry (small answers)")  # fmt: skip
    axes.set_ylim(bottom=0)
    return bool(found)


def purge_cost(curves: dict[str, float], axes: Any) -> bool:
    """Bars per store: each purge measured, named by what it selected of how many entries
    (a share of the large cache is named so too, and left out where a ``<k>_of_<n>`` figure
    is the same measurement)."""
    found = {k.split(".", 1)[1]: v for k, v in curves.items() if k.startswith("purge_tag_ms.")}
    if not found:
        return False
    sizes = [int(case.split("_of_")[1]) for case in found if "_of_" in case]
    large = max(sizes, default=0)
    named: dict[tuple[int, int], dict[str, float]] = {}  # (selected, of) -> store -> ms
    for key, ms in found.items():
        store, case = key.split(".", 1)
        if "_of_" in case:
            selected, total = (int(part) for part in case.split("_of_"))
        elif large:
            selected, total = round(float(case) * large), large
        else:
            continue
        named.setdefault((selected, total), {}).setdefault(store, ms)
    bars = sorted(named, key=lambda bar: (bar[1], bar[0]))
    stores = [store for store in STORES if any(store in by for by in named.values())]
    width = 0.8 / len(bars)
    for index, bar in enumerate(bars):
        xs = [i + index * width for i in range(len(stores))]
        axes.bar(xs, [named[bar].get(store, 0.0) for store in stores], width,
                 label=f"{bar[0]:,} of {bar[1]:,}")  # fmt: skip
    axes.set_xticks([i + width * (len(bars) - 1) / 2 for i in range(len(stores))], stores)
    axes.set(yscale="log", ylabel="purge by tag (ms)", title="A purge's cost follows its selection")
    return True


def round_trips(curves: dict[str, float], axes: Any) -> bool:
    found = {k.split(".", 1)[1]: v for k, v in curves.items()
             if k.startswith("redis_round_trips.")}  # fmt: skip
    if not found:
        return False
    names = [name for name in ROUND_TRIP_TARGETS if name in found]
    axes.bar(range(len(names)), [found[name] for name in names], color="tab:blue")
    for index, name in enumerate(names):
        target = ROUND_TRIP_TARGETS[name]
        axes.hlines(target, index - 0.4, index + 0.4, colors="tab:red", linestyles="dashed")
        axes.annotate(f"{found[name]:.3g}", (index, found[name]), ha="center", va="bottom")
    axes.set_xticks(range(len(names)), [name.replace("_", " ") for name in names])
    axes.set(ylabel="round trips per request", title="Redis round trips (dashed: target)")
    return True


def propagation(curves: dict[str, float], axes: Any) -> bool:
    found = points(curves, "purge_propagation_ms")
    if found:
        xs, ys = zip(*found, strict=True)
        axes.plot(xs, ys, marker="o", label="p99")
        axes.axhline(PROPAGATION_TARGET_MS, color="tab:red", linestyle="dashed", label="target")
        axes.legend()
    axes.set(xlabel="processes sharing one redis-server", ylabel="time to every process (ms)",
             title="A purge's reach (p99)")  # fmt: skip
    axes.set_ylim(bottom=0)
    return bool(found)


FIGURES: dict[str, Callable[[dict[str, float], Any], bool]] = {
    "scaling-hit-cost.png": hit_cost,
    "scaling-bytes-per-entry.png": bytes_per_entry,
    "purge-cost.png": purge_cost,
    "redis-round-trips.png": round_trips,
    "purge-propagation.png": propagation,
}


def draw(curves: dict[str, float], folder: Path) -> list[Path]:
    """Every figure the curves have keys for, written under ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in FIGURES.items():
        figure, axes = pyplot.subplots(figsize=(6.4, 4.0), dpi=100)
        if plot(curves, axes):
            if axes.get_legend_handles_labels()[0] and axes.get_legend() is None:
                axes.legend()
            axes.grid(True, alpha=0.3)
            figure.tight_layout()
            # No timestamps in the file: the same figures give the same bytes.
            figure.savefig(folder / name, metadata={"Software": None})
            written.append(folder / name)
        else:
            print(f"{name}: no such figures in this run, left out")
        pyplot.close(figure)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots")
    parser.add_argument("results", help="the JSON that python -m bench --curves --json wrote")
    parser.add_argument("folder", help="where the PNG files go (docs/images)")
    args = parser.parse_args(argv)
    curves = json.loads(Path(args.results).read_text()).get("curves")
    if not curves:
        print("no curves in this file: run python -m bench --curves --json PATH", file=sys.stderr)
        return 2
    for path in draw(curves, Path(args.folder)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
