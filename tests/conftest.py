from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

SHARED_SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "adcp-schemas"


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountingUpstream:
    """An upstream call that counts its calls, can be taken down or slowed, and answers
    ``{"products": [<call number>]}`` (so a test sees which call an answer came from)."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False
        self.delay = 0.0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            raise ConnectionRefusedError
        return {"products": [self.calls]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _schema_dirs() -> list[tuple[str, Path]]:
    dirs = []
    if SHARED_SCHEMAS.is_dir():
        dirs.append(("shared (3.2.0-beta.5)", SHARED_SCHEMAS))
    try:
        import adcp

        bundled = Path(adcp.__file__).parent / "_schemas" / "3.1"
        if (bundled / "error-details" / "stale-response.json").is_file():
            dirs.append(("adcp package (3.1)", bundled))
    except ImportError:
        pass
    return dirs


@pytest.fixture(scope="session")
def error_validators() -> list[tuple[str, Any, Any]]:
    """(source, core/error.json validator, stale-response details validator) per schema copy."""
    import jsonschema

    dirs = _schema_dirs()
    if not dirs:
        pytest.skip("no official AdCP schemas: neither ../shared/adcp-schemas nor the adcp package")
    out = []
    for source, root in dirs:
        error = json.loads((root / "core" / "error.json").read_text())
        details = json.loads((root / "error-details" / "stale-response.json").read_text())
        checker = jsonschema.FormatChecker()
        out.append(
            (
                source,
                jsonschema.Draft7Validator(error, format_checker=checker),
                jsonschema.Draft7Validator(details, format_checker=checker),
            )
        )
    return out


@pytest.fixture
def assert_valid_advisory(error_validators: list[tuple[str, Any, Any]]) -> Any:
    """Validate one emitted STALE_RESPONSE against every official schema copy at hand."""

    def check(error: dict[str, Any]) -> None:
        assert error["code"] == "STALE_RESPONSE"
        for source, error_validator, details_validator in error_validators:
            problems = [e.message for e in error_validator.iter_errors(error)]
            problems += [e.message for e in details_validator.iter_errors(error["details"])]
            assert not problems, f"{source}: {problems}"
        details = error["details"]
        assert details.get("upstream") != {} and details.get("original_error") != {}
        assert isinstance(details["cache_age_seconds"], int)

    return check
