"""Shared fixtures: a loopback OpenAI-compatible server, a temporary home, test configs.

No test reaches the internet: every model entry points at the loopback server, and the
Prefect API is an in-process test harness (session-scoped) where a flow runs.

The default run is the fast suite: tests marked ``slow``, ``e2e``, ``local_model`` or
``browser`` (and every test that uses ``prefect_harness``, which is marked ``slow`` here) are
deselected, not skipped. ``--all`` runs everything (CI: ``.ci/run``); an explicit ``-m``
expression replaces the default selection, and a test file or node id named on the command
line runs whole.
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Tests send their requests from their own process: most make a few dozen calls, and a worker
# process per core for each would cost seconds of imports. tests/gateway/test_gateway_workers.py turns
# workers on (config ``gateway.workers``) and checks they answer exactly as this process does.
os.environ["CARRYON_GATEWAY_WORKERS"] = "0"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

import tasks.bench  # noqa: E402,F401  (registers every benchmark's views for Warehouse.init)
from tests.support.factories import base_config  # noqa: E402
from tests.support.llm_server import Faults, LLMServer  # noqa: E402


@pytest.fixture
def llm_server():
    server = LLMServer().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    # A developer's own overrides must not leak into tests.
    for var in ("CARRYON_HOME", "CARRYON_API_BASE", "CARRYON_API_KEY", "CARRYON_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    # Nor the views of a test's own spec (a fixture benchmark) into later tests' warehouses: a
    # process brings the views of the specs it loaded to every warehouse it opens.
    from tasks import bench

    monkeypatch.setattr(bench, "_LOADED_VIEWS", dict(bench._LOADED_VIEWS))


@pytest.fixture
def write_config(tmp_path, llm_server):
    """write_config(**overrides) -> path of a YAML config pointed at the loopback server."""

    def _write(name: str = "config.yaml", **over) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(base_config(llm_server.api_base, tmp_path / "home", **over)))
        return path

    return _write


# ----- the fast default and --all ------------------------------------------------------------------
# Slow: end to end through the CLI in a subprocess, the Prefect server (prefect_harness), the
# local model, headless Chromium, worker processes, kill / fault-injection runs, and modules that
# render a whole report per case. See pyproject.toml's markers.
SLOW_MARKERS = ("slow", "e2e", "local_model", "browser")
_DESELECTED = pytest.StashKey[int]()


def pytest_addoption(parser):
    parser.addoption(
        "--all", action="store_true", dest="carryon_all", default=False,
        help="run every test; by default tests marked " + "/".join(SLOW_MARKERS)
             + " are deselected (an explicit -m expression also replaces that default)")


def _named_node_ids(config) -> list[str]:
    """The test files and node ids (``path::test``) the command line names, relative to the
    rootdir. Folders (``tests/``) are not names: they keep the default selection."""
    out = []
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        full = (config.invocation_params.dir / path).resolve()
        if not (sep or full.is_file()):
            continue
        try:
            rel = full.relative_to(config.rootpath).as_posix()
        except ValueError:
            continue
        out.append(f"{rel}::{rest}" if sep else rel)
    return out


def _is_named(nodeid: str, named: list[str]) -> bool:
    return any(nodeid == n or nodeid.startswith((n + "::", n + "[")) for n in named)


@pytest.hookimpl(tryfirst=True)  # before -m/-k: the slow mark added here is seen by -m
def pytest_collection_modifyitems(config, items):
    for item in items:
        # The Prefect test server costs ~20-40 s to start: a test that needs it is slow.
        if "prefect_harness" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    if config.getoption("carryon_all") or config.getoption("markexpr"):
        return
    named = _named_node_ids(config)
    keep, slow = [], []
    for item in items:
        is_slow = any(item.get_closest_marker(m) for m in SLOW_MARKERS)
        (slow if is_slow and not _is_named(item.nodeid, named) else keep).append(item)
    config.stash[_DESELECTED] = len(slow)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, config):
    n = config.stash.get(_DESELECTED, 0)
    if n:
        terminalreporter.write_line(
            f"carryon: {n} slow test(s) deselected (marked {'/'.join(SLOW_MARKERS)}); "
            "`bash scripts/test.sh --all` runs them")


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    # The default 30 s start-up limit is too short on a busy 2-core machine.
    with prefect_test_harness(server_startup_timeout=120):
        yield


__all__ = ["Faults", "LLMServer", "base_config"]
