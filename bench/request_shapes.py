"""Generate ``adcp_stale_cache/adcp/request_shapes.py`` from AdCP's request schemas:
``python -m bench.request_shapes [SCHEMAS_ROOT] [--check]``.

SCHEMAS_ROOT holds one folder per release (``3.1/``, ``3.2/``), each with the release's
``bundled/`` schemas; the default is the copy the installed ``adcp`` package ships. What is
read of each tool's request schema:

- an array is a *set* (order and repeats mean nothing) when every schema that may describe it
  says ``uniqueItems: true`` and none says its order counts ("priority order", say), or the
  spec's caching text names it a set (:data:`SPEC_SETS`); every other array is a sequence;
- a member's ``default``, when every schema that may describe it gives the same one;
- the release's top-level request members, for the feed token's scope.

The package never reads a schema at run time; ``tests/test_request_shapes.py`` regenerates
the table and compares.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The request schema of each tool whose requests the cache keys and tokens scope. A new
#: tool plugs in here (and is regenerated): its name is then a ``tool=`` of ``canonical``.
TOOLS = {
    "get_products": "media-buy/get-products-request.json",
    "list_products": "media-buy/list-products-request.json",
    "get_signals": "signals/get-signals-request.json",
}

#: The releases read (the bundled folder of each).
RELEASES = ("3.0", "3.1", "3.2")

#: Arrays the spec's "Filter canonicalisation" text names sets (get_products.mdx, wholesale
#: feed versioning), though the schema says no ``uniqueItems``: by leaf name, under filters.
SPEC_SETS = frozenset({"channels", "format_kinds", "format_option_refs", "required_metrics"})
FILTER_PARENTS = frozenset({"filters", "offer_filters"})

#: An array whose description says this is an ordered one, ``uniqueItems`` or not.
ORDERED = re.compile(r"\border\b|\bordered\b|\bpriority\b|\branked\b", re.IGNORECASE)

#: A member without a default (None is a default a schema may give).
_NONE = object()

OUTPUT = Path(__file__).resolve().parent.parent / "adcp_stale_cache" / "adcp/request_shapes.py"


def default_root() -> Path:
    import adcp  # the dev venv has it; the package itself never imports this

    return Path(adcp.__file__).parent / "_schemas"


class Walker:
    """Every (path, schema) a request schema allows, each ``$ref`` resolved: in its own
    document (``#/...``), or in ``root`` (``/schemas/...``, the unbundled copies; a file
    not there is skipped)."""

    def __init__(self, document: dict[str, Any], root: Path | None = None) -> None:
        self.document, self.root = document, root
        self.files: dict[Path, dict[str, Any] | None] = {}

    def resolve(self, ref: str, document: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
        """What ``ref`` (met in ``document``) points at, and the document it is in."""
        where, _, fragment = ref.partition("#")
        if where:
            if self.root is None or not where.startswith("/schemas/"):
                return None
            path = self.root / where.removeprefix("/schemas/")
            if path not in self.files:
                self.files[path] = json.loads(path.read_text()) if path.exists() else None
            found = self.files[path]
            if found is None:
                return None
            document = found
        node: Any = document
        for part in filter(None, fragment.split("/")):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, document

    def default_of(self, schema: Any, document: dict[str, Any]) -> Any:
        """A member's default: its schema's, or the one of what it refers to (``$ref``,
        ``allOf``)."""
        if not isinstance(schema, dict):
            return _NONE
        if "default" in schema:
            return schema["default"]
        target = self.resolve(schema["$ref"], document) if "$ref" in schema else None
        if target is not None:
            found = self.default_of(*target)
            if found is not _NONE:
                return found
        for sub in schema.get("allOf", []):
            found = self.default_of(sub, document)
            if found is not _NONE:
                return found
        return _NONE

    def walk(
        self,
        schema: Any,
        path: tuple[str, ...],
        document: dict[str, Any] | None = None,
        seen: frozenset[tuple[int, str]] = frozenset(),
    ) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
        if not isinstance(schema, dict):
            return
        document = self.document if document is None else document
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.resolve(ref, document)
            mark = (id(target[1]) if target else 0, ref)
            if target is not None and mark not in seen:  # recursive: its paths are walked
                yield from self.walk(target[0], path, target[1], seen | {mark})
        yield path, schema
        for name, sub in schema.get("properties", {}).items():
            yield (*path, name), {"@default": self.default_of(sub, document)}
            yield from self.walk(sub, (*path, name), document, seen)
        for key in ("additionalProperties", "patternProperties"):
            subs = schema.get(key)
            if isinstance(subs, dict):
                for sub in subs.values() if key == "patternProperties" else [subs]:
                    yield from self.walk(sub, (*path, "@any"), document, seen)
        if isinstance(schema.get("items"), dict):
            yield from self.walk(schema["items"], (*path, "@items"), document, seen)
        for key in ("oneOf", "anyOf", "allOf"):
            for sub in schema.get(key, []):
                yield from self.walk(sub, path, document, seen)
        for key in ("then", "else"):  # never "if" or "not": conditions, not descriptions
            if isinstance(schema.get(key), dict):
                yield from self.walk(schema[key], path, document, seen)


def is_array(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind) or "items" in schema


def shape_of(document: dict[str, Any], root: Path | None = None) -> dict[str, Any]:
    """The tree of set arrays and defaults of one request schema (see the module), its
    ``/schemas/`` references read from ``root``."""
    verdicts: dict[tuple[str, ...], list[bool]] = {}
    defaults: dict[tuple[str, ...], list[Any]] = {}
    for path, schema in Walker(document, root).walk(document, ()):
        if "@default" in schema:  # a member's occurrence (see Walker.walk)
            defaults.setdefault(path, []).append(schema["@default"])
        elif is_array(schema):
            named = len(path) >= 2 and path[-1] in SPEC_SETS and path[-2] in FILTER_PARENTS
            ordered = bool(ORDERED.search(str(schema.get("description", ""))))
            verdicts.setdefault(path, []).append(
                named or (schema.get("uniqueItems") is True and not ordered)
            )
    tree: dict[str, Any] = {}
    for path, says in verdicts.items():
        if path:  # False too, for what releases agree on (pruned before it is written)
            _node(tree, path)["@set"] = all(says)
    for path, values in defaults.items():
        texts = {"-" if v is _NONE else json.dumps(v, sort_keys=True) for v in values}
        if len(texts) == 1 and values[0] is not _NONE:
            _node(tree, path)["@default"] = values[0]
    return tree


def _node(tree: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = tree
    for part in path:
        node = node.setdefault(part, {})
    return node


def agreed(trees: list[dict[str, Any]], releases: int | None = None) -> dict[str, Any]:
    """What every release agrees on: a set where each release that has the array calls it
    one, a default where every one of the ``releases`` gives the same one (a member some
    release lacks has no default there: an unpinned request keeps it)."""
    releases = len(trees) if releases is None else releases
    out: dict[str, Any] = {}
    for key in sorted({key for tree in trees for key in tree}):
        having = [tree[key] for tree in trees if key in tree]
        if key == "@set":
            out[key] = all(having)
        elif key == "@default":
            texts = {json.dumps(v, sort_keys=True) for v in having}
            if len(having) == releases and len(texts) == 1:
                out[key] = having[0]
        else:
            sub = agreed(having, releases)
            if sub:
                out[key] = sub
    return out


def pruned(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` without what is a sequence anyway (``@set: False``) and empty nodes."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if key == "@set":
            if value:
                out[key] = True
        elif key == "@default":
            out[key] = value
        else:
            sub = pruned(value)
            if sub:
                out[key] = sub
    return out


def generate(root: Path) -> str:
    shapes: dict[str, dict[str, Any]] = {}
    members: dict[str, dict[str, list[str]]] = {}
    for tool, relative in TOOLS.items():
        per_release: dict[str, Any] = {}
        for release in RELEASES:
            path = root / release / "bundled" / relative
            if not path.exists():
                continue  # the tool is not in this release
            document = json.loads(path.read_text())
            per_release[release] = shape_of(document)
            members.setdefault(tool, {})[release] = sorted(document.get("properties", {}))
        per_release["any"] = agreed(list(per_release.values()))
        shapes[tool] = {release: pruned(tree) for release, tree in per_release.items()}
    text = TEMPLATE.format(
        releases=", ".join(RELEASES),
        shapes=json.dumps(shapes, sort_keys=True, indent=1),
        members=json.dumps(members, sort_keys=True, indent=1),
    )
    python = text.replace(": true", ": True").replace(": false", ": False")
    return formatted(python.replace(": null", ": None"))


def formatted(text: str) -> str:
    """``text`` as ``ruff format`` leaves it (the project's style; ruff is a dev tool)."""
    command = [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(OUTPUT), "-"]
    done = subprocess.run(
        command,
        input=text,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=OUTPUT.parent.parent,
    )
    return done.stdout


TEMPLATE = '''"""Which arrays of a request are sets and which members have defaults, per tool and AdCP
release ({releases}; ``any``: what every release agrees on). Generated from the request
schemas by ``python -m bench.request_shapes``: do not edit.

A node maps a member name to its node; ``@items`` is an array's item, ``@any`` any other
member of an object, ``@set`` marks a set array and ``@default`` a member's default.
"""

from typing import Any

SHAPES: dict[str, dict[str, dict[str, Any]]] = {shapes}

#: Each release's top-level request members, per tool.
MEMBERS: dict[str, dict[str, list[str]]] = {members}
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, help="schemas root (default: adcp's)")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = generate(args.root or default_root())
    if args.check:
        sys.exit(0 if OUTPUT.read_text() == text else "request_shapes.py is out of date")
    OUTPUT.write_text(text)


if __name__ == "__main__":
    main()
