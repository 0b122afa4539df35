"""Fault tolerance (issue #9): injected server faults, SIGKILL mid-stage and resume, two runs
of one config at once.

The whole pipeline runs against the loopback server in this process (so the test can read
every request body and hold responses back); `carryon run` runs in-process for the fault
run and as a subprocess for the kill and concurrency tests. Subprocesses use the session's
Prefect test server (``PREFECT_API_URL``), which saves the ~12 s an ephemeral server costs
per run here.

Every finished warehouse is checked by ``check_warehouse``: no duplicate natural keys, no
logical duplicates, conversations whole or with a reason, and exactly one judgment row per
(assistant turn x current checklist item) and one safety row per assistant turn, each a
verdict or unscored with a reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from sqlmodel import SQLModel

import warehouse.schema  # noqa: F401  (registers the tables whose keys are checked)
from tests.support.factories import base_config
from tests.support.llm_server import Faults, LLMServer
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
STAGES = "checklists,episodes,verdicts"  # the report adds no calls and no rows worth checking here


# ----------------------------------------------------------------------------- helpers

def body_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def small_config(api_base: str, home: Path, **models_defaults) -> dict:
    """One target, one query, lengths [4, 6]: 7 conversations (6 flows + oracle)."""
    cfg = base_config(api_base, home)
    cfg["dataset"]["limit"] = 1
    cfg["models"]["defaults"].update(models_defaults)
    return cfg


def write_yaml(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def pk_duplicates(wh: Warehouse) -> dict[str, int]:
    """Rows sharing a natural key (the SQLModel primary key), per table."""
    out = {}
    for name, table in SQLModel.metadata.tables.items():
        pk = ", ".join(c.name for c in table.primary_key.columns)
        n = wh.query(f"SELECT count(*) AS n FROM (SELECT {pk} FROM {name} GROUP BY {pk} "
                     "HAVING count(*) > 1)")[0]["n"]
        if n:
            out[name] = n
    return out


def check_conversations(wh: Warehouse) -> None:
    """What must hold at any moment, a killed run included: a conversation is whole or says
    why it ended, and its turn count is the turns actually stored."""
    rows = wh.query(
        "SELECT c.conversation_id, c.status, c.length, c.n_turns, c.error, "
        "count(t.position) AS stored, count(t.content) AS with_content "
        "FROM conversations c LEFT JOIN turns t USING (conversation_id) "
        "GROUP BY ALL")
    for r in rows:
        assert r["stored"] == r["n_turns"] == r["with_content"], r
        if r["status"] == "completed":
            assert r["stored"] == r["length"] and r["error"] is None, r
        else:
            assert r["error"], f"conversation {r['conversation_id']} ended {r['status']} without a reason"
            assert r["stored"] < r["length"], r
    dup = wh.query("SELECT target, query_id, flow_id, count(*) AS n FROM conversations "
                   "GROUP BY ALL HAVING count(*) > 1")
    assert dup == [], dup
    # Turns belong to a stored conversation (a crash must not leave orphans).
    orphans = wh.query("SELECT count(*) AS n FROM turns WHERE conversation_id NOT IN "
                       "(SELECT conversation_id FROM conversations)")[0]["n"]
    assert orphans == 0


EXPECTED_ITEMS = """
WITH cur AS (
  SELECT query_id, checklist_version FROM checklists
  QUALIFY row_number() OVER (PARTITION BY query_id ORDER BY created DESC, checklist_version DESC) = 1),
answers AS (
  SELECT t.conversation_id, t.position, c.query_id FROM turns t JOIN conversations c USING (conversation_id)
  WHERE t.role = 'assistant' AND t.content IS NOT NULL)
SELECT a.conversation_id, a.position, i.item_id FROM answers a JOIN cur USING (query_id)
JOIN checklist_items i ON i.query_id = cur.query_id AND i.checklist_version = cur.checklist_version
"""
ANSWERS = ("SELECT t.conversation_id, t.position FROM turns t "
           "WHERE t.role = 'assistant' AND t.content IS NOT NULL")


def judgment_sets(wh: Warehouse) -> tuple[str, str]:
    sets = {r["kind"]: r["judgment_set_id"] for r in wh.query("SELECT kind, judgment_set_id FROM judgment_sets")}
    assert wh.count("judgment_sets") == 2, "one config must give one Ben-Util and one safety set"
    return sets["benutil"], sets["safety"]


def check_judgments(wh: Warehouse, complete: bool) -> dict:
    """Per conversation, judgments are absent or complete; with ``complete`` every
    conversation is judged. Every row is a verdict or unscored with a reason."""
    b_set, s_set = judgment_sets(wh)
    missing = wh.query(
        f"SELECT e.conversation_id, count(*) AS n FROM ({EXPECTED_ITEMS}) e "
        "LEFT JOIN item_judgments j ON j.judgment_set_id = ? AND j.conversation_id = e.conversation_id "
        "AND j.position = e.position AND j.item_id = e.item_id WHERE j.item_id IS NULL GROUP BY ALL", [b_set])
    judged = {r["conversation_id"] for r in wh.query(
        "SELECT DISTINCT conversation_id FROM item_judgments WHERE judgment_set_id = ?", [b_set])}
    if complete:
        assert missing == [], f"unjudged (turn, item) pairs: {missing}"
    else:  # a killed judge: a conversation with any judgment has all of them
        half = [m for m in missing if m["conversation_id"] in judged]
        assert half == [], f"half-judged conversations: {half}"
    extra = wh.query(
        f"SELECT count(*) AS n FROM item_judgments j WHERE judgment_set_id = ? AND NOT EXISTS ("
        f"SELECT 1 FROM ({EXPECTED_ITEMS}) e WHERE e.conversation_id = j.conversation_id "
        "AND e.position = j.position AND e.item_id = j.item_id)", [b_set])[0]["n"]
    assert extra == 0, "judgments of turns or items that do not exist"
    bad = wh.query("SELECT fulfilled, reason FROM item_judgments WHERE judgment_set_id = ? AND "
                   "((fulfilled IS NULL AND coalesce(reason, '') = '') OR "
                   "(fulfilled IS NOT NULL AND reason IS NOT NULL))", [b_set])
    assert bad == [], f"neither verdict nor reason (or both): {bad[:3]}"

    s_missing = wh.query(
        f"SELECT a.conversation_id FROM ({ANSWERS}) a LEFT JOIN safety_judgments s "
        "ON s.judgment_set_id = ? AND s.conversation_id = a.conversation_id AND s.position = a.position "
        "WHERE s.position IS NULL", [s_set])
    s_judged = {r["conversation_id"] for r in wh.query(
        "SELECT DISTINCT conversation_id FROM safety_judgments WHERE judgment_set_id = ?", [s_set])}
    if complete:
        assert s_missing == [], f"answers without a safety row: {s_missing}"
    else:
        assert [m for m in s_missing if m["conversation_id"] in s_judged] == []
        assert s_judged == judged, "Ben-Util and safety rows of a batch land together"
    s_bad = wh.query("SELECT score, reason FROM safety_judgments WHERE judgment_set_id = ? AND "
                     "((score IS NULL AND coalesce(reason, '') = '') OR score NOT BETWEEN 1 AND 5)",
                     [s_set])
    assert s_bad == [], s_bad
    return {"judged_conversations": len(judged), "b_set": b_set, "s_set": s_set}


def check_warehouse(wh: Warehouse, complete: bool = True) -> None:
    assert pk_duplicates(wh) == {}
    check_conversations(wh)
    # One checklist per query: a rerun or a second run rebuilds the same version.
    multi = wh.query("SELECT query_id, count(*) AS n FROM checklists GROUP BY ALL HAVING count(*) > 1")
    assert multi == [], multi
    if wh.count("judgment_sets") or complete:
        check_judgments(wh, complete)


# ----------------------------------------------------------------------------- faults

@pytest.mark.e2e
def test_run_completes_under_injected_faults(prefect_harness, tmp_path):
    """20 % 500, 10 % 429 (retry-after), 5 % timeouts, 5 % malformed structured output."""
    from flows.carryon import carryon

    faults = Faults(error500=0.2, error429=0.1, retry_after_s=0.05, timeout=0.05,
                    timeout_sleep_s=1.5, malformed=0.05, seed=7)
    server = LLMServer(faults=faults).start()
    try:
        cfg = small_config(server.api_base, tmp_path / "home", timeout_s=1, max_retries=8)
        path = write_yaml(tmp_path / "c.yaml", cfg)
        summary = asyncio.run(carryon(config=str(path), stages=STAGES))
    finally:
        server.stop()
    for kind in ("fault_500", "fault_429", "fault_timeout", "fault_malformed"):
        assert server.counts[kind] > 0, f"no {kind} injected: {dict(server.counts)}"
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    run = wh.query("SELECT status, requests FROM runs")
    assert run == [{"status": "succeeded", "requests": server.counts["total"]}]
    check_warehouse(wh)
    assert summary["stages"]["episodes"]["status"].get("completed", 0) > 0
    assert wh.count("item_judgments") > 0 and wh.count("safety_judgments") > 0
    # Retries are counted: every request the server saw is an attempt of some recorded call.
    calls = wh.query("SELECT sum(attempts) AS attempts, max(attempts) AS most, "
                     "count(*) FILTER (WHERE attempts > 1) AS retried FROM llm_calls")[0]
    assert calls["most"] > 1 and calls["retried"] > 0
    # Every request the server saw is accounted for in llm_calls (retries included).
    total = wh.query("SELECT sum(attempts) AS n FROM llm_calls")[0]["n"]
    assert total == server.counts["total"]
    # A failed call is recorded with its reason, never as an answer.
    failed = wh.query("SELECT error FROM llm_calls WHERE error IS NOT NULL")
    assert all(f["error"].split(":")[0] in ("retries_exhausted", "invalid_output", "api_error",
                                            "empty_output", "context_exceeded") for f in failed)
    leaked = wh.query("SELECT count(*) AS n FROM turns WHERE content LIKE '%injected%' "
                      "OR content LIKE '%truncated%'")[0]["n"]
    assert leaked == 0


# ----------------------------------------------------------------------------- SIGKILL

class GatedServer(LLMServer):
    """The loopback server plus a gate: once ``trip(counts)`` is true it stops answering, so
    the test knows exactly which calls are in flight when it kills the client."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._gate: asyncio.Event | None = None
        self.trip = None  # fn(counts) -> bool, checked on every request
        self.tripped = threading.Event()
        self.held: list[str] = []  # body hashes of requests waiting at the closed gate

    async def _answer(self, body, role, kind):
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        if self.trip is not None and self.trip(self.counts):
            self.trip = None
            self._gate.clear()
            self.tripped.set()
        if not self._gate.is_set():
            h = body_hash(body)
            self.held.append(h)
            await self._gate.wait()
        return await super()._answer(body, role, kind)

    def arm(self, trip) -> None:
        self.held.clear()
        self.tripped.clear()
        self.trip = trip

    def open(self) -> None:
        self.trip = None
        if self._gate is not None:
            self._loop.call_soon_threadsafe(self._gate.set)


def _env() -> dict:
    import prefect.settings

    env = {**os.environ, "PREFECT_API_URL": prefect.settings.PREFECT_API_URL.value(),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
    for var in ("CARRYON_HOME", "CARRYON_API_BASE", "CARRYON_API_KEY"):
        env.pop(var, None)
    return env


def _start(config: Path, log: Path) -> subprocess.Popen:
    # Own session: the kill reaches the whole process group (Prefect may spawn helpers).
    return subprocess.Popen([PY, "-m", "flows.cli", "run", "--config", str(config), "--stages", STAGES],
                            cwd=ROOT, env=_env(), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill_when_tripped(server: GatedServer, proc: subprocess.Popen, log: Path, timeout: float = 180) -> int:
    """Wait for the trip, let answers already past the gate reach the client, then SIGKILL
    the process group; returns how many calls were in flight (held) at the kill."""
    deadline = time.monotonic() + timeout
    while not server.tripped.wait(0.2):
        if proc.poll() is not None:
            pytest.fail(f"run ended (rc {proc.returncode}) before the stage started:\n"
                        + log.read_text()[-3000:])
        assert time.monotonic() < deadline, "the stage never started"
    # Answers already past the gate finish, then the client stores them in its cache.
    settle = time.monotonic() + 20
    while server.inflight > len(server.held) and time.monotonic() < settle:
        time.sleep(0.05)
    time.sleep(1.0)
    held = len(server.held)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return held


def _finish(proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert rc == 0, log.read_text()[-4000:]


@pytest.mark.e2e
def test_sigkill_during_simulation_and_judging_then_resume(prefect_harness, tmp_path):
    server = GatedServer(latency_s=0.02).start()
    try:
        home = tmp_path / "home"
        config = write_yaml(tmp_path / "c.yaml", small_config(server.api_base, home))
        wh = Warehouse(home / "warehouse.duckdb")
        sent: set[str] = set()  # body hashes of every request of the earlier runs

        def run_hashes() -> list[str]:
            return [body_hash(r["body"]) for r in server.requests]

        # Run A: killed in simulation (targets or simulator calls under way).
        server.arm(lambda c: c["targets"] + c["user_simulator"] >= 4)
        held_a = _kill_when_tripped(server, _start(config, tmp_path / "a.log"), tmp_path / "a.log")
        assert held_a > 0
        check_warehouse(wh, complete=False)  # a killed process leaves no half conversation
        assert wh.query("SELECT count(*) AS n FROM item_judgments")[0]["n"] == 0
        sent |= set(run_hashes())

        # Run B: the same command, killed in judging.
        server.open()
        server.reset()
        server.arm(lambda c: c["benutil_judge"] >= 6)
        held_b = _kill_when_tripped(server, _start(config, tmp_path / "b.log"), tmp_path / "b.log")
        b = run_hashes()
        repeated_b = sum(h in sent for h in b)
        assert repeated_b <= held_a, f"{repeated_b} calls re-sent, only {held_a} were in flight"
        check_warehouse(wh, complete=False)
        assert wh.count("conversations") == 7  # simulation finished in B
        sent |= set(b)

        # Run C: the same command again, to completion.
        server.open()
        server.reset()
        log_c = tmp_path / "c.log"
        _finish(_start(config, log_c), log_c)
        repeated_c = sum(h in sent for h in run_hashes())
        assert repeated_c <= held_b, f"{repeated_c} calls re-sent, only {held_b} were in flight"
        check_warehouse(wh, complete=True)
        status = [r["status"] for r in wh.query("SELECT status FROM runs ORDER BY started")]
        # Killed runs are not passed off as done: each next start marks the dead one interrupted.
        assert status == ["interrupted", "interrupted", "succeeded"]
    finally:
        server.open()
        server.stop()


# ----------------------------------------------------------------------------- concurrency

def _table_counts(wh: Warehouse) -> dict[str, int]:
    # Per-run bookkeeping left out: runs, their calls, and the stage memos (one per stage and
    # input state: two runs at once saw different states).
    return {name: wh.count(name) for name in SQLModel.metadata.tables
            if name not in ("runs", "llm_calls", "stage_memos")}


@pytest.mark.e2e
def test_two_runs_at_once_share_the_cache(prefect_harness, tmp_path):
    server = LLMServer().start()
    try:
        home = tmp_path / "home"
        config = write_yaml(tmp_path / "c.yaml", small_config(server.api_base, home))
        logs = [tmp_path / "one.log", tmp_path / "two.log"]
        procs = [_start(config, log) for log in logs]
        for proc, log in zip(procs, logs):
            _finish(proc, log)
        wh = Warehouse(home / "warehouse.duckdb")
        check_warehouse(wh)
        assert wh.count("conversations") == 7  # as one run: 6 flows + oracle, not 14
        assert [r["status"] for r in wh.query("SELECT status FROM runs")] == ["succeeded"] * 2
        before = _table_counts(wh)
        # A third run (in-process: the same flow the command runs, without another ~20 s
        # process start): every answer comes from the shared cache, so no entry is corrupt,
        # and the warehouse is unchanged (upserts on natural keys).
        from flows.carryon import carryon

        server.reset()
        # replay: every stage reads its answers back (a default rerun would skip them whole)
        summary = asyncio.run(carryon(config=str(config), stages=STAGES, replay=True))
        assert server.counts["total"] == 0 and summary["requests"] == 0, dict(server.counts)
        assert _table_counts(wh) == before
        check_warehouse(wh)
        hits = wh.query("SELECT requests, cache_hits FROM runs ORDER BY started DESC LIMIT 1")[0]
        assert hits["requests"] == 0 and hits["cache_hits"] > 0
    finally:
        server.stop()


# ----------------------------------------------------------------------------- provenance

def test_repeat_call_in_a_run_keeps_its_attempts(write_config, llm_server):
    from aiohttp import web

    from tasks.config import load_config
    from tasks.engine.run import RunContext

    sent = []

    def flaky(body):  # the first request fails with a 500, the retry answers
        sent.append(1)
        if len(sent) == 1:
            return web.json_response({"error": {"message": "injected"}}, status=500)
        return "a benign purpose"

    llm_server.scripts["intent_rewriter"] = flaky
    cfg = load_config(write_config())
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    ctx = RunContext(run_id="r1", config=cfg, warehouse=wh, stages=["checklists", "episodes"])
    spec = cfg.role_spec("intent_rewriter")
    msgs = [{"role": "user", "content": "why?"}]
    try:
        first = asyncio.run(ctx.gateway.chat(spec, "intent_rewriter", msgs))
        ctx.flush_calls()  # the end of one stage
        again = asyncio.run(ctx.gateway.chat(spec, "intent_rewriter", msgs))
        ctx.flush_calls()  # the end of the next
    finally:
        ctx.gateway.close()
    assert first.ok and first.attempts == 2 and again.cached and len(sent) == 2
    row = wh.query("SELECT attempts, cache_hit FROM llm_calls WHERE run_id = 'r1'")
    # The run sent two requests for this call; its provenance must still say so.
    assert row == [{"attempts": 2, "cache_hit": False}]
