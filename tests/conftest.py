"""Shared fixtures: a loopback OpenAI-compatible server, a temporary home, test configs.

No test reaches the internet: every model entry points at the loopback server, and the
Prefect API is an in-process test harness (session-scoped) where a flow runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Tests send their requests from their own process: most make a few dozen calls, and a worker
# process per core for each would cost seconds of imports. tests/test_gateway_workers.py turns
# workers on (config ``gateway.workers``) and checks they answer exactly as this process does.
os.environ["CARRYON_GATEWAY_WORKERS"] = "0"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from tests.llm_server import Faults, LLMServer  # noqa: E402


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


def base_config(api_base: str, home: Path, **over) -> dict:
    """A small config with every role on the loopback server (two ensemble... three, to
    satisfy min_harmless=3)."""
    m = "openai/test-"
    cfg = {
        "home": str(home),
        "seed": 0,
        "dataset": {"source": "sample", "path": None, "limit": 2},
        "flows": {"lengths": [4, 6], "bc_per_length": 2, "nc_per_length": 1},
        "models": {
            "defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 256,
                         "max_concurrency": 8, "timeout_s": 5, "max_retries": 3},
            "targets": [{"name": "target-a", "model": m + "target-a"}],
            "user_simulator": {"model": m + "sim", "temperature": 1.0},
            "intent_rewriter": {"model": m + "helper"},
            "ensemble": [{"name": f"ens-{i}", "model": f"{m}ens-{i}"} for i in (1, 2, 3)],
            "wildguard": {"model": m + "wildguard", "mode": "chat"},
            "decomposer": {"model": m + "helper"},
            "merger": {"model": m + "helper"},
            "misuse_filter": {"model": m + "helper"},
            "benutil_judge": {"model": m + "judge"},
            "safety_judge": {"model": m + "judge"},
        },
        "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.2},
    }
    for key, value in over.items():
        cfg[key] = value
    return cfg


@pytest.fixture
def write_config(tmp_path, llm_server):
    """write_config(**overrides) -> path of a YAML config pointed at the loopback server."""

    def _write(name: str = "config.yaml", **over) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(base_config(llm_server.api_base, tmp_path / "home", **over)))
        return path

    return _write


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    # The default 30 s start-up limit is too short on a busy 2-core machine.
    with prefect_test_harness(server_startup_timeout=120):
        yield


__all__ = ["Faults", "LLMServer", "base_config"]
