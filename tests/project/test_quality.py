"""The code base stays ruff- and mypy-clean (run with the tests, so CI checks it too)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(
    shutil.which("ruff", path=str(Path(sys.executable).parent)) is None,
    reason="ruff not installed (dev extra)",
)
def test_ruff() -> None:
    ruff = str(Path(sys.executable).parent / "ruff")
    check = run(ruff, "check", "adcp_stale_cache", "tests", "examples", "bench")
    assert check.returncode == 0, check.stdout
    fmt = run(ruff, "format", "--check", "adcp_stale_cache", "tests")
    assert fmt.returncode == 0, fmt.stdout


def test_mypy() -> None:
    result = run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout
