"""Running the official AdCP storyboards (``../shared/conformance/``) with the official
runner, ``npx @adcp/sdk`` (see ``../shared/conformance/README.md``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance"
RUNNER = "@adcp/sdk@6.11.0"


def storyboard(name: str) -> Path:
    """The official storyboard file ``name``; skips, saying why, when it cannot run."""
    path = CONFORMANCE / name
    if not path.is_file():
        pytest.skip(f"official storyboard not found at {path} (../shared/ is absent)")
    if shutil.which("npx") is None:
        pytest.skip("npx (Node.js) is needed for the official AdCP runner")
    return path


def run_storyboard(url: str, protocol: str, path: Path) -> dict[str, Any]:
    """The runner's ``--json`` result of the storyboard at ``path`` against ``url``."""
    command = ["npx", "--yes", RUNNER, "storyboard", "run", url, "--file", str(path), "--json",
               "--protocol", protocol]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 3), run.stderr[-2000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def steps_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step of a run, in order."""
    return [step for phase in result["phases"] for step in phase["steps"]]


def failed_validations(steps: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """``(step, validation, error)`` of every validation that did not pass."""
    return [(s["step_id"], v["description"], v.get("error"))
            for s in steps for v in s["validations"] if not v["passed"]]  # fmt: skip
