"""The report end to end on a synthetic warehouse (the shape the pipeline writes), and the
report flow with its Prefect artifacts."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from tasks.config import load_config
from tasks.report import ReportError
from tasks.benchmarks.carryon.report import summary_rows
from tasks.benchmarks.carryon.report.writer import write_report
from tests.support.report import EVIL, build_synthetic, md_table_by_header


@pytest.fixture
def synthetic(tmp_path, write_config):
    cfg_path = write_config()
    cfg = load_config(cfg_path)
    wh, run_id = build_synthetic(cfg.home_path)
    return cfg, wh, run_id


def test_report_files_and_content(synthetic):
    cfg, wh, run_id = synthetic
    out = write_report(cfg, None)  # None = the latest run
    assert out == cfg.home_path / "reports" / run_id
    names = sorted(p.name for p in out.iterdir())
    assert names == ["checklist_sizes.png", "domain_changes.png", "family_turn_trends.png", "move_effects.png",
                     "move_effects_per_model.png", "oracle_vs_bc.png", "ranking_comparison.png",
                     "redundancy_per_target.png", "redundancy_per_turn.png", "report.html", "report.md",
                     "turn1_bins.png", "turn_trends.png", "utility_vs_harm.png"]
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    # Names the run, models, judges, checklist version and the unscored share.
    assert run_id in md and "openai/test-target-a" in md and "openai/test-judge" in md
    assert "clv1" in md
    cov = wh.query("SELECT * FROM judgment_coverage ORDER BY kind")
    b = cov[0]
    assert f"Unscored benutil judgments: {b['n_unscored']} of {b['n_judgments']} " \
           f"({100 * b['n_unscored'] / b['n_judgments']:.2f} %)" in md
    assert "target_error 1" in md
    # Table 2 in the report is the view's numbers.
    rows = summary_rows(wh)
    assert len(rows) == 3
    # The terminal table carries each target's scored share beside its numbers.
    cov = {r["target"]: r for r in wh.query("SELECT * FROM target_coverage")}
    for r in rows:
        assert r["benutil_scored_pct"] == round(cov[r["target"]]["scored_pct"], 1)
        assert r["safety_scored_pct"] == round(cov[r["target"]]["safety_scored_pct"], 1)
    assert f"{rows[0]['recovery_pct']:.2f}" in md
    # Three targets: the mixed models and Spearman give numbers, not "too few" notes.
    assert "Mixed linear model: Conversation utility" in md
    assert "turn1 |" in md and "n_benign_moves" in md
    assert "Smoke run" not in md


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_html_is_self_contained_and_escapes_model_text(synthetic):
    cfg, wh, run_id = synthetic
    out = write_report(cfg, run_id)
    page = (out / "report.html").read_text()
    assert "window.__pwned" not in page.split('id="browser-data">')[0]  # not in the markup
    assert "<script>window.__pwned" not in page and "<img src=x" not in page
    # No external resource: every src/href is a data URI.
    assert all(u.startswith("data:") for u in re.findall(r'(?:src|href)="([^"]*)"', page))
    data = json.loads(re.search(r'<script type="application/json" id="browser-data">(.*?)</script>',
                                page, re.S).group(1))
    assert any(t["content"] == EVIL for c in data["conversations"] for t in c["turns"])
    conv = next(c for c in data["conversations"] if c["condition"] == "BC")
    asst = [t for t in conv["turns"] if t["role"] == "assistant"]
    assert all(t["utility"] is None or 0 <= t["utility"] <= 100 for t in asst)
    # The browser's "new" items of a turn are exactly the items no earlier turn fulfilled.
    seen: set = set()
    for t in asst:
        assert not (set(t["new"]) & seen) and set(t["repeated"]) <= seen
        seen |= set(t["new"])
    assert data["items"][conv["query_id"]]["1"].startswith("Does it explain point 1")


def test_browser_written_a_chunk_at_a_time_is_the_whole(synthetic, monkeypatch):
    """The conversation browser reads and writes its conversations in chunks (so a report
    holds one chunk's text): the page is the same bytes whatever the chunk size."""
    from tasks.benchmarks.carryon.report import data

    cfg, wh, run_id = synthetic
    pages = []
    for size in (10**6, 1, 3):
        monkeypatch.setattr(data, "BROWSER_CHUNK", size)
        pages.append((write_report(cfg, run_id) / "report.html").read_bytes())
    assert pages[0] == pages[1] == pages[2]
    found = json.loads(re.search(rb'id="browser-data">(.*?)</script>', pages[0], re.S).group(1))
    assert len(found["conversations"]) == wh.count("conversations") > 3


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_too_few_targets_says_so(tmp_path, write_config):
    cfg = load_config(write_config())
    build_synthetic(cfg.home_path, n_targets=2, n_queries=4)
    md = (write_report(cfg, None) / "report.md").read_text()
    assert "Not computed: 2 target(s), a random intercept per target needs at least 3" in md
    assert "Not computed: fewer than 3 targets" in md  # Spearman
    assert "too few queries (< 3)" in md  # 4 queries over 3 categories


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_smoke_banner_for_local_gemma(tmp_path, write_config):
    cfg = load_config(write_config())
    build_synthetic(cfg.home_path, n_targets=1, n_queries=2, model_prefix="openai/local-gemma-")
    out = write_report(cfg, None)
    assert "Smoke run, not a benchmark result" in (out / "report.md").read_text()
    assert 'id="smoke-banner"' in (out / "report.html").read_text()


def test_errors_name_the_cause(tmp_path, write_config):
    cfg = load_config(write_config())
    with pytest.raises(ReportError, match="no warehouse yet"):
        write_report(cfg, None)
    wh, run_id = build_synthetic(cfg.home_path, n_targets=1, n_queries=1)
    with pytest.raises(ReportError, match="no run with run_id 'nope'"):
        write_report(cfg, "nope")
    wh.write("judgment_set_choice", [{"kind": "benutil", "judgment_set_id": "safety-1"}])
    with pytest.raises(ReportError, match="judgment_set_choice: kind 'benutil' names judgment set 'safety-1'"):
        write_report(cfg, run_id)
    assert not (cfg.home_path / "reports" / run_id).exists()  # nothing half-written


@pytest.mark.slow  # the Prefect test server (prefect_harness): the report flow
def test_report_flow_publishes_artifacts(prefect_harness, write_config):
    import asyncio

    from prefect.client.orchestration import get_client

    from flows.report import report_flow
    from tasks.engine.run import finish_run, open_run

    path = write_config()
    cfg = load_config(path)
    build_synthetic(cfg.home_path, n_targets=3, n_queries=3)
    ctx = open_run(str(path), stages="report")
    try:
        result = asyncio.run(report_flow(ctx.run_id))
    finally:
        finish_run(ctx, "succeeded")
    assert result["report"] == str(cfg.home_path / "reports" / ctx.run_id)
    assert (cfg.home_path / "reports" / ctx.run_id / "report.html").exists()

    key = "carryon-" + ctx.run_id.lower()

    async def artifacts():
        # By key: the test server is shared by the session, and an unfiltered read returns
        # only its first page (the API's default limit), which other tests' progress
        # artifacts can fill.
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        keys = [f"{key}-model-summary", f"{key}-report"]
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))

    arts = {a.key: a for a in asyncio.run(artifacts()) if a.key}
    table = arts[f"{key}-model-summary"]
    assert table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert [r["target"] for r in rows] == ["target-a", "target-b", "target-c"]
    assert arts[f"{key}-report"].type == "markdown" and ctx.run_id in arts[f"{key}-report"].data


# ----- numbers parsed out of report.md, against hand-computed values -----------------------------
# (md_table_by_header: tests/support/report.py)
def _num(cell: str):
    return None if cell == "—" else float(cell)


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_report_model_summary_numbers_are_the_hand_computed_ones(tmp_path, write_config):
    from tests.support.views import build_cases

    cfg = load_config(write_config())
    cfg.home_path.mkdir(parents=True, exist_ok=True)
    wh = build_cases(cfg.home_path / "warehouse.duckdb")  # test_views' edge-case warehouse
    wh.write("runs", [{"run_id": "run-cases", "config_hash": "h", "config_json": "{}", "seed": 0,
                       "stages": "report", "started": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                       "status": "succeeded"}])
    md = (write_report(cfg, None) / "report.md").read_text()
    rows = {r["target"]: r for r in md_table_by_header(md, "## Model summary (Table 2)")}
    assert sorted(rows) == ["C", "D"]
    got = {t: {h: _num(v) for h, v in r.items() if h != "target"} for t, r in rows.items()}
    # Worked out from the rows in tests/support/views.py (CASES), not from the views:
    # C  Turn 1: per query q3 (4 BC convs, all 0 at turn 1) = 0, q4 no checklist -> left out,
    #      q5 50 -> (0 + 50) / 2 = 25.00.  Oracle: oC3 1 of 3 items = 33.33, oC5 2 of 2 = 100
    #      -> 66.67.  BC: bC1 0/3 = 0, bC2 2/2 known = 100, bC3 2/3 = 66.67, bC4 1/1 known = 100,
    #      bC5 no checklist (left out), bC6 2/2 = 100 -> 366.67 / 5 = 73.33.  NC: none -> —.
    #      Recovery 100 * (73.33 - 25) / 66.67 = 72.50.
    #      Harm: Turn 1 per query q3 mean(1, unscored, 1, 1) = 1, q5 4 -> 2.50 (q4 has no
    #      checklist: out of the population, R11); oracle (1 + 1) / 2 = 1.00; BC max per
    #      conversation bC1 2, bC2 5 (unscored turn, but a 5), bC3 unknown (unscored turn, max
    #      3), bC4 2, bC6 4 -> 13 / 4 = 3.25; NC —.
    #      Harm mean (mean of each conversation's scored turns, then over conversations):
    #      oracle (1 + 1) / 2 = 1.00; BC bC1 (1, 2) 1.5, bC2 (5, 3) 4, bC3 (1, 3) 2, bC4 (1, 2, 2)
    #      5/3, bC6 (4, 4) 4 -> 79/6 / 5 = 2.63 (bC3 counts: its mean is known although its max
    #      is not); NC —.
    # D  Turn 1 0; oracle 0/3 = 0; BC bD1 1/3 = 33.33; NC nD1 0/3 = 0.00 (a zero, not —);
    #      Recovery: oracle 0 -> —.  Harm: 1, 1, 2, 1; harm mean: oracle 1, BC (1, 2) 1.5, NC 1.
    assert got == {
        "C": {"Turn-1 U%": 25.00, "Oracle U%": 66.67, "BC U%": 73.33, "NC U%": None,
              "Recovery%": 72.50, "Turn-1 harm": 2.50, "Oracle harm": 1.00, "Oracle harm mean": 1.00,
              "BC harm": 3.25, "BC harm mean": 2.63, "NC harm": None, "NC harm mean": None},
        "D": {"Turn-1 U%": 0.00, "Oracle U%": 0.00, "BC U%": 33.33, "NC U%": 0.00,
              "Recovery%": None, "Turn-1 harm": 1.00, "Oracle harm": 1.00, "Oracle harm mean": 1.00,
              "BC harm": 2.00, "BC harm mean": 1.50, "NC harm": 1.00, "NC harm mean": 1.00},
    }
    # The status counts: 11 completed, 1 simulator error (nC1, left out of the table).
    assert "Conversations by status: completed 11, simulator_error 1" in md
