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


def spec_schema_with_refs(name: str, release: str = "3.2") -> Any:
    """A validator of the AdCP schema ``name`` of ``release``, unbundled: its ``$ref`` URLs
    are read from the ``adcp`` package's copy of that release (for schemas it does not
    bundle); skips, saying why, when the package or the schema is absent."""
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    adcp = pytest.importorskip("adcp", reason="the adcp package has the AdCP schemas")
    root = Path(adcp.__file__).parent / "_schemas" / release
    if not (root / name).is_file():
        pytest.skip(f"{name} is not in the installed adcp package's {release} schemas")

    def retrieve(uri: str) -> Any:
        relative = uri.split("/schemas/", 1)[1].split("/", 1)[1]  # past the release
        contents = json.loads((root / relative).read_text())
        return referencing.Resource.from_contents(
            contents, default_specification=referencing.jsonschema.DRAFT7
        )

    schema = json.loads((root / name).read_text())
    return jsonschema.Draft7Validator(
        schema,
        registry=referencing.Registry(retrieve=retrieve),
        format_checker=jsonschema.FormatChecker(),
    )
