"""A run of ``configs/paper.yaml``'s shape with every model ``batch: true``, against the
loopback fakes of the three batch APIs (tests/support/llm_batch.py, tests/support/llm_providers.py): a Gemini
simulator, move checker and Ben-Util judge, an Anthropic and an OpenAI target, an OpenAI safety
judge. Every model call of the simulation and judge stages goes through its provider's batch
API; a ``carryon run`` killed with SIGKILL while the judge stage's batches are out, then run
again, pays for no line twice; the recorded cost is the batch price; and ``carryon plan``
agrees with the report's cost section within 5 % on calls and tokens per role."""

from __future__ import annotations

import asyncio
import os
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
SIM_AND_JUDGE = ("targets", "user_simulator", "move_checker", "benutil_judge", "safety_judge")
CLAUDE_PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3}


def paper_shape(server, home: Path) -> dict:
    cfg = base_config(server.api_base, home)
    poll = {"batch": True, "batch_poll_s": 0.05}
    gemini = {"api_base": server.gemini_base, **poll}
    openai = {"api_base": server.api_base, **poll}
    m = cfg["models"]
    m["targets"] = [
        # litellm's map prices this id at 0: the entry's price stands in for Anthropic's
        {"name": "claude-sonnet-4", "model": "anthropic/claude-sonnet-4-20250514",
         "api_base": server.anthropic_base, "price": CLAUDE_PRICE, **poll},
        {"name": "gpt-4o-mini", "model": "openai/gpt-4o-mini", **openai}]
    m["user_simulator"] = {"model": "gemini/gemini-3-flash-preview", "temperature": 1.0, **gemini}
    for role in ("intent_rewriter", "decomposer", "merger", "benutil_judge", "move_checker"):
        m[role] = {"model": "gemini/gemini-2.5-flash", **gemini}
    m["misuse_filter"] = {"model": "openai/gpt-4o-mini", **openai}
    m["safety_judge"] = {"model": "openai/gpt-4o-mini", **openai}
    for entry in m["ensemble"]:
        entry.update(openai)
    m["wildguard"].update(openai)
    return cfg


def test_paper_shape_run_in_batches_killed_and_resumed(prefect_harness, llm_server, tmp_path):
    from tasks.config import load_config
    from tasks.gateway.prices import billed
    from tasks.benchmarks.carryon.report import cost

    home = tmp_path / "home"
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(paper_shape(llm_server, home)))
    # 1. Checklists and simulation in one process.
    asyncio.run(carryon(config=str(path), stages="checklists,episodes"))
    # 2. The judge stage in a `carryon run` killed with SIGKILL while its batches are out.
    llm_server.batch_faults.delay_polls = 10_000
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "run", "--config", str(path),
                             "--stages", "verdicts"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wh = Warehouse(home / "warehouse.duckdb")
    judge_batches = ("SELECT count(DISTINCT role) AS n FROM llm_batches WHERE role LIKE '%judge' "
                     "AND status <> 'submitting'")  # created, not only an intent
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if wh.query(judge_batches)[0]["n"] == 2:  # Ben-Util (Gemini) and safety (OpenAI)
                break
        assert proc.poll() is None, "the run ended before it submitted its judge batches"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # (A create still out when the process died left an intent, status submitting: the rerun
    # looks it up by its tag.)
    killed = wh.query("SELECT batch_id, model FROM llm_batches WHERE NOT consumed "
                      "AND status <> 'submitting'")
    assert {b["model"] for b in killed} >= {"gemini/gemini-2.5-flash", "openai/gpt-4o-mini"}
    for b in llm_server.batch.batches.values():  # the providers get to them
        b["_faults"].delay_polls = 1
    for b in llm_server.providers.batches.values():
        b["faults"].delay_polls = 1
    llm_server.batch_faults.delay_polls = 1
    # 3. The whole run again: the stored batches are polled, nothing is submitted twice.
    rerun = asyncio.run(carryon(config=str(path)))
    assert wh.query("SELECT count(*) AS n FROM llm_batches WHERE NOT consumed")[0]["n"] == 0
    assert {b["batch_id"] for b in killed} <= {b["batch_id"] for b in wh.query(
        "SELECT batch_id FROM llm_batches WHERE consumed")}

    # Every model call of the simulation and judge stages went through a provider batch.
    for role in SIM_AND_JUDGE:
        assert llm_server.counts.get(role, 0) == 0, role  # not one live request
        rows = wh.query("SELECT count(*) AS n, count(batch_id) AS b FROM llm_calls "
                        "WHERE role = ? AND NOT cache_hit", [role])[0]
        assert rows["n"] == rows["b"] > 0, role
    by_model = {r["model"] for r in wh.query("SELECT DISTINCT model FROM llm_batches")}
    assert {"anthropic/claude-sonnet-4-20250514", "openai/gpt-4o-mini", "gemini/gemini-2.5-flash",
            "gemini/gemini-3-flash-preview"} <= by_model
    assert llm_server.counts["POST /v1/messages/batches"] > 0
    assert llm_server.counts["POST /v1beta/batchGenerateContent"] > 0

    # Nothing paid twice: each submitted line was answered once, each answer is one call.
    stored = {r["role"]: r["lines"] for r in wh.query(
        "SELECT role, sum(n_lines) AS lines FROM llm_batches GROUP BY role")}
    for role in SIM_AND_JUDGE:
        sent = wh.query("SELECT count(DISTINCT call_hash) AS n FROM llm_calls "
                        "WHERE role = ? AND NOT cache_hit", [role])[0]["n"]
        assert llm_server.counts[f"batch_line:{role}"] == stored[role] == sent, role

    # The recorded cost is the batch price: half the live price of each call's tokens.
    cfg = load_config(path)
    specs = {(role, s.model): s for role in SIM_AND_JUDGE for s in cfg.role_specs(role)}
    calls = wh.query("SELECT role, model, prompt_tokens, completion_tokens, cached_tokens, "
                     "cost_usd FROM llm_calls WHERE NOT cache_hit AND batch_id IS NOT NULL "
                     "AND role IN (SELECT unnest(?))", [list(SIM_AND_JUDGE)])
    for c in calls:
        spec = specs[(c["role"], c["model"])]
        args = (c["prompt_tokens"], c["completion_tokens"], c["cached_tokens"] or 0)
        assert c["cost_usd"] == pytest.approx(billed(spec, *args, batch=True), rel=1e-6)
        assert c["cost_usd"] == pytest.approx(0.5 * billed(spec, *args), rel=1e-6) and c["cost_usd"] > 0

    # `carryon plan` and the report's cost section agree within 5 % on calls and tokens.
    (stat,) = cost.stats(cost.load(wh, rerun["run_id"]))
    table = {r["role"]: r for r in stat.table.to_dict("records")}
    for role in SIM_AND_JUDGE:
        r = table[role]
        assert abs(r["calls_gap"]) <= 0.05 and abs(r["tokens_gap"]) <= 0.05, r
        assert r["plan_submit"] == "batch" and r["batched"] == r["requests"]
