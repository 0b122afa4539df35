"""``budget_usd`` end to end (issue 52, item 6): ``carryon run`` on the loopback fakes with a
cap at half the planned cost stops without passing it, exits 3 with one line saying what was
spent and what is left; a rerun with no cap completes with the numbers of an uncapped run
(the same metric views) and sends no request twice (the server's counts).

Every entry is priced (``models.defaults.price``): a cap refuses to start with an unpriced
model, which is checked first.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.config import load_config
from tasks.engine.plan import make_plan
from tasks.ops import interrupt
from tests.support.factories import base_config, rounded
from tests.support.llm_server import default_answer
from warehouse import Warehouse

pytestmark = pytest.mark.slow  # the Prefect test server (prefect_harness), three runs

# Dear enough that the plan's rows, rounded to cents, are dollars (the fakes' calls are short).
PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0, "cached_input_per_mtok": 500.0}
# CarryOnBench's metric views: what a researcher reads (run ids and times left out).
VIEWS = ("conversations", "turns", "item_judgments", "safety_judgments", "turn_scores",
         "conversation_scores", "model_summary")


def invoke(*args):
    interrupt.reset()  # each command is a process of its own in real use
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def _config(tmp_path, api_base, home, priced=True):
    cfg = base_config(api_base, tmp_path / home)
    cfg["dataset"]["limit"] = 1
    if priced:
        cfg["models"]["defaults"]["price"] = PRICE
    path = tmp_path / f"{home}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _views(home) -> dict:
    wh = Warehouse(home / "warehouse.duckdb")
    out = {}
    for v in VIEWS:
        rows = [{k: x for k, x in r.items() if "run_id" not in k and k not in
                 ("created", "started", "finished")} for r in wh.query(f"SELECT * FROM {v}")]
        out[v] = sorted(json.dumps(rounded(r), sort_keys=True, default=str) for r in rows)
    return out


def _answer(role: str, body: dict) -> str:
    """The fakes' answer; the merger's checklist has the paper's mean size (18 items), the
    plan's assumption before any checklist is stored."""
    text = default_answer(role, body)
    if role != "merger":
        return text
    merged = json.loads(text)
    base = merged["items"]
    merged["items"] = [{**base[i % len(base)], "question": f"Does it cover point {i + 1}?"}
                       for i in range(18)]
    return json.dumps(merged)


def _padded(role: str, body: dict, tokens: int) -> dict:
    content = _answer(role, body)
    return {"content": content, "reasoning_tokens": max(0, tokens - len(content) // 4)}


def _spent(home) -> float:
    wh = Warehouse(home / "warehouse.duckdb")
    return wh.query("SELECT coalesce(sum(cost_usd), 0) AS s FROM llm_calls WHERE NOT cache_hit")[0]["s"]


def test_a_cap_at_half_the_plan_stops_and_a_rerun_without_one_pays_nothing_twice(
        prefect_harness, llm_server, tmp_path):
    # An unpriced model under a cap: refused before anything is sent, one line naming it.
    r = invoke("run", "--config", str(_config(tmp_path, llm_server.api_base, "bare", False)),
               "--budget-usd", "5")
    assert r.exit_code == 2 and llm_server.counts["total"] == 0, r.output
    assert re.search(r"^error: \S+bare\.yaml: budget_usd: cannot count the spend of unpriced "
                     r"models: .*models\.targets\[0\] \(openai/test-target-a\)", r.output), r.output

    # The fakes answer in few tokens; the plan assumes answers of its per-role size and
    # checklists of 18 items. Each answer is billed at the plan's completion tokens per call
    # (the rest as reasoning tokens) and the merger lists 18 items, so half the plan is about
    # half of what the run costs.
    once = _config(tmp_path, llm_server.api_base, "once")
    rows, _ = make_plan(load_config(once), key_warnings=False)
    for row in rows:
        per_call = row["completion_tokens"] // row["calls"]
        llm_server.scripts[row["role"]] = (
            lambda body, role=row["role"], n=per_call: _padded(role, body, n))

    # 1. The uncapped run, elsewhere: what the numbers are and what they cost.
    r = invoke("run", "--config", str(once))
    assert r.exit_code == 0, r.output
    requests_once = llm_server.counts["total"]

    # 2. The capped run: half the plan.
    capped = _config(tmp_path, llm_server.api_base, "home")
    planned = sum(r["cost_usd"] for r in make_plan(load_config(capped), key_warnings=False)[0])
    cap = round(planned / 2, 6)
    assert _spent(tmp_path / "once") > cap, (planned, _spent(tmp_path / "once"))
    r = invoke("run", "--config", str(capped), "--budget-usd", str(cap))
    assert r.exit_code == 3, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"run stopped: budget_usd ${cap:,.2f}: the next request could pass "
                           "it; spent $"), r.output
    spent = _spent(tmp_path / "home")
    assert 0 < spent <= cap
    assert f"spent ${spent:,.2f} (this home's earlier runs $0.00, this run ${spent:,.2f})" in line
    assert f"${cap - spent:,.2f} left" in line
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    (row,) = wh.query("SELECT status, error FROM runs")
    assert row["status"] == "interrupted" and row["error"] == line.removeprefix("run stopped: ")
    requests_capped = llm_server.counts["total"] - requests_once
    assert 0 < requests_capped < requests_once

    # 3. A rerun with no cap: the uncapped run's numbers, and no request sent twice.
    r = invoke("run", "--config", str(capped))
    assert r.exit_code == 0, r.output
    requests_rerun = llm_server.counts["total"] - requests_once - requests_capped
    assert requests_capped + requests_rerun == requests_once
    assert _views(tmp_path / "home") == _views(tmp_path / "once")
    assert _spent(tmp_path / "home") == pytest.approx(_spent(tmp_path / "once"))
    print(f"\nplan ${planned:,.2f}, cap ${cap:,.2f}; capped run spent ${spent:,.2f} in "
          f"{requests_capped} requests, the rerun {requests_rerun} more; uncapped "
          f"${_spent(tmp_path / 'once'):,.2f} in {requests_once}\n{line}")
