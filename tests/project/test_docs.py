"""The documentation site builds with ``mkdocs build --strict``, and shows the tested code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_site_builds_strict_with_every_quickstart_file(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / "quickstart" / "index.html").read_text()
    included = re.findall(
        r'--8<-- "(examples/[\w]+\.py)"', (ROOT / "docs" / "quickstart.md").read_text()
    )
    assert len(included) == 6
    for path in included:
        # Each included file shows up whole: its docstring's first line is on the page.
        first_line = (ROOT / path).read_text().split('"""', 2)[1].splitlines()[0]
        words = re.findall(r"[A-Za-z]{4,}", first_line)
        assert all(word in page for word in words), path
    api = (tmp_path / "api" / "index.html").read_text()
    assert "A freshness-aware cache in front of upstream calls" in api


def test_every_included_example_is_run_by_a_test() -> None:
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for path in re.findall(r'--8<-- "examples/([\w]+)\.py"', pages):
        assert f'"{path}"' in tests or f"{path}.py" in tests, (
            f"examples/{path}.py is run by no test"
        )
