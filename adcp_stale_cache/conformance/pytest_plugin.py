"""A pytest fixture for sellers' own suites: hold your app to the ``STALE_RESPONSE`` rules.

    # conftest.py (at your rootdir)
    pytest_plugins = ["adcp_stale_cache.conformance.pytest_plugin"]

    # test_conformance.py
    async def test_stale_responses(stale_response_conformance):
        await stale_response_conformance(create_app(test_controller=True), transport="mcp")
        await stale_response_conformance(create_app(test_controller=True), transport="a2a")

The fixture's callable takes what :func:`~adcp_stale_cache.conformance.check_seller` takes (an
ASGI app in process, or a URL) and fails the test with the report's lines when a rule fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from . import Report, check_seller


async def assert_conformant(target: Any, **options: Any) -> Report:
    """Check ``target``; fail the current test, one line per rule, unless every rule passed."""
    report = await check_seller(target, **options)
    if not report.passed:
        pytest.fail(report.text(), pytrace=False)
    return report


@pytest.fixture
def stale_response_conformance() -> Callable[..., Awaitable[Report]]:
    """:func:`assert_conformant`, for a test to await."""
    return assert_conformant
