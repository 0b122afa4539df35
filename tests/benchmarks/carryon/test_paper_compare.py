"""Beside the paper (tasks/benchmarks/carryon/report/paper_compare.py): a run's numbers next to the paper's, on a
fixture warehouse whose every number is worked out by hand below, through the views, the
report (report.md, report.html) and ``carryon report --compare paper``; the paper's data file
as transcribed; the per-domain and mixed-model comparisons on hand-made inputs; sparse runs."""

from __future__ import annotations

import datetime as dt
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tasks.config import load_config
from tasks.benchmarks.carryon.report import paper_compare as pc
from tasks.benchmarks.carryon.report.data import load
from tasks.benchmarks.carryon.report.stat import Stat
from tests.support.factories import as_episodes
from warehouse import Warehouse

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
RUN_ID = "20250101-000000-paper-0001"
N_ITEMS = 10
# Per target, per query (q1, q2): (Turn-1 items, Turn-1 harm, oracle items, oracle harm,
# BC items after its second turn, BC turn-2 harm, NC items after its second turn, NC turn-2
# harm). Turn 1 fulfils items 1..k of the query's 10 (BC and NC share it); a later turn
# fulfils items 1..k as well, so a conversation's utility is 10 x its last count.
TARGETS = {
    "alpha": [(3, 1, 7, 2, 8, 3, 5, 2), (4, 2, 8, 1, 7, 3, 4, 2)],
    "beta": [(2, 2, 9, 3, 6, 4, 3, 3)] * 2,
    "gamma": [(2, 3, 5, 2, 5, 5, 2, 3)] * 2,
    "delta": [(5, 1, 6, 1, 9, 2, 6, 1)] * 2,
}
# alpha and beta (any case) and gamma link to the paper's rows; delta names no row.
PAPER_NAMES = {"alpha": "GPT-5-mini", "beta": "deepseek-v3.1", "gamma": "Mixtral-8x7B", "delta": "GPT-6"}

# ----- the hand computation ----------------------------------------------------------------------
# alpha (two queries that differ): with two queries a replicate draws (q1, q1), (q1, q2) or
# (q2, q2) -- a quarter, a half, a quarter of 1000 draws -- so each 95 % interval runs from the
# all-q1 value to the all-q2 value (whichever is lower to whichever is higher).
#   Turn-1 U  30, 40 -> 35 [30, 40]        paper 37.6: inside, -2.6
#   Turn-1 harm 1, 2 -> 1.5 [1, 2]         paper 1.5: inside, 0
#   Oracle U  70, 80 -> 75 [70, 80]        paper 72.1: inside, +2.9
#   Oracle harm 2, 1 -> 1.5 [1, 2]         paper 1.6: inside, -0.1
#   BC U      80, 70 -> 75 [70, 80]        paper 74.8: inside, +0.2
#   BC change 50, 30 -> 40 [30, 50]        paper 37.2: inside, +2.8
#   Recovery 100 x 40 / 75 = 53.33; all-q1 100 x 50 / 70 = 71.43, all-q2 100 x 30 / 80 = 37.5
#            -> [37.5, 71.43]              paper 51.6: inside, +1.73
#   BC harm   max(1, 3), max(2, 3) -> 3 [3, 3]    paper 2.8: outside, +0.2
#   BC harm change 2, 1 -> 1.5 [1, 2]      paper 1.2: inside, +0.3
#   NC U      50, 40 -> 45 [40, 50]        paper 48.6: inside, -3.6
#   NC change 20, 0 -> 10 [0, 20]          paper 11.0: inside, -1.0
#   NC harm   2, 2 -> 2 [2, 2]             paper 2.0: inside (an end counts), 0
#   NC harm change 1, 0 -> 0.5 [0, 1]      paper 0.5: inside, 0
#   -> 12 of 13 inside.
# beta (two equal queries: zero-width intervals): Turn 1 20 / 2, oracle 90 / 3, BC 60 / 4,
#   NC 30 / 3; changes BC +40 / +2, NC +10 / +1; Recovery 100 x 40 / 90 = 44.44. The paper's
#   DeepSeek-V3.1 row matches none: 0 of 13 (e.g. Turn-1 U -9.6, Recovery 44.44 - 98.0 = -53.56).
# gamma: Turn 1 20 / 3, oracle 50 / 2, BC 50 / 5, NC 20 / 3; changes BC +30 / +2, NC 0 / 0;
#   Recovery 100 x 30 / 50 = 60. Paper Mixtral-8x7B: Turn-1 U 20.0 inside [20, 20] (an end),
#   the rest outside: 1 of 13.
HAND = {
    "alpha": {
        "turn1_utility": (35.0, 30.0, 40.0, 37.6, True), "turn1_harm": (1.5, 1.0, 2.0, 1.5, True),
        "oracle_utility": (75.0, 70.0, 80.0, 72.1, True), "oracle_harm": (1.5, 1.0, 2.0, 1.6, True),
        "bc_utility": (75.0, 70.0, 80.0, 74.8, True), "bc_utility_change": (40.0, 30.0, 50.0, 37.2, True),
        "recovery_pct": (100 * 40 / 75, 37.5, 100 * 50 / 70, 51.6, True),
        "bc_harm": (3.0, 3.0, 3.0, 2.8, False), "bc_harm_change": (1.5, 1.0, 2.0, 1.2, True),
        "nc_utility": (45.0, 40.0, 50.0, 48.6, True), "nc_utility_change": (10.0, 0.0, 20.0, 11.0, True),
        "nc_harm": (2.0, 2.0, 2.0, 2.0, True), "nc_harm_change": (0.5, 0.0, 1.0, 0.5, True),
    },
    "beta": {"turn1_utility": (20.0, 29.6), "recovery_pct": (100 * 40 / 90, 98.0),
             "bc_utility_change": (40.0, 36.6), "nc_harm": (3.0, 3.1)},
    "gamma": {"turn1_utility": (20.0, 20.0), "recovery_pct": (60.0, 62.6), "bc_harm": (5.0, 3.9)},
}
# Rankings of alpha, beta, gamma (utility: highest first; harm: lowest first):
#   Turn-1 U ours 35, 20, 20 -> alpha > beta = gamma; paper 37.6, 29.6, 20.0 -> alpha > beta > gamma;
#       ranks (1, 2.5, 2.5) vs (1, 2, 3): rho = 1.5 / sqrt(2 x 1.5) = sqrt(3)/2
#   Oracle U ours 75, 90, 50 -> beta > alpha > gamma; paper 72.1, 67.6, 40.0 -> alpha > beta > gamma;
#       d = (1, -1, 0): rho = 1 - 6 x 2 / (3 x 8) = 0.5
#   BC harm ours 3, 4, 5 -> alpha > beta > gamma; paper 2.8, 3.9, 3.9 -> alpha > beta = gamma: sqrt(3)/2
#   NC harm ours 2, 3, 3 -> alpha > beta = gamma; paper 2.0, 3.1, 3.3: sqrt(3)/2
#   every other ranking agrees: rho = 1.
HALF_ROOT3 = math.sqrt(3) / 2
RANKS = {
    ("Turn 1", "utility"): ("alpha > beta = gamma", "alpha > beta > gamma", HALF_ROOT3),
    ("Turn 1", "harm"): ("alpha > beta > gamma", "alpha > beta > gamma", 1.0),
    ("Oracle", "utility"): ("beta > alpha > gamma", "alpha > beta > gamma", 0.5),
    ("Oracle", "harm"): ("alpha > gamma > beta", "alpha > gamma > beta", 1.0),
    ("BC", "utility"): ("alpha > beta > gamma", "alpha > beta > gamma", 1.0),
    ("BC", "harm"): ("alpha > beta > gamma", "alpha > beta = gamma", HALF_ROOT3),
    ("NC", "utility"): ("alpha > beta > gamma", "alpha > beta > gamma", 1.0),
    ("NC", "harm"): ("alpha > beta = gamma", "alpha > beta > gamma", HALF_ROOT3),
}
LEAD = ("This run is smaller than the paper's: 2 queries (the paper: 398); lengths 4 (the paper: "
        "4, 6, 8, 10, 12); 2 BC/NC conversations per query and target (the paper: 15); 3 of the "
        "paper's 14 targets.")


def build_fixture(home, targets=TARGETS, paper_names=PAPER_NAMES) -> Warehouse:
    """The warehouse the hand computation above describes (the shapes the pipeline writes)."""
    wh = Warehouse(home / "warehouse.duckdb").init()
    entries = [{"name": t, "model": f"openai/test-{t}", **({"paper_name": paper_names[t]}
                                                          if t in paper_names else {})} for t in targets]
    config = {"models": {"targets": entries, "user_simulator": {"model": "openai/test-sim"},
                         "benutil_judge": {"model": "openai/test-judge"},
                         "safety_judge": {"model": "openai/test-judge"}}}
    rows: dict[str, list] = {k: [] for k in ("runs", "queries", "checklists", "checklist_items",
                                             "judgment_sets", "conversations", "turns",
                                             "item_judgments", "safety_judgments")}
    rows["runs"].append({"run_id": RUN_ID, "config_hash": "h", "config_json": json.dumps(config),
                         "seed": 0, "stages": "report", "started": NOW, "status": "running"})
    for kind in ("benutil", "safety"):
        rows["judgment_sets"].append({
            "judgment_set_id": f"{kind}-1", "kind": kind, "judges": '["openai/test-judge"]',
            "prompt_version": "pv1", "checklist_version": "clv1" if kind == "benutil" else None,
            "sees_history": False, "created": NOW, "run_id": RUN_ID})
    for qi in range(2):
        qid = f"q{qi + 1}"
        rows["queries"].append({"query_id": qid, "source": "sample", "category": "cat-x",
                                "query": f"How do I do thing {qi}?"})
        rows["checklists"].append({"query_id": qid, "checklist_version": "v1", "n_items": N_ITEMS,
                                   "created": NOW, "run_id": RUN_ID})
        rows["checklist_items"] += [{"query_id": qid, "checklist_version": "v1", "item_id": i,
                                     "question": f"Item {i}?", "category": "Practical Advice",
                                     "source_answers": "[]"} for i in range(1, N_ITEMS + 1)]
        for target, per_query in targets.items():
            k1, h1, ko, ho, kb, hb, kn, hn = per_query[qi]
            flows = [("oracle", "oracle", [("oracle", ko, ho)]),
                     ("BC", "benign_justification", [("query", k1, h1), ("benign_justification", kb, hb)]),
                     ("NC", "pushback", [("query", k1, h1), ("pushback", kn, hn)])]
            for cond, flow, turns in flows:
                cid = f"{target}-{qid}-{cond}"
                n_moves = len(turns) - 1
                rows["conversations"].append({
                    "conversation_id": cid, "target": target, "query_id": qid,
                    "flow_id": "oracle" if cond == "oracle" else flow, "condition": cond,
                    "length": 2 * (n_moves + 1), "n_moves": n_moves, "status": "completed",
                    "error": None, "n_turns": 2 * len(turns), "run_id": RUN_ID})
                for k, (move, n_ful, harm) in enumerate(turns, start=1):
                    rows["turns"] += [
                        {"conversation_id": cid, "position": 2 * k - 2, "role": "user", "model_turn": k,
                         "move": move, "content": f"user {move}"},
                        {"conversation_id": cid, "position": 2 * k - 1, "role": "assistant",
                         "model_turn": k, "move": move, "content": f"answer {k}"}]
                    rows["item_judgments"] += [
                        {"judgment_set_id": "benutil-1", "conversation_id": cid, "position": 2 * k - 1,
                         "item_id": i, "query_id": qid, "model_turn": k, "fulfilled": i <= n_ful}
                        for i in range(1, N_ITEMS + 1)]
                    rows["safety_judgments"].append({
                        "judgment_set_id": "safety-1", "conversation_id": cid, "position": 2 * k - 1,
                        "model_turn": k, "score": harm})
    wh.write_many(list(as_episodes(rows).items()))
    return wh


@pytest.fixture
def fixture_run(tmp_path, write_config):
    cfg_path = write_config()
    cfg = load_config(cfg_path)
    cfg.home_path.mkdir(parents=True, exist_ok=True)
    wh = build_fixture(cfg.home_path)
    return cfg_path, cfg, wh


def _missing(x) -> bool:
    """No value: None, or the NaN a float column holds for it."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def _by_cell(stat: Stat) -> dict:
    return {(r["target"], r["cell"]): r for r in stat.table.to_dict("records")}


# ----- the paper's data file ---------------------------------------------------------------------
def test_the_papers_data_is_table_2_as_printed():
    paper = pc.load_paper()
    assert "2604.27093" in paper.source and "Table 2" in paper.table2_source
    assert "Figure 22" in paper.domains_source and "Tables 3" in paper.mixed_source
    assert len(paper.table2) == 14 and paper.design["queries"] == 398
    # Spot cells, as printed.
    assert paper.table2["GPT-OSS-120b"]["recovery_pct"] == 166.4
    assert paper.table2["Qwen3-Next-80B"]["bc_harm_change"] == 2.4
    assert paper.table2["Claude-Haiku-4.5"]["bc_harm_change"] == 0.6
    assert paper.table2["GPT-5-mini"]["turn1_utility"] == 37.6
    # A transcription check: each printed change is the condition minus Turn 1 (to rounding),
    # and Recovery% is the stated formula except in the three cells that are BC / Oracle.
    for name, v in paper.table2.items():
        for cond in ("bc", "nc"):
            for m in ("utility", "harm"):
                assert abs(v[f"{cond}_{m}"] - v[f"turn1_{m}"] - v[f"{cond}_{m}_change"]) <= 0.1 + 1e-9, (name, cond, m)
        formula = 100 * (v["bc_utility"] - v["turn1_utility"]) / v["oracle_utility"]
        ratio = 100 * v["bc_utility"] / v["oracle_utility"]
        if name in paper.recovery_as_bc_over_oracle:
            assert abs(ratio - v["recovery_pct"]) < 0.2, name
        else:
            assert abs(formula - v["recovery_pct"]) < 0.35, name
    assert paper.mixed["utility"]["n_benign_moves"] == (10.339, 0.060)
    assert paper.mixed["safety"]["group_var"] == 0.209


def test_paper_config_links_all_fourteen_targets_to_their_rows():
    import yaml

    from tasks.config import load_config as lc

    path = pc.PAPER_FILE.parents[3] / "configs" / "paper.yaml"
    doc = yaml.safe_load(path.read_text())
    links, unknown = pc.paper_links(doc)
    assert unknown == {} and len(links) == 14
    assert sorted(links.values()) == sorted(pc.load_paper().table2)
    # paper_name is a label: another one, or none, leaves the config hash as it is.
    cfg = lc(path)
    other = cfg.model_copy(deep=True)
    for e in other.models.targets:
        e.paper_name = None
    assert other.config_hash() == cfg.config_hash()
    other.models.targets[0].family = "changed"  # (a hashed field does move it)
    assert other.config_hash() != cfg.config_hash()


def test_a_malformed_paper_file_names_the_field(tmp_path):
    bad = tmp_path / "paper.yaml"
    text = pc.PAPER_FILE.read_text().replace("GPT-5-mini:       [37.6, 1.5,", "GPT-5-mini:       [1.5,")
    bad.write_text(text)
    with pytest.raises(pc.PaperDataError, match=r"table2\.rows\.GPT-5-mini: expected 13 numbers"):
        pc.load_paper(bad)


# ----- Table 2, rankings and the run's size on the fixture ----------------------------------------
def test_table2_cells_beside_the_paper_are_the_hand_computed_ones(fixture_run):
    _, _, wh = fixture_run
    data = load(wh, None)
    stat = pc.table2(data.conv, data.config)
    got = _by_cell(stat)
    for cell, (ours, lo, hi, paper, flag) in HAND["alpha"].items():
        r = got[("alpha", cell)]
        assert r["paper_name"] == "GPT-5-mini"
        assert r["ours"] == pytest.approx(ours) and r["paper"] == paper, cell
        assert r["ci_lo"] == pytest.approx(lo) and r["ci_hi"] == pytest.approx(hi), cell
        assert r["difference"] == pytest.approx(ours - paper), cell
        assert r["paper_in_ci"] is flag, cell
    for target in ("beta", "gamma"):
        for cell, (ours, paper) in HAND[target].items():
            r = got[(target, cell)]
            assert r["ours"] == pytest.approx(ours) and r["paper"] == paper
            assert r["difference"] == pytest.approx(ours - paper)
            assert r["ci_lo"] == pytest.approx(ours) and r["ci_hi"] == pytest.approx(ours)  # equal queries
    assert got[("beta", "recovery_pct")]["difference"] == pytest.approx(100 * 40 / 90 - 98.0)
    assert got[("gamma", "turn1_utility")]["paper_in_ci"] is True  # 20.0 at both ends of [20, 20]
    assert stat.extra["inside"] == {"alpha": (12, 13), "beta": (0, 13), "gamma": (1, 13)}
    assert "alpha (GPT-5-mini) 12 of 13" in stat.note
    # delta names no row: ours only (its Turn-1 utility 50), no paper value, no flag.
    d = got[("delta", "turn1_utility")]
    assert d["ours"] == pytest.approx(50.0) and _missing(d["paper"]) and _missing(d["paper_name"])
    assert _missing(d["difference"]) and _missing(d["paper_in_ci"])
    assert "target delta: paper_name 'GPT-6' is not a row of the paper's Table 2" in stat.note
    # The intervals are Table 2's own (table2_ci): the same replicates.
    from tasks.benchmarks.carryon.report.table2_ci import table2_ci

    ci = {(r["target"], r["metric"]): r for r in table2_ci(data.conv).table.to_dict("records")}
    for (t, cell), r in got.items():
        if (t, cell) in ci:
            assert (r["ci_lo"], r["ci_hi"]) == (ci[(t, cell)]["ci_lo"], ci[(t, cell)]["ci_hi"])


def test_rankings_beside_the_paper_and_spearman(fixture_run):
    _, _, wh = fixture_run
    data = load(wh, None)
    stat = pc.rankings(data.summary, data.config)
    got = {(r["condition"], r["measure"]): r for r in stat.table.to_dict("records")}
    assert set(got) == set(RANKS)
    for k, (ours, paper, rho) in RANKS.items():
        assert got[k]["ours (best first)"] == ours, k
        assert got[k]["paper (best first)"] == paper, k
        assert got[k]["rho"] == pytest.approx(rho), k
        assert got[k]["n_targets"] == 3  # delta has no paper row: not ranked


def test_the_section_says_first_that_the_run_is_smaller(fixture_run):
    _, _, wh = fixture_run
    data = load(wh, None)
    stat = pc.scale(data.conv, data.config)
    assert stat.extra["lead"].startswith(LEAD)
    assert stat.extra["linked"] == ["alpha", "beta", "gamma"] and stat.extra["unlinked"] == ["delta"]
    rows = {r["what"]: (r["this run"], r["the paper"]) for r in stat.table.to_dict("records")}
    assert rows["queries"] == ("2", "398")
    assert rows["lengths (turns, both sides)"] == ("4", "4, 6, 8, 10, 12")
    assert rows["BC/NC conversations per query and target"] == ("2", "15")
    assert rows["targets with a paper row"] == ("3", "14")


def test_a_run_of_the_papers_size_says_so():
    # 398 queries x 5 lengths x 3 BC/NC conversations, 14 linked targets: nothing smaller.
    paper = pc.load_paper()
    names = list(paper.table2)
    rows = [{"target": f"t{i}", "query_id": f"q{q}", "condition": c, "length": n}
            for i in range(14) for q in range(398) for n in (4, 6, 8, 10, 12) for c in ("BC", "BC", "NC")]
    conv = pd.DataFrame(rows)
    config = {"models": {"targets": [{"name": f"t{i}", "paper_name": names[i]} for i in range(14)]}}
    stat = pc.scale(conv, config)
    assert stat.extra["smaller"] == [] and stat.extra["lead"].startswith("This run is the paper's size")


# ----- the report and the command line ---------------------------------------------------------
def _section(md: str) -> str:
    start = md.index("## Beside the paper")
    end = md.index("\n## ", start + 3)
    return md[start:end]


def _md_rows(section: str, title: str) -> list[dict]:
    lines = section.split("\n")
    i = lines.index(f"### {title}")
    table = []
    for line in lines[i + 1:]:
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif table:
            break
    return [dict(zip(table[0], r, strict=True)) for r in table[2:]]


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_report_md_and_html_have_the_section(fixture_run):
    from tasks.benchmarks.carryon.report.writer import write_report

    _, cfg, _ = fixture_run
    folder = write_report(cfg, None)
    md = (folder / "report.md").read_text()
    sec = _section(md)
    # It says first that the run is smaller, before any table.
    assert sec.index(LEAD) < sec.index("|")
    assert md.index("## Model summary (Table 2)") < md.index("## Beside the paper") < md.index("## Analyses")
    rows = {(r["target"], r["cell"]): r for r in _md_rows(sec, pc.TITLES["paper_table2"])}
    r = rows[("alpha", "turn1_utility")]
    assert (r["ours"], r["ci_lo"], r["ci_hi"], r["paper"], r["difference"], r["paper_in_ci"]) == (
        "35.00", "30.00", "40.00", "37.60", "-2.60", "yes")
    r = rows[("alpha", "bc_harm")]
    assert (r["ours"], r["paper"], r["difference"], r["paper_in_ci"]) == ("3.00", "2.80", "0.20", "no")
    r = rows[("beta", "recovery_pct")]
    assert (r["ours"], r["paper"], r["difference"]) == ("44.44", "98.00", "-53.56")
    r = rows[("delta", "turn1_utility")]
    assert (r["ours"], r["paper"], r["difference"], r["paper_in_ci"]) == ("50.00", "—", "—", "—")
    ranks = {(r["condition"], r["measure"]): r for r in _md_rows(sec, pc.TITLES["paper_rankings"])}
    assert ranks[("Oracle", "utility")]["rho"] == "0.50"
    assert ranks[("BC", "harm")]["paper (best first)"] == "alpha > beta = gamma"
    # Too few queries and conversations for the per-domain and mixed-model comparisons: why.
    assert "Not computed: no domain has at least 3 queries" in sec
    assert ("Not computed: conversation safety (harm max): 12 conversation(s), at least 20 needed; "
            "conversation utility (%): 12 conversation(s), at least 20 needed.") in sec
    # The section's statistics are not repeated under Analyses.
    assert md.count(pc.TITLES["paper_table2"]) == 1
    html = (folder / "report.html").read_text()
    assert '<section id="beside-paper"><h2>Beside the paper</h2>' in html
    assert html.index('id="model-summary"') < html.index('id="beside-paper"') < html.index("<h2>Analyses</h2>")
    assert "This run is smaller than the paper&#x27;s: 2 queries (the paper: 398)" in html
    assert "<td>alpha</td><td>GPT-5-mini</td><td>turn1_utility</td><td>35.00</td><td>30.00</td>" \
           "<td>40.00</td><td>37.60</td><td>-2.60</td><td>yes</td>" in html


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_carryon_report_compare_paper_prints_the_tables(fixture_run):
    from flows.cli import app

    cfg_path, _, _ = fixture_run
    r = CliRunner().invoke(app, ["report", "--config", str(cfg_path), "--compare", "paper"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "## Beside the paper" in out and LEAD in out
    sec = _section(out + "\n## end")
    rows = {(x["target"], x["cell"]): x for x in _md_rows(sec, pc.TITLES["paper_table2"])}
    assert (rows[("alpha", "nc_harm")]["ours"], rows[("alpha", "nc_harm")]["paper_in_ci"]) == ("2.00", "yes")
    assert (rows[("gamma", "recovery_pct")]["ours"], rows[("gamma", "recovery_pct")]["difference"]) == (
        "60.00", "-2.60")
    assert re.search(r"^report: .*" + RUN_ID, out, re.M)
    bad = CliRunner().invoke(app, ["report", "--config", str(cfg_path), "--compare", "papers"])
    assert bad.exit_code == 2 and "--compare: 'papers'" in bad.output


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_a_run_without_paper_names_says_why(tmp_path, write_config):
    from tasks.benchmarks.carryon.report.writer import write_report

    cfg = load_config(write_config())
    cfg.home_path.mkdir(parents=True, exist_ok=True)
    build_fixture(cfg.home_path, paper_names={})
    md = (write_report(cfg, None) / "report.md").read_text()
    sec = _section(md)
    for key in ("paper_table2", "paper_rankings", "paper_domains", "paper_mixed_models"):
        assert f"### {pc.TITLES[key]}\n\n_Not computed: no target of this run names a row of the paper's " \
               "Table 2" in sec, key
    assert "0 of the paper's 14 targets" in sec


def test_too_few_linked_targets_for_a_ranking(fixture_run):
    _, _, wh = fixture_run
    data = load(wh, None)
    config = {"models": {"targets": [{"name": "alpha", "paper_name": "GPT-5-mini"},
                                     {"name": "beta", "paper_name": "DeepSeek-V3.1"}]}}
    stat = pc.rankings(data.summary, config)
    assert stat.table is None and stat.note == ("Not computed: 2 target(s) with a paper row, a ranking "
                                                "needs at least 3.")


# ----- per domain and mixed models on hand-made inputs ------------------------------------------------
def _domain_conv():
    # (domain, [(Turn-1 U, BC U, NC U, Turn-1 harm, BC harm)] per query)
    spec = {
        "Hate Speech Generation": [(10, 50, 30, 1, 3), (20, 60, 35, 1, 3), (30, 70, 40, 1, 2)],
        "Assistance with Crimes or Torts": [(20, 40, 31, 2, 4)] * 3,
        "Potentially Inappropriate Topics": [(10, 40, 22.5, 1, 2)] * 3,
        "Potentially Unqualified Advice": [(10, 40, 20, 1, 2)] * 2,  # too few queries
    }
    rows, queries = [], []
    for di, (dom, qs) in enumerate(spec.items()):
        for qi, (t1, bc, nc, h1, hb) in enumerate(qs):
            qid = f"d{di}q{qi}"
            queries.append({"query_id": qid, "category": "x", "domain": dom})
            for target, shift in (("alpha", 0.0), ("other", 37.0)):  # other: no paper row
                base = {"target": target, "query_id": qid, "category": "x",
                        "turn1_utility": t1 + shift, "turn1_harm": h1}
                rows.append({**base, "condition": "BC", "utility": bc + shift, "harm_max": hb})
                rows.append({**base, "condition": "NC", "utility": nc + shift, "harm_max": h1})
    return pd.DataFrame(rows), pd.DataFrame(queries)


def test_per_domain_beside_figure_22_by_hand():
    conv, queries = _domain_conv()
    config = {"models": {"targets": [{"name": "alpha", "paper_name": "GPT-5-mini"}, {"name": "other"}]}}
    stat = pc.domains(conv, queries, config)
    got = {(r["domain"], r["measure"]): r for r in stat.table.to_dict("records")}
    hs, ct, it, ua = ("Hate Speech Generation", "Assistance with Crimes or Torts",
                      "Potentially Inappropriate Topics", "Potentially Unqualified Advice")
    # Hate Speech: Turn 1 (10 + 20 + 30) / 3 = 20 vs 13.8; BC (50 + 60 + 70) / 3 = 60 vs 58.1;
    # NC change 35 - 20 = 15, outside 10.3-12.5; BC harm change 8/3 - 1 = 5/3 vs 1.7.
    assert got[(hs, "turn1_utility")]["ours"] == pytest.approx(20.0)
    assert got[(hs, "turn1_utility")]["difference"] == pytest.approx(6.2)
    assert got[(hs, "bc_utility")]["ours"] == pytest.approx(60.0)
    assert got[(hs, "bc_utility")]["difference"] == pytest.approx(1.9)
    assert got[(hs, "nc_utility_change")]["ours"] == pytest.approx(15.0)
    assert got[(hs, "nc_utility_change")]["within_paper_range"] is False
    assert got[(hs, "nc_utility_change")]["paper"] == "10.3–12.5"
    assert got[(hs, "bc_harm_change")]["difference"] == pytest.approx(5 / 3 - 1.7)
    # Crimes or Torts: Turn 1 20 vs 17.2 (+2.8); BC 40 vs 55.9 (-15.9); NC +11 inside; harm +2 vs 1.7.
    assert got[(ct, "turn1_utility")]["difference"] == pytest.approx(2.8)
    assert got[(ct, "bc_utility")]["difference"] == pytest.approx(-15.9)
    assert got[(ct, "nc_utility_change")]["within_paper_range"] is True
    assert got[(ct, "bc_harm_change")]["difference"] == pytest.approx(0.3)
    # Inappropriate Topics: BC change 30 vs 33.4; NC change 12.5, the range's end: inside; harm +1 vs 1.18.
    assert got[(it, "bc_utility_change")]["difference"] == pytest.approx(-3.4)
    assert got[(it, "nc_utility_change")]["within_paper_range"] is True
    assert got[(it, "bc_harm_change")]["difference"] == pytest.approx(1 - 1.18)
    # Unqualified Advice has two queries: no number, and why.
    assert _missing(got[(ua, "bc_utility_change")]["ours"])
    assert got[(ua, "bc_utility_change")]["note"] == "too few queries (< 3)"
    assert "pooled over the 1 target(s) with a paper row" in stat.note


def _fit(key, rows, group_var):
    tab = pd.DataFrame(rows, columns=["term", "coef", "std_err", "ci_low", "ci_high"])
    return Stat(key, tab, "", extra={"group_var": group_var}, key=key)


def test_mixed_models_beside_tables_3_and_4_by_hand():
    conv = pd.DataFrame({"target": ["alpha", "beta", "gamma"], "query_id": ["q"] * 3,
                         "condition": ["BC"] * 3})
    config = {"models": {"targets": [{"name": t, "paper_name": p} for t, p in
                                     (("alpha", "GPT-5-mini"), ("beta", "DeepSeek-V3.1"),
                                      ("gamma", "Mixtral-8x7B"))]}}
    safety = _fit("mixed_model_harm_max", [("Intercept", 1.5, 0.1, 1.304, 1.696),
                                           ("turn1", 0.56, 0.0025, 0.555, 0.565),
                                           ("n_benign_moves", 0.30, 0.005, 0.29, 0.31),
                                           ("n_turns", 0.082, 0.0, 0.082, 0.082)], 0.25)
    utility = Stat("u", None, "Not computed: 3 target(s), too few.", key="mixed_model_utility")
    stat = pc.mixed_models(conv, config, [utility, safety])  # every target linked: these fits
    got = {(r["outcome"], r["term"]): r for r in stat.table.to_dict("records")}
    s = "conversation safety (harm max)"
    # Intercept 1.5 vs 1.303: +0.197, and 1.303 is just below our interval [1.304, 1.696].
    assert got[(s, "Intercept")]["difference"] == pytest.approx(0.197)
    assert got[(s, "Intercept")]["paper_in_ci"] is False
    assert got[(s, "Turn-1 score")]["difference"] == pytest.approx(-0.001)
    assert got[(s, "Turn-1 score")]["paper_in_ci"] is True
    assert got[(s, "N benign moves")]["paper_in_ci"] is False
    assert got[(s, "N turns")]["paper_in_ci"] is True  # 0.082 in [0.082, 0.082]
    assert got[(s, "Intercept")]["paper_se"] == 0.123 and got[(s, "Intercept")]["ours_se"] == 0.1
    assert got[(s, "group variance")]["difference"] == pytest.approx(0.25 - 0.209)
    u = "conversation utility (%)"
    assert _missing(got[(u, "N benign moves")]["ours"]) and got[(u, "N benign moves")]["paper"] == 10.339
    assert got[(u, "group variance")]["paper"] == 62.939
    assert "Not fitted: conversation utility (%): 3 target(s), too few." in stat.note


def test_mixed_models_are_fitted_on_the_linked_targets_only():
    from tasks.benchmarks.carryon.report.analyses import mixed_models

    rng = np.random.default_rng(0)
    rows = []
    for ti, target in enumerate(("a", "b", "c", "d", "other")):
        for i in range(12):
            t1 = float(rng.integers(0, 60))
            nb, length = int(rng.integers(0, 4)), int(rng.choice([4, 6, 8]))
            shift = 400.0 if target == "other" else 3.0 * ti
            rows.append({"target": target, "query_id": f"q{i}", "condition": "BC" if nb else "NC",
                         "turn1_utility": t1, "turn1_harm": 1 + i % 3, "n_benign_moves": nb,
                         "length": length,
                         "utility": shift + 10 + 0.5 * t1 + 8 * nb + 0.3 * length + rng.normal(0, 2),
                         "harm_max": 1 + 0.02 * t1 + 0.3 * nb + 0.05 * length + rng.normal(0, 0.2)
                         + (2 if target == "other" else 0)})
    conv = pd.DataFrame(rows)
    config = {"models": {"targets": [{"name": t, "paper_name": p} for t, p in
                                     zip("abcd", ("GPT-5-mini", "GPT-5.4", "Qwen3-32B", "OLMo-3-7B"))]}}
    everyone = mixed_models(conv)
    stat = pc.mixed_models(conv, config, everyone)  # other has no row: refitted without it
    linked = {s.key: s.table.set_index("term") for s in mixed_models(conv[conv["target"] != "other"])}
    got = {(r["outcome"], r["term"]): r["ours"] for r in stat.table.to_dict("records")}
    assert got[("conversation utility (%)", "N benign moves")] == pytest.approx(
        linked["mixed_model_utility"].loc["n_benign_moves", "coef"])
    assert got[("conversation safety (harm max)", "Intercept")] == pytest.approx(
        linked["mixed_model_harm_max"].loc["Intercept", "coef"])


# ----- sparse runs: a note saying why, never a crash ---------------------------------------------------
def _sparse_variants(conv: pd.DataFrame) -> dict[str, pd.DataFrame]:
    fol = conv["condition"].isin(["BC", "NC"])
    return {
        "oracle only": conv[~fol],
        "BC/NC only": conv[fol],
        "one query": conv[conv["query_id"] == "q1"],
        "one linked target": conv[conv["target"].isin(["alpha", "delta"])],
        "nothing scored": conv.assign(utility=np.nan, harm_max=np.nan, harm_mean=np.nan,
                                      turn1_utility=np.nan, turn1_harm=np.nan),
        "no conversations": conv.iloc[0:0],
    }


@pytest.mark.parametrize("variant", ["oracle only", "BC/NC only", "one query", "one linked target",
                                     "nothing scored", "no conversations"])
def test_sparse_runs_give_numbers_or_say_why(fixture_run, variant):
    _, _, wh = fixture_run
    data = load(wh, None)
    conv = _sparse_variants(data.conv)[variant]
    summary = data.summary[data.summary["target"].isin(set(conv["target"]))]
    if variant == "nothing scored":
        summary = summary.assign(**{c: np.nan for c in summary.columns if c != "target"})
    stats = [pc.scale(conv, data.config), pc.table2(conv, data.config),
             pc.rankings(summary, data.config), pc.domains(conv, data.queries, data.config),
             pc.mixed_models(conv, data.config)]
    for s in stats:
        assert s.table is not None or s.note.startswith("Not computed: "), (s.key, s.note)
    if variant == "no conversations":
        assert all(s.table is None for s in stats)
    if variant == "one query":  # one query: no interval, so no flag
        t = stats[1].table
        assert t["ci_lo"].isna().all() and t["paper_in_ci"].map(_missing).all()
    if variant == "nothing scored":
        assert stats[2].note == ("Not computed: no condition has 3 targets with a paper row and a "
                                 "value of ours.")
    if variant == "one linked target":
        assert stats[2].note == ("Not computed: 1 target(s) with a paper row, a ranking needs at "
                                 "least 3.")
