"""What a release is made of, checked without building it (``.ci/release`` builds it): the
CHANGELOG names the package's version, the wheel takes the package alone, the sdist takes what
the tests need, and PyPI can show the README."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
HATCH_BUILD = PYPROJECT["tool"]["hatch"]["build"]["targets"]


def version() -> str:
    text = (ROOT / "adcp_stale_cache" / "_version.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    assert found, "adcp_stale_cache/_version.py states no __version__"
    return found.group(1)


def test_the_changelog_opens_with_the_packages_version() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings, "CHANGELOG.md has no release section"
    # The newest section is the release's: its version, bare or with its date.
    assert re.fullmatch(rf"{re.escape(version())}( \(\d{{4}}-\d{{2}}-\d{{2}}\))?", headings[0]), (
        f"CHANGELOG.md opens with '## {headings[0]}', the package is {version()}"
    )


def test_the_wheel_takes_the_package_alone() -> None:
    wheel = HATCH_BUILD["wheel"]
    assert wheel["packages"] == ["adcp_stale_cache"]
    # Each of these puts files outside the package into the wheel.
    assert not {"include", "force-include", "shared-data", "sources", "only-include"} & set(wheel)
    package = ROOT / "adcp_stale_cache"
    assert (package / "py.typed").is_file()
    assert sorted(p.name for p in (package / "ops/admin" / "static").iterdir()) == [
        "admin.css", "admin.html", "admin.js", "login.html",
    ]  # fmt: skip


def test_the_sdist_takes_what_the_tests_import_and_read() -> None:
    include = set(HATCH_BUILD["sdist"]["include"])
    assert {"adcp_stale_cache", "tests", "README.md", "CHANGELOG.md", "LICENSE"} <= include
    tests = [p.read_text() for p in (ROOT / "tests").rglob("*.py")]
    imported = {
        name
        for text in tests
        for name in re.findall(r"^\s*(?:from|import) (\w+)", text, re.MULTILINE)
        if (ROOT / name).is_dir()
    }
    assert imported >= {"adcp_stale_cache", "bench"}
    assert imported <= include
    # Paths read from the checkout: the examples are loaded and run by path.
    read = set(re.findall(r'ROOT / "([\w.]+)"', "".join(tests)))
    assert read >= {"examples", "docs", "README.md"}
    assert read - {"pyproject.toml"} <= include  # every sdist has its pyproject.toml
    # test_docs builds the site, which includes examples/ on its pages.
    assert {"docs", "mkdocs.yml", "examples"} <= include


def test_every_claimed_python_has_its_classifier() -> None:
    project = PYPROJECT["project"]
    oldest = re.fullmatch(r">=3\.(\d+)", project["requires-python"])
    assert oldest, project["requires-python"]
    claimed = {
        f"Programming Language :: Python :: 3.{minor}" for minor in range(int(oldest[1]), 14)
    }
    assert claimed <= set(project["classifiers"])
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert project["urls"], "PyPI shows no link"


def test_the_long_description_has_no_link_pypi_cannot_follow() -> None:
    hook = PYPROJECT["tool"]["hatch"]["metadata"]["hooks"]["fancy-pypi-readme"]
    assert [fragment["path"] for fragment in hook["fragments"]] == ["README.md"]
    text = (ROOT / "README.md").read_text()
    for substitution in hook["substitutions"]:
        text = re.sub(substitution["pattern"], substitution["replacement"], text)
    # A link or image still pointing inside the repository, as PyPI would show it.
    relative = re.findall(r"!?\[[^\]]*\]\((?![a-z]+:|#)[^)]*\)", text)
    assert relative == []
    assert "](docs/" not in text
