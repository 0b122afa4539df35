"""Batch mode in a run: the judges of a config with ``batch: true`` go through the provider
batch API (the loopback server's), give the judgments a live run gives, and a run killed
with SIGKILL while its batches are out resumes polling them instead of submitting again.

A live run of the whole pipeline fills home A. Home B gets A's warehouse without its
judgments and an empty response cache, and runs the judge stage with both judges in batch
mode, so every judge call is a batch line.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.carryon import carryon
from tests.support.factories import base_config
from warehouse import Warehouse

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
JUDGES = ("benutil_judge", "safety_judge")
ITEM_COLS = "conversation_id, position, item_id, fulfilled, evidence, reason, judgment_set_id"
SAFETY_COLS = "conversation_id, position, score, reason, judgment_set_id"


def _judgments(home: Path) -> tuple[list, list]:
    wh = Warehouse(home / "warehouse.duckdb")
    return (wh.query(f"SELECT {ITEM_COLS} FROM item_judgments ORDER BY ALL"),
            wh.query(f"SELECT {SAFETY_COLS} FROM safety_judgments ORDER BY ALL"))


def _config(path: Path, api_base: str, home: Path, batch: bool) -> Path:
    cfg = base_config(api_base, home)
    if batch:
        for role in JUDGES:
            cfg["models"][role].update(batch=True, batch_poll_s=0.05)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def live_home(prefect_harness, llm_server, tmp_path):
    home = tmp_path / "a"
    asyncio.run(carryon(config=str(_config(tmp_path / "a.yaml", llm_server.api_base, home, False))))
    return home


def _home_without_judgments(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    shutil.copy(src / "warehouse.duckdb", dst / "warehouse.duckdb")
    with Warehouse(dst / "warehouse.duckdb").connect() as con:
        for table in ("verdicts", "verdict_votes"):  # CarryOnBench's judgments
            con.execute(f"DELETE FROM {table}")


def test_batch_judging_gives_the_live_judgments(live_home, llm_server, tmp_path):
    expected = _judgments(live_home)
    assert expected[0] and expected[1]
    home = tmp_path / "b"
    _home_without_judgments(live_home, home)
    before = dict(llm_server.counts)
    summary = asyncio.run(carryon(config=str(_config(tmp_path / "b.yaml", llm_server.api_base,
                                                     home, True)), stages="verdicts"))
    assert summary["stages"]["verdicts"]
    for role in JUDGES:  # not one live judge request: every judgment came from a batch line
        assert llm_server.counts.get(role, 0) == before.get(role, 0), role
    assert llm_server.counts["POST /v1/batches"] > before.get("POST /v1/batches", 0)
    assert _judgments(home) == expected
    wh = Warehouse(home / "warehouse.duckdb")
    rows = wh.query("SELECT count(*) AS n, count(batch_id) AS batched FROM llm_calls "
                    "WHERE role IN ('benutil_judge', 'safety_judge') AND NOT cache_hit "
                    "AND run_id = ?", [summary["run_id"]])
    assert rows[0]["n"] == rows[0]["batched"] > 0  # provenance names the batch of each call
    assert wh.query("SELECT count(*) AS n FROM llm_batches WHERE NOT consumed")[0]["n"] == 0


def test_sigkill_mid_batch_resumes_the_submitted_batches(live_home, llm_server, tmp_path):
    expected = _judgments(live_home)
    home = tmp_path / "b"
    _home_without_judgments(live_home, home)
    cfg = _config(tmp_path / "b.yaml", llm_server.api_base, home, True)
    llm_server.batch_faults.delay_polls = 10_000  # the killed process never sees them end
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", "--config", str(cfg),
                             "--stages", "verdicts"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wh = Warehouse(home / "warehouse.duckdb")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if wh.query("SELECT count(*) AS n FROM llm_batches")[0]["n"]:
                break
        assert proc.poll() is None, "the run ended before it submitted a batch"
        time.sleep(1.0)  # let every judge batch of the stage get submitted
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # Batches whose create was answered; a create still out when the process died left an
    # intent (status submitting), which the rerun looks up by its tag instead of resubmitting.
    submitted = wh.query("SELECT batch_id, n_lines FROM llm_batches WHERE NOT consumed "
                         "AND status <> 'submitting'")
    assert submitted
    lines_before = llm_server.counts.get("batch_lines", 0)
    for b in llm_server.batch.batches.values():  # the provider gets to them
        b["_faults"].delay_polls = 1
    llm_server.batch_faults.delay_polls = 1
    rerun = asyncio.run(carryon(config=str(cfg), stages="verdicts"))
    resumed = {b["batch_id"] for b in wh.query(
        "SELECT batch_id FROM llm_batches WHERE consumed")}
    assert {b["batch_id"] for b in submitted} <= resumed  # polled again, answers used
    # Lines already submitted were not sent again: every create is one stored batch (none
    # made twice), and each line was answered once.
    stored = wh.query("SELECT count(*) AS n, sum(n_lines) AS lines FROM llm_batches")[0]
    assert stored["n"] == llm_server.counts["POST /v1/batches"]
    assert llm_server.counts["batch_lines"] - lines_before == stored["lines"]
    for role in JUDGES:  # (home A's live judge calls are in the copied llm_calls too)
        assert wh.query("SELECT count(*) AS n FROM llm_calls WHERE role = ? AND NOT cache_hit "
                        "AND batch_id IS NULL AND run_id = ?", [role, rerun["run_id"]])[0]["n"] == 0, role
    assert _judgments(home) == expected


def test_simulation_batches_one_turn_depth_at_a_time(live_home, llm_server, tmp_path):
    # The targets and the simulator in batch mode: the same conversations as the live run,
    # in one batch per turn depth and role (turn k+1 needs turn k's answers).
    home = tmp_path / "c"
    cfg = base_config(llm_server.api_base, home)
    for role in ("targets", "user_simulator"):
        entries = cfg["models"][role]
        for e in entries if isinstance(entries, list) else [entries]:
            e.update(batch=True, batch_poll_s=0.05)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    before = {k: v for k, v in llm_server.counts.items()}
    asyncio.run(carryon(config=str(path)))
    turns = "SELECT conversation_id, position, role, content FROM turns ORDER BY ALL"
    assert Warehouse(home / "warehouse.duckdb").query(turns) == \
        Warehouse(live_home / "warehouse.duckdb").query(turns)
    for role in ("targets", "user_simulator"):
        assert llm_server.counts.get(role, 0) == before.get(role, 0), role  # nothing live
    by_role = {r["role"]: r["n"] for r in Warehouse(home / "warehouse.duckdb").query(
        "SELECT role, count(*) AS n FROM llm_batches GROUP BY role")}
    # lengths 4 and 6: target turns at depths 1-3 (the oracle with depth 1), user turns 2-3
    assert by_role == {"targets": 3, "user_simulator": 2}
