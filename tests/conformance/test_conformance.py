"""The official AdCP compliance storyboard ``stale_response_advisory``, run by the official
runner (``npx @adcp/sdk``) against the example seller, over MCP and over A2A.

Runner 6.11.0 counts any non-empty ``errors[]`` as a failed operation, so it marks the
wire-placement step failed even when every one of its validations passes (documented in
``docs/conformance.md``). This test holds the seller to the validations: none skipped,
every one passed, and no step failed for any other reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..deployment import Deployment
from ..storyboards import failed_validations, run_storyboard, steps_of, storyboard

pytestmark = pytest.mark.e2e

KNOWN_RUNNER_LIMITATION = "stale_response_wire_placement"


@pytest.fixture(scope="module")
def seller() -> Iterator[Deployment]:
    flags = ("--freshness-target", "60", "--upstream-timeout", "2", "--test-controller")
    with Deployment(*flags, agents="a") as deployment:
        yield deployment


@pytest.mark.parametrize("protocol", ["mcp", "a2a"])
def test_storyboard_validations_all_pass(seller: Deployment, protocol: str) -> None:
    url = f"{seller.url}/mcp" if protocol == "mcp" else seller.url
    result = run_storyboard(url, protocol, storyboard("stale-response-advisory.yaml"))
    steps = steps_of(result)
    validations = [v for step in steps for v in step["validations"]]
    assert len(steps) == 4 and len(validations) == 22
    assert not [s["step_id"] for s in steps if s.get("skipped")], "no step may be skipped"
    assert not failed_validations(steps)
    for step in steps:
        if step["step_id"] == KNOWN_RUNNER_LIMITATION:
            # The runner's own verdict; the message it quotes is our advisory's.
            assert step["passed"] or "Served cached products" in (step.get("error") or "")
        else:
            assert step["passed"], step
