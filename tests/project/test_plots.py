"""The curves' pictures (``python -m bench.plots``): every figure a run wrote is drawn, one
whose keys are missing is left out, and the keys are read as the bench writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the bench extra is needed")

from bench.plots import FIGURES, points, series

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def test_keys_are_read_by_store_and_size() -> None:
    curves = {"hit_us.memory.1000": 8.0, "hit_us.memory.100": 7.0, "hit_us.redis.1000": 90.0,
              "purge_propagation_ms.10": 80.0, "purge_propagation_ms.2": 55.0, "other": 1.0}  # fmt: skip
    assert series(curves, "hit_us") == {
        "memory": [(100, 7.0), (1000, 8.0)],
        "redis": [(1000, 90.0)],
    }
    assert points(curves, "purge_propagation_ms") == [(2, 55.0), (10, 80.0)]


def test_every_figure_with_keys_is_drawn_and_the_rest_left_out(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"curves": {
        "hit_us.memory.1000": 8.8, "hit_us.memory.1000000": 11.5, "hit_us.file.1000": 20.0,
        "memory_bytes_per_entry.1000": 492, "memory_bytes_per_entry.1000000": 506,
        "purge_tag_ms.memory.0.01": 3.0, "purge_tag_ms.memory.1000_of_10000": 2.9,
    }}))  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "bench.plots", str(results), str(tmp_path / "out")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    drawn = {"scaling-hit-cost.png", "scaling-bytes-per-entry.png", "purge-cost.png"}
    assert {p.name for p in (tmp_path / "out").iterdir()} == drawn
    for name in drawn:
        assert (tmp_path / "out" / name).read_bytes().startswith(PNG)
    for name in set(FIGURES) - drawn:
        assert f"{name}: no such figures in this run, left out" in run.stdout


def test_a_file_without_curves_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"passthrough_ratio": 0.95}))
    run = subprocess.run([sys.executable, "-m", "bench.plots", str(results), str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "no curves" in run.stderr
