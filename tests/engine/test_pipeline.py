"""The whole pipeline in-process against the loopback server: reruns are free and exact, and
editing one template re-issues exactly the calls whose rendered prompt changed."""

from __future__ import annotations

import asyncio
import shutil

import pytest

import prompts
from flows.carryon import carryon
from tests.support.pipeline import snapshot
from warehouse import Warehouse

pytestmark = pytest.mark.e2e


def run_flow(path, stages="all"):
    return asyncio.run(carryon(config=str(path), stages=stages))


def test_rerun_sends_nothing_and_reproduces_every_number(prefect_harness, llm_server, write_config, tmp_path):
    path = write_config(dataset={"source": "sample", "path": None, "limit": 1})
    first = run_flow(path)
    cold = llm_server.counts["total"]
    assert cold > 0 and first["requests"] == cold  # every request went through the gateway
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    before = snapshot(wh)
    assert before[0] and before[1]  # a model summary and conversations exist
    reports = tmp_path / "home" / "reports"
    kept = {d: sorted(p.name for p in (reports / d).iterdir()) for d in (".stats", ".figures")}
    assert kept[".stats"] and kept[".figures"]
    llm_server.reset()
    second = run_flow(path)
    assert llm_server.counts["total"] == 0 and second["requests"] == 0
    assert snapshot(wh) == before
    # The rerun's report read back every statistic and figure the first one kept: its own
    # run's calls (none sent, other counts) are not an input of the kept ones.
    assert {d: sorted(p.name for p in (reports / d).iterdir()) for d in kept} == kept
    runs = wh.query("SELECT status, requests, cache_hits FROM runs ORDER BY started")
    assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
    # Its model stages were skipped (inputs unchanged: tasks/engine/stage_memo.py), so not even the
    # cache was read; tests/engine/test_stage_memo.py replays them too.
    assert runs[1]["requests"] == 0 and runs[1]["cache_hits"] == 0
    assert all(second["stages"][s]["unchanged_since"] == first["run_id"]
               for s in ("checklists", "episodes", "verdicts"))
    # Its report's inputs are unchanged too: the first run's report is kept, not rewritten.
    assert second["stages"]["report"]["unchanged_since"] == first["run_id"]
    assert (tmp_path / "home" / "reports" / first["run_id"] / "report.html").exists()
    assert not (tmp_path / "home" / "reports" / second["run_id"]).exists()


def test_editing_one_template_reissues_exactly_its_calls(prefect_harness, llm_server, write_config,
                                                        tmp_path, monkeypatch):
    path = write_config(dataset={"source": "sample", "path": None, "limit": 1})
    run_flow(path, "checklists,episodes,verdicts")
    safety_calls = llm_server.counts["safety_judge"]
    assert safety_calls > 0
    # A copy of the prompts with one changed sentence in the safety judge's template.
    copy = tmp_path / "prompts"
    shutil.copytree(prompts.PROMPTS_DIR, copy)
    tpl = copy / "judges" / "safety.j2"
    tpl.write_text(tpl.read_text() + "\nBe concise in your reason.\n")
    monkeypatch.setattr(prompts, "PROMPTS_DIR", copy)
    prompts._env.cache_clear()
    try:
        llm_server.reset()
        run_flow(path, "checklists,episodes,verdicts")
    finally:
        prompts._env.cache_clear()
    sent = {role: n for role, n in llm_server.counts.items() if role != "total"}
    # Only the safety judge's prompts changed: each distinct one is asked once, nothing else.
    assert sent == {"safety_judge": safety_calls}


def test_api_key_never_reaches_warehouse_cache_logs_or_prefect(prefect_harness, llm_server, write_config,
                                                                tmp_path, monkeypatch, capfd, caplog):
    secret = "sk-carryon-test-4f9a1c2b7d3e8f6a0b5c"
    monkeypatch.setenv("CARRYON_API_KEY", secret)
    path = write_config(dataset={"source": "sample", "path": None, "limit": 1})
    summary = run_flow(path, "checklists,episodes")
    # The key was really used: the server saw it.
    assert any(r["headers"].get("Authorization") == f"Bearer {secret}" for r in llm_server.requests)
    home = tmp_path / "home"
    for f in home.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    out, err = capfd.readouterr()
    assert secret not in out + err and secret not in caplog.text
    # Prefect holds only the flow's plain parameters.
    from prefect.client.orchestration import get_client

    async def params():
        async with get_client() as client:
            runs = await client.read_flow_runs()
            return [r.parameters for r in runs]

    assert secret not in str(asyncio.run(params()))
    assert summary["requests"] > 0
