"""A ``carryon run`` in a subprocess against the loopback server: its environment (``_env``,
interrupt grace GRACE_S), its config (``_config``) and a server that records when each
request arrived (``TimedServer``, the ``timed_server`` fixture), and ``fresh_interrupt`` (a
test that stops a run starts and ends with no stop asked for). Used by test_interrupt,
test_inflight_claims, test_hostile_target and test_budget."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from tasks.ops import interrupt
from tests.support.factories import base_config
from tests.support.llm_server import LLMServer

GRACE_S = 3.0


class TimedServer(LLMServer):
    """The loopback server, with each request's arrival time and role."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.arrivals: list[tuple[float, str]] = []

    async def _arrived(self, request):
        body, role = await super()._arrived(request)
        self.arrivals.append((time.monotonic(), role))
        return body, role


@pytest.fixture
def timed_server():
    server = TimedServer().start()
    yield server
    server.stop()


@pytest.fixture
def fresh_interrupt():
    interrupt.reset()
    yield
    interrupt.reset()


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CARRYON_"))}
    env.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1",
               PREFECT_HOME=str(tmp_path / "prefect-home"),
               CARRYON_GATEWAY_WORKERS="1",  # a worker process in the group, as in real runs
               CARRYON_INTERRUPT_GRACE_S=str(GRACE_S))
    return env


def _config(tmp_path: Path, api_base: str, home: str) -> Path:
    cfg = base_config(api_base, tmp_path / home)
    cfg["dataset"]["limit"] = 1
    cfg["models"]["defaults"]["timeout_s"] = 30
    path = tmp_path / f"{home}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
