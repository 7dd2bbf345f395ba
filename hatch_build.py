"""The optional compiled wheel: ``ADCP_STALE_CACHE_COMPILE=1`` compiles the hot pure modules
with mypyc (docs/benchmarks.md, "The compiled build"). Without it the wheel is pure Python, as
always; with it the ``.py`` files stay beside their ``.so`` as the source and the fallback."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: What mypyc compiles: modules on the hot paths that compile unchanged and behave the same.
#: Left out: classes sellers subclass (stores/memory.py, ops/metrics.py,
#: integrations/httpx_transport.py: a compiled class refuses interpreted subclasses);
#: core/keys.py (compiled recursion raises no RecursionError: a key nested 50,000 deep
#: crashes the process instead of being refused); what mypyc rejects (pipeline/collector.py:
#: an exception subclassing RuntimeError; codecs/json.py: a list subclass) or crashes on
#: (pipeline/cache.py); pipeline/lookup.py is not tried since ``Hit`` stopped narrowing
#: ``Lookup`` (mypyc rejected that). pipeline/context.py is compiled for the request reader that
#: extends its ``RequestContext`` (a compiled class cannot extend an interpreted one): compiled,
#: ``RequestContext`` refuses interpreted subclasses; sellers build it, none extends it.
#: pipeline/serving.py is left out: compiled, it reads the interpreted ``Hit`` and ``Lookup``
#: through generic attribute lookups, and a hit cost about 700 instructions more than pure.
COMPILED = (
    "adcp_stale_cache/asgi/middleware.py",
    "adcp_stale_cache/asgi/peek.py",
    "adcp_stale_cache/asgi/responders.py",
    "adcp_stale_cache/core/decision.py",
    "adcp_stale_cache/core/entry.py",
    "adcp_stale_cache/core/values.py",
    "adcp_stale_cache/pipeline/context.py",
)


def wanted() -> bool:
    """Whether this build compiles (``ADCP_STALE_CACHE_COMPILE=1``)."""
    return os.environ.get("ADCP_STALE_CACHE_COMPILE", "") == "1"


class CompiledBuild(BuildHookInterface):
    """Adds the mypyc-compiled modules to a wheel when asked; does nothing otherwise."""

    PLUGIN_NAME = "custom"
    built: Path | None = None  # where this build compiled, removed once the wheel holds it

    def dependencies(self) -> list[str]:
        # mypyc type-checks what the modules import: the runtime dependencies come along, and
        # the optional ones that the type checker follows imports into.
        if not wanted():
            return []
        extras = self.metadata.core.optional_dependencies
        return [
            "mypy>=1.10",
            "setuptools>=70",
            *self.metadata.core.dependencies,
            *extras["metrics"],
            *extras["otel"],
        ]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable" or not wanted():
            return
        self.built = built = Path(tempfile.mkdtemp(prefix="adcp-stale-cache-mypyc-"))
        libraries = _compile(Path(self.root), built)
        for library in libraries.rglob("*.so" if sys.platform != "win32" else "*.pyd"):
            build_data["force_include"][str(library)] = library.relative_to(libraries).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self.built is not None:
            shutil.rmtree(self.built, ignore_errors=True)


def _compile(root: Path, out: Path) -> Path:
    """Builds the extension modules under ``out``; the folder that holds them, laid out as
    the wheel holds them."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    cwd = os.getcwd()
    os.chdir(root)  # mypy reads its settings from pyproject.toml and names modules by path
    try:
        extensions = mypycify(
            list(COMPILED), opt_level="3", target_dir=str(out / "c"), group_name="adcp_stale_cache"
        )
        dist = Distribution({"name": "adcp-stale-cache", "ext_modules": extensions})
        build_ext = dist.get_command_obj("build_ext")
        build_ext.build_lib = str(out / "lib")
        build_ext.build_temp = str(out / "temp")
        dist.run_command("build_ext")
    finally:
        os.chdir(cwd)
    return out / "lib"
