from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adcp_stale_cache.ops.metrics import CacheMetrics

SHARED_SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "adcp-schemas"


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def age_entries(store: Any, seconds: float) -> None:
    """Make every entry of the memory ``store`` ``seconds`` older: time passing, for a cache
    built as users copy it (an example's), whose clock a test does not give."""
    for key, entry in await store.scan():
        older = dataclasses.replace(entry, stored_at=entry.stored_at - seconds)
        await store.set(key, older, 3600)


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


# The modules that start first, slowest first (--durations with -n 2, issue 33: the load
# unit 385 s, simulation 190 s, federation 150 s, bench 110 s...): a worker that took one of
# them last would finish alone, long after the other.
SLOWEST_FIRST = (
    "test_scale_netns",
    "test_load",
    "test_simulation",
    "test_e2e_federation",
    "test_bench",
    "test_e2e_steering",
    "test_e2e_adcp_sdk",
    "test_fuzz_rewriter",
    "test_instructions",
    "test_feed_events",
    "test_e2e_seller",
)
# Modules that must not run beside each other share a work unit: both load the machine.
SHARED_UNITS = {"test_scale_netns": "load", "test_load": "load"}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest`` runs the suite on every core when pytest-xdist is installed (``-n N``: on N
    workers, ``-n 0``: in this process): each module on one worker, the slowest first."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return  # a worker runs what its controller sends: workers of its own would recurse
    if config.option.numprocesses != 0 and config.option.dist == "no":  # -n N too
        if config.option.numprocesses is None:
            config.option.numprocesses = "auto"
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # the order is SLOWEST_FIRST's, not test counts


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadfile``: a module's tests on one worker (its module-scoped servers and
    heavy imports once), and SHARED_UNITS' modules one after another. (xdist_group marks
    do not group on pytest 9.2: xdist 3.8 renames items through an attribute it ignores.)"""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_UNITS.get(Path(module).stem, module)

    return ModuleScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest modules first (each worker takes modules in this order)."""

    def rank(item: pytest.Item) -> int:
        stem = item.path.stem
        return SLOWEST_FIRST.index(stem) if stem in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)


# pytest-timeout interrupts a test once; a test whose cleanup then hangs would hang the run.
# Past its timeout and this margin, the process prints every thread's stack and exits (under
# xdist the worker is reported crashed and the run goes on).
HARD_STOP_MARGIN_SECONDS = float(os.environ.get("TESTS_HARD_STOP_MARGIN_SECONDS", "120"))


def _hard_stop(config: pytest.Config, nodeid: str) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    print(f"\n{nodeid}: still running past its timeout; stopping", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr)
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    given = marker.args[0] if marker is not None and marker.args else None
    seconds = float(given or item.config.getoption("timeout", None) or 0)
    stop = None
    if seconds > 0:
        stop = threading.Timer(
            seconds + HARD_STOP_MARGIN_SECONDS, _hard_stop, (item.config, item.nodeid)
        )
        stop.daemon = True
        stop.start()
    try:
        yield
    finally:
        if stop is not None:
            stop.cancel()


class CountingMetrics(CacheMetrics):
    """Stale serves, advisories delivered (``stale_serve(advisory=True)``) and lost."""

    def __init__(self) -> None:
        self.stale, self.delivered, self.lost = 0, 0, 0

    def stale_serve(self, surface: str, upstream: str, code: str, advisory: bool) -> None:
        self.stale += 1
        self.delivered += advisory

    def advisory_lost(self, surface: str, upstream: str) -> None:
        self.lost += 1
