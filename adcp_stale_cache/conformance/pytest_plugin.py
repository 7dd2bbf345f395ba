"""A pytest fixture for sellers' own suites, ``stale_response_conformance``: enable it with
``pytest_plugins = ["adcp_stale_cache.conformance.pytest_plugin"]``."""

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
