"""The official AdCP schemas, as the ``adcp`` package bundles them, for checking answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def spec_schema(name: str, release: str = "3.2") -> Any:
    """A validator of the AdCP schema ``name`` of ``release``; skips, saying why, when the
    ``adcp`` package (or that schema in it) is absent."""
    jsonschema = pytest.importorskip("jsonschema")
    adcp = pytest.importorskip("adcp", reason="the adcp package bundles the AdCP schemas")
    path = Path(adcp.__file__).parent / "_schemas" / release / "bundled" / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the installed adcp package's {release} bundle")
    schema = json.loads(path.read_text())
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
