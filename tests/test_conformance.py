"""The official AdCP compliance storyboard ``stale_response_advisory``, run by the official
runner (``npx @adcp/sdk``) against the example seller, over MCP and over A2A.

Runner 6.11.0 counts any non-empty ``errors[]`` as a failed operation, so it marks the
wire-placement step failed even when every one of its validations passes (documented in
``docs/conformance.md``). This test holds the seller to the validations: none skipped,
every one passed, and no step failed for any other reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .deployment import Deployment

pytestmark = pytest.mark.e2e

STORYBOARD = (
    Path(__file__).resolve().parents[2] / "shared" / "conformance" / "stale-response-advisory.yaml"
)
RUNNER = "@adcp/sdk@6.11.0"
KNOWN_RUNNER_LIMITATION = "stale_response_wire_placement"

if not STORYBOARD.is_file():
    pytest.skip(
        f"official storyboard not found at {STORYBOARD} (../shared/ is absent)",
        allow_module_level=True,
    )
if shutil.which("npx") is None:
    pytest.skip("npx (Node.js) is needed for the official AdCP runner", allow_module_level=True)


@pytest.fixture(scope="module")
def seller() -> Iterator[Deployment]:
    flags = ("--freshness-target", "60", "--upstream-timeout", "2", "--test-controller")
    with Deployment(*flags, agents="a") as deployment:
        yield deployment


def run_storyboard(url: str, protocol: str) -> dict[str, Any]:
    command = [
        "npx",
        "--yes",
        RUNNER,
        "storyboard",
        "run",
        url,
        "--file",
        str(STORYBOARD),
        "--json",
        "--protocol",
        protocol,
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 3), run.stderr[-2000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


@pytest.mark.parametrize("protocol", ["mcp", "a2a"])
def test_storyboard_validations_all_pass(seller: Deployment, protocol: str) -> None:
    url = f"{seller.url}/mcp" if protocol == "mcp" else seller.url
    result = run_storyboard(url, protocol)
    steps = [step for phase in result["phases"] for step in phase["steps"]]
    validations = [v for step in steps for v in step["validations"]]
    assert len(steps) == 4 and len(validations) == 22
    assert not [s["step_id"] for s in steps if s.get("skipped")], "no step may be skipped"
    failed = [
        (s["step_id"], v["description"], v.get("error"))
        for s in steps
        for v in s["validations"]
        if not v["passed"]
    ]
    assert not failed
    for step in steps:
        if step["step_id"] == KNOWN_RUNNER_LIMITATION:
            # The runner's own verdict; the message it quotes is our advisory's.
            assert step["passed"] or "Served cached products" in (step.get("error") or "")
        else:
            assert step["passed"], step
