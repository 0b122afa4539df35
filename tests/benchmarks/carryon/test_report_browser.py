"""report.html in a real browser (headless Chromium over the DevTools protocol): the page
loads without console errors or exceptions, the conversation browser shows the first
conversation's turns, and switching the selection renders another one. Hostile model text
stays text."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tasks.benchmarks.carryon.report.writer import FIGURES
from tests.support.browser import CHROMIUM, Page, _open  # the chromium fixture: conftest.py
from tests.support.report import build_synthetic

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs /usr/bin/chromium")]


def test_report_page_in_chromium(chromium, write_config):
    from tasks.config import load_config
    from tasks.benchmarks.carryon.report.writer import write_report

    cfg = load_config(write_config())
    wh, run_id = build_synthetic(cfg.home_path, n_targets=2, n_queries=3)
    html = write_report(cfg, run_id) / "report.html"
    first = wh.query("SELECT conversation_id FROM conversations ORDER BY target, query_id, "
                     "condition = 'oracle' DESC, condition, length, flow_id LIMIT 1")[0]["conversation_id"]
    first_answer = wh.query("SELECT content FROM turns WHERE conversation_id = ? AND role = 'assistant' "
                            "ORDER BY position LIMIT 1", [first])[0]["content"]

    async def check(page: Page):
        shown = await page.eval("document.getElementById('turns').innerText")
        n_turns = await page.eval("document.querySelectorAll('#turns .turn').length")
        summary_rows = await page.eval("document.querySelectorAll('#model-summary tbody tr').length")
        imgs = await page.eval("Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length")
        # Pick the BC conversation whose second answer is hostile HTML: it must show as text.
        await page.eval("""(() => {
            const sf = document.getElementById('sel-flow');
            const opts = Array.from(sf.options);
            const bc = opts.find(o => o.textContent.startsWith('BC'));
            sf.value = bc.value; sf.dispatchEvent(new Event('change'));
        })()""")
        await asyncio.sleep(0.2)
        hostile = await page.eval("document.getElementById('turns').innerText")
        pwned = await page.eval("window.__pwned === 1")
        items = await page.eval("document.querySelectorAll('#turns .items li').length")
        return shown, n_turns, summary_rows, imgs, hostile, pwned, items, page.errors()

    shown, n_turns, summary_rows, imgs, hostile, pwned, items, errors = asyncio.run(
        _open(chromium, html.resolve().as_uri(), check))
    assert errors == []
    assert first_answer in shown and "Turn 1" in shown and "utility" in shown
    assert n_turns == 2  # the oracle conversation: the prompt and the answer
    assert summary_rows == 2 and imgs == len(FIGURES)
    assert "<script>window.__pwned=1</script>" in hostile and not pwned
    assert items > 0


def test_episode_benchmark_page_in_chromium(chromium, tmp_path):
    """A sister benchmark's report.html (the page every assembled report gets): its sections,
    then the episode browser with each assistant turn's verdicts; hostile model text in a
    turn, a verdict's reason and a section stays text."""
    import datetime as dt

    import yaml

    from tasks.config import load_config
    from tasks.report.assemble import write
    from warehouse import Warehouse

    tests_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = os.path.join(tests_dir, "fixtures", "checklist_bench", "spec.yaml")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "benchmark": spec, "home": str(tmp_path / "home"), "dataset": {"source": "sample"},
        "models": {"defaults": {"api_base": "http://127.0.0.1:9"},
                   "targets": [{"name": "target-a", "model": "openai/a"},
                               {"name": "target-<b>", "model": "openai/b"}],
                   "benutil_judge": {"model": "openai/j"}, "safety_judge": {"model": "openai/s"}}}))
    cfg = load_config(str(path))
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    now = dt.datetime.now(dt.timezone.utc)
    hostile = "<script>window.__pwned=1</script><img src=x onerror='window.__pwned=1'>"
    wh.write("runs", [{"run_id": "r1", "config_hash": "h", "config_json": "{}", "seed": 0,
                       "stages": "episodes", "started": now, "status": "succeeded"}])
    wh.write("bench_items", [{"benchmark": "checklist_toy", "item_id": f"i{k}", "source_row": k,
                              "prompts": json.dumps({"question": f"Question {k}?"}),
                              "hidden": "{}", "meta": "{}"} for k in (1, 2)])
    eps, turns = [], []
    for target in ("target-a", "target-<b>"):
        for k in (1, 2):
            eid = f"{target}-{k}"
            eps.append({"episode_id": eid, "benchmark": "checklist_toy", "item_id": f"i{k}",
                        "condition": "followups", "target": target, "user_policy": "followups",
                        "status": "completed", "termination": "turn_cap", "n_turns": 2})
            answer = hostile if (target, k) == ("target-<b>", 2) else f"Answer {k} by {target}."
            turns += [{"episode_id": eid, "position": 0, "role": "user", "model_turn": 1,
                       "content": f"Question {k}?"},
                      {"episode_id": eid, "position": 1, "role": "assistant", "model_turn": 1,
                       "content": answer}]
    wh.write("episodes", eps)
    wh.write("episode_turns", turns)
    wh.write("verdict_sets", [{"judgment_set_id": "s1", "benchmark": "checklist_toy",
                               "kind": "benutil", "prompt_version": "p", "created": now,
                               "run_id": "r1"}])
    wh.write("verdicts", [{"judgment_set_id": "s1", "episode_id": e["episode_id"], "position": 1,
                           "measure": "fulfilled:1", "kind": "benutil", "model_turn": 1,
                           "value": 1.0, "reason": hostile} for e in eps])
    folder = write(cfg, wh, "r1").folder
    page_file = folder / "report.html"

    async def check(page: Page):
        first = await page.eval("document.getElementById('turns').innerText")
        targets = await page.eval("Array.from(document.getElementById('sel-target').options)"
                                  ".map(o => o.textContent)")
        await page.eval("""(() => {
            const si = document.getElementById('sel-item');
            si.value = si.options[1].value; si.dispatchEvent(new Event('change'));
        })()""")
        await asyncio.sleep(0.2)
        second = await page.eval("document.getElementById('turns').innerText")
        tables = await page.eval("document.querySelectorAll('table').length")
        status = await page.eval("document.getElementById('run-status').innerText")
        pwned = await page.eval("window.__pwned === 1")
        return first, targets, second, tables, status, pwned, page.errors()

    first, targets, second, tables, status, pwned, errors = asyncio.run(
        _open(chromium, page_file.resolve().as_uri(), check))
    assert errors == []
    # Targets in name order ("<" before "a"): the first shown is target-<b>'s first item.
    assert "Answer 1 by target-<b>." in first and "benutil · fulfilled:1: 1" in first
    assert targets == ["target-<b>", "target-a"]  # model names are text too
    assert hostile in second and not pwned  # the answer and the reason, shown as text
    assert tables >= 2  # the episode coverage and the section's table
    assert status.startswith("Run: r1 (status succeeded")
