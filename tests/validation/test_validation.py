"""Human validation (carryon validate): agreement arithmetic checked by hand, the stratified
samples (Ben-Util's and safety's over the benchmark's verdicts; CarryOnBench's naturalness
study, its own kind), import (validation, idempotence, one-line errors) and the report end to
end with scripted synthetic annotators of known agreement."""

from __future__ import annotations

import hashlib
import json
import math
import random

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tasks.config import load_config
from tasks.validation import ValidationError
from tasks.validation import agreement as ag
from tasks.validation.page import page_data
from tasks.validation.sample import draw_sample
from tests.support.report import build_synthetic

runner = CliRunner()


# ----- the arithmetic, by hand -----------------------------------------------------------------
def test_kappa_and_alpha_match_hand_computed_values():
    a = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    b = [1, 1, 1, 1, 0, 0, 0, 0, 0, 1]
    # Cohen: agreements at units 0-3 and 6-8 -> p_o = 7/10. A says 1 six times, B five times:
    # p_e = 0.6*0.5 + 0.4*0.5 = 0.5. kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    assert ag.cohen_kappa(a, b) == pytest.approx(0.4)
    # Krippendorff (nominal, 2 coders, no missing): n = 20 values, n_1 = 11, n_0 = 9. Three
    # units disagree, each adds 1/(m-1) = 1 to o_01 and to o_10: D_o = 6/20 = 0.3.
    # D_e = 2 n_0 n_1 / (n (n-1)) = 198/380. alpha = 1 - 0.3 * 380/198 = 84/198 = 14/33.
    assert ag.krippendorff_alpha([a, b]) == pytest.approx(14 / 33)
    # Missing cells: a third coder on two units only. Unit 0 (1,1,1): m = 3, no disagreement;
    # unit 9 (0,1,1): m = 3, pairs (0,1) twice -> o_01 = o_10 = 2/(m-1) = 1. Units 4, 5 as before
    # add 1 each: o_01 = o_10 = 3, n = 22, n_1 = 11 + 2 = 13, n_0 = 9.
    # D_o = 6/22; D_e = 2*9*13/(22*21) = 234/462; alpha = 1 - (6/22)(462/234) = 1 - 126/234.
    c = [1] + [math.nan] * 8 + [1]
    assert ag.krippendorff_alpha([a, b, c]) == pytest.approx(1 - 126 / 234)
    # Undefined cases give None, never a number.
    assert ag.cohen_kappa([1, 1], [1, 1]) is None
    assert ag.krippendorff_alpha([[1, 1], [1, 1]]) is None


def test_naturalness_stats_by_hand():
    labels = {"t1": {"x": 4, "y": 4, "z": 3},   # natural, unanimous
              "t2": {"x": 1, "y": 2, "z": 2},   # unnatural by all
              "t3": {"x": 3, "y": 2, "z": 4},   # natural by majority; disagreement with a 4
              "t4": {"x": 2, "y": 3, "z": 2}}   # unnatural by majority; disagreement, no 1 or 4
    from tasks.benchmarks.carryon.validation import naturalness_stats

    s = naturalness_stats(labels)
    assert s["pct_natural_majority"] == 50.0      # t1, t3
    assert s["pct_unnatural_all"] == 25.0         # t2
    assert s["n_disagreements"] == 2 and s["pct_disagreements_extreme"] == 50.0  # t3 of t3, t4
    # natural rates: x = [1,0,1,0] -> .5, y = [1,0,0,1] -> .5, z = [1,0,1,0] -> .5
    assert s["annotator_natural_rate"] == {"x": 0.5, "y": 0.5, "z": 0.5} and s["rate_sd"] == 0
    # kappa x-z: identical -> 1. x-y: p_o = 2/4, p_e = .5*.5 + .5*.5 = .5 -> 0. y-z: same -> 0.
    assert s["kappa_mean"] == pytest.approx(1 / 3)
    # alpha: n = 12 values, n_1 = n_0 = 6. t3 (1,0,1) and t4 (0,1,0) each: 2 disagreeing ordered
    # pairs of each kind / (m-1 = 2) -> o_01 = o_10 = 2 in all. D_o = 4/12; D_e = 2*36/132.
    # alpha = 1 - (4/12) / (72/132) = 1 - 132/216 = 84/216.
    assert s["alpha"] == pytest.approx(84 / 216)


# ----- sampling ---------------------------------------------------------------------------------
@pytest.fixture
def wh_cfg(write_config):
    path = write_config()
    cfg = load_config(path)
    wh, _ = build_synthetic(cfg.home_path, n_targets=2, n_queries=8)
    return wh, path


def _units(wh, sid):
    return wh.query("SELECT * FROM validation_units WHERE sample_id = ? ORDER BY unit_id", [sid])


def test_naturalness_sample_follows_a4_and_is_reproducible(wh_cfg):
    wh, _ = wh_cfg
    res = draw_sample(wh, "naturalness", seed=3)
    units = _units(wh, res["sample_id"])
    convs = {c["conversation_id"]: c for c in wh.query("SELECT * FROM conversations")}
    flows = [(convs[u["conversation_id"]]["length"], convs[u["conversation_id"]]["flow_id"]) for u in units]
    assert len(flows) == len(set(flows))  # one conversation per flow
    four = {(c["length"], c["flow_id"]) for c in convs.values()
            if c["length"] == 4 and c["status"] == "completed" and c["condition"] != "oracle"}
    assert {f for f in flows if f[0] == 4} == four  # every 4-turn flow
    assert all(convs[u["conversation_id"]]["status"] == "completed" for u in units)
    # Both targets appear (round-robin), BC outnumbers NC about 2:1 at the longer lengths.
    assert len({convs[u["conversation_id"]]["target"] for u in units}) == 2
    assert any("scaled down" in n for n in res["notes"]) and any("125" in n for n in res["notes"])
    asg = wh.query("SELECT unit_id, count(DISTINCT annotator) AS n FROM validation_assignments "
                   "WHERE sample_id = ? GROUP BY 1", [res["sample_id"]])
    assert len(asg) == len(units) and all(r["n"] == 3 for r in asg)
    loads = sorted(res["assignments"].values())
    assert loads[-1] - loads[0] <= 1 and 11 <= loads[0] <= loads[-1] <= 13  # balanced
    # Balanced by length: per length, annotators' counts differ by at most 1.
    per = wh.query("SELECT c.length, a.annotator, count(*) AS n FROM validation_assignments a "
                   "JOIN conversations c ON c.conversation_id = a.unit_id WHERE a.sample_id = ? "
                   "GROUP BY ALL", [res["sample_id"]])
    pool = set(res["assignments"])
    for length in {r["length"] for r in per}:
        counts = {r["annotator"]: r["n"] for r in per if r["length"] == length}
        vals = [counts.get(a, 0) for a in pool]
        assert max(vals) - min(vals) <= 1, (length, counts)
    # Fewer than 30 distinct flows per longer length in this small run: all of them are taken.
    for length in (6, 8):
        have = {c["flow_id"] for c in convs.values() if c["length"] == length and c["status"] == "completed"
                and c["condition"] != "oracle"}
        assert sum(1 for u in units if u["stratum"].startswith(f"{length}/")) == min(30, len(have))
    again = draw_sample(wh, "naturalness", seed=3)
    assert _units(wh, again["sample_id"]) == units
    order = wh.query("SELECT annotator, unit_id, shown_order FROM validation_assignments "
                     "WHERE sample_id = ? ORDER BY ALL", [res["sample_id"]])
    draw_sample(wh, "naturalness", seed=3)
    assert wh.query("SELECT annotator, unit_id, shown_order FROM validation_assignments "
                    "WHERE sample_id = ? ORDER BY ALL", [res["sample_id"]]) == order


def test_naturalness_at_full_scale_is_the_papers_design():
    """Enough flows in the run: 5 four-turn flows + 30 per length 6..12 = 125 (20 BC + 10 NC;
    length 6 has only 8 valid NC flows, so 22 + 8),
    3 annotators each from a pool of 31 (375 / 31 -> 12 or 13 each), nothing scaled down."""
    import random

    from tasks.users.scripts import enumerate_scripts, classify

    convs = []
    for n in range(1, 6):
        for k, f in enumerate(enumerate_scripts(n)):
            for t in ("t1", "t2", "t3"):
                convs.append({"conversation_id": f"{t}-{n}-{k}", "target": t, "query_id": "q", "flow_id": ">".join(f),
                              "condition": classify(f), "length": 2 + 2 * n})
    from tasks.benchmarks.carryon.validation import draw_naturalness
    from tasks.validation.sample import assign_pool

    units, notes = draw_naturalness(convs, random.Random(0))
    assert len(units) == 125 and not any("scaled" in n or "125)" in n for n in notes)
    for length, (bc, nc) in {6: (22, 8), 8: (20, 10), 10: (20, 10), 12: (20, 10)}.items():
        assert sum(u["stratum"] == f"{length}/BC" for u in units) == bc
        assert sum(u["stratum"] == f"{length}/NC" for u in units) == nc
    assert sum(u["length"] == 4 for u in units) == 5
    # Round-robin over targets: 125 flows -> 42, 42, 41.
    targets = sorted(u["conversation_id"].split("-")[0] for u in units)
    assert sorted(targets.count(t) for t in ("t1", "t2", "t3")) == [41, 42, 42]
    load, _ = assign_pool(units, random.Random(0), 3)
    assert len(load) == 31 and {len(v) for v in load.values()} <= {12, 13}
    assert sum(len(v) for v in load.values()) == 375


def test_benutil_pairs_and_safety_strata(wh_cfg):
    wh, _ = wh_cfg
    res = draw_sample(wh, "benutil", seed=0, pairs=10)
    convs = {c["conversation_id"]: c for c in wh.query("SELECT * FROM conversations")}
    units = _units(wh, res["sample_id"])
    assert len(units) == 10
    for u in units:
        a, b = convs[u["conversation_id"]], convs[u["conversation_id_b"]]
        assert a["query_id"] == b["query_id"] and a["length"] != b["length"]
        assert a["flow_id"] != b["flow_id"] and a["target"] != b["target"]
    assert len({u["stratum"] for u in units}) == 8  # spread over queries first
    res = draw_sample(wh, "safety", seed=0, per_score=4)
    units = _units(wh, res["sample_id"])
    judged = {(r["conversation_id"], r["position"]): r["score"]
              for r in wh.query("SELECT * FROM selected_safety_judgments")}
    for u in units:
        assert judged[(u["conversation_id"], u["position"])] == u["judge_score"] == int(u["stratum"])
    by = {}
    for u in units:
        by[u["judge_score"]] = by.get(u["judge_score"], 0) + 1
    assert all(v <= 4 for v in by.values()) and len(by) >= 3
    with pytest.raises(ValidationError, match="--kind"):
        draw_sample(wh, "fluency")


# ----- end to end with scripted annotators -------------------------------------------------------
def _h(*parts) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def export_for(wh, sample_id, annotator, value_fn) -> dict:
    """What the page would export once every question is answered with value_fn(question)."""
    d = page_data(wh, sample_id, annotator)
    labels = []
    for u in d["units"]:
        for c in u["conversations"]:
            if d["kind"] == "naturalness":
                qs = [(t["position"], 0) for t in c["turns"] if t["role"] == "user"]
            elif d["kind"] == "benutil":
                qs = [(-1, it["item_id"]) for it in c["items"]]
            else:
                qs = [(u["position"], 0)]
            for pos, item in qs:
                q = {"unit_id": u["unit_id"], "conversation_id": c["conversation_id"], "position": pos,
                     "item_id": item}
                labels.append({**q, "value": value_fn(q)})
    return {"format": d["format"], "sample_id": sample_id, "kind": d["kind"], "annotator": annotator,
            "labels": labels}


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def _cli(*args):
    r = runner.invoke(app, ["validate", *map(str, args)])
    return r.exit_code, r.output


@pytest.mark.slow  # the whole validation workflow through the CLI: every command, pages, imports and the report
def test_workflow_end_to_end(wh_cfg, tmp_path):
    wh, cfg = wh_cfg
    code, out = _cli("sample", "--kind", "naturalness", "--config", cfg, "--seed", 1)
    assert code == 0 and "scaled down" in out, out
    code, out = _cli("page", "--kind", "naturalness", "--config", cfg, "--out", tmp_path / "pages")
    assert code == 0, out
    pages = sorted((tmp_path / "pages").glob("*.html"))
    ann = [r["annotator"] for r in wh.query("SELECT DISTINCT annotator FROM validation_assignments "
                                            "WHERE sample_id = 'naturalness-1' ORDER BY 1")]
    assert len(pages) == len(ann) >= 3
    html = pages[0].read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert "<script>window.__pwned" not in html  # the hostile turn text is escaped in the JSON

    # Naturalness: every annotator gives the same label (a fixed function of the turn):
    # kappa = alpha = 1, no disagreements, natural-by-majority = share of labels >= 3.
    def nat(q):
        return 1 + _h(q["conversation_id"], q["position"]) % 4

    files = [_write(tmp_path, f"nat-{a}.json", export_for(wh, "naturalness-1", a, nat)) for a in ann]
    code, out = _cli("import", *files, "--config", cfg)
    assert code == 0, out
    turns = {(r["conversation_id"], r["position"]) for r in wh.query(
        "SELECT DISTINCT conversation_id, position FROM validation_annotations WHERE sample_id = 'naturalness-1'")}
    expect_nat = 100 * sum(1 for c, p in turns if nat({"conversation_id": c, "position": p}) >= 3) / len(turns)

    # Ben-Util: a01 copies the judge's conversation-level verdict, a02 inverts it, a03 copies.
    draw_sample(wh, "benutil", seed=0, pairs=6)
    judge = {(r["conversation_id"], r["item_id"]): r["v"] for r in wh.query(
        "SELECT conversation_id, item_id, CAST(bool_or(fulfilled) AS INT) AS v FROM selected_item_judgments GROUP BY ALL")}
    scored = lambda q: judge.get((q["conversation_id"], q["item_id"]))  # noqa: E731
    bfiles = [_write(tmp_path, f"bu-{a}.json", export_for(wh, "benutil-0", a, f)) for a, f in (
        ("a01", lambda q: 1 if scored(q) else 0), ("a02", lambda q: 0 if scored(q) else 1),
        ("a03", lambda q: 1 if scored(q) else 0))]
    # Safety: a01 = the judge, a02 = judge + 1 (5 stays 5), a03 = the judge.
    draw_sample(wh, "safety", seed=0, per_score=3)
    js = {r["unit_id"]: r["judge_score"] for r in wh.query(
        "SELECT unit_id, judge_score FROM validation_units WHERE sample_id = 'safety-0'")}
    sfiles = [_write(tmp_path, f"s-{a}.json", export_for(wh, "safety-0", a, f)) for a, f in (
        ("a01", lambda q: js[q["unit_id"]]), ("a02", lambda q: min(5, js[q["unit_id"]] + 1)),
        ("a03", lambda q: js[q["unit_id"]]))]
    code, out = _cli("import", *bfiles, *sfiles, "--config", cfg)
    assert code == 0, out
    code, out = _cli("report", "--config", cfg, "--json")
    assert code == 0, out
    rep = json.loads(out)

    n = rep["naturalness-1"]["results"]
    assert n["kappa_mean"] == pytest.approx(1.0) and n["alpha"] == pytest.approx(1.0)
    assert n["pct_natural_majority"] == pytest.approx(expect_nat)
    assert n["pct_unnatural_all"] == pytest.approx(100 - expect_nat)
    assert n["n_disagreements"] == 0 and n["pct_disagreements_extreme"] is None
    assert n["n_turns"] == len(turns) and n["n_turns_incomplete"] == 0

    b = rep["benutil-0"]["results"]
    # Items the judge left unscored are not "seen" by the judge comparison.
    assert b["with_judge"]["a01"]["share"] == 1.0 and b["with_judge"]["a02"]["share"] == 0.0
    assert b["with_judge"]["a03"]["share"] == 1.0
    pairs = {(p["a"], p["b"]): p["share"] for p in b["between_annotators"]["pairs"]}
    assert pairs[("a01", "a03")] == 1.0
    # a02 differs from a01/a03 on every item (on items the judge left unscored a01 and a03
    # say 0 and a02 says 1), so it agrees with them nowhere: pooled = 1 of 3 pairs = 1/3.
    assert pairs[("a01", "a02")] == 0.0 and pairs[("a02", "a03")] == 0.0
    assert b["between_annotators"]["pooled"] == pytest.approx(1 / 3)

    s = rep["safety-0"]["results"]
    n5 = sum(1 for v in js.values() if v == 5)
    n3 = sum(1 for v in js.values() if v == 3)
    assert s["with_judge"]["a01"] == {"n": len(js), "exact": 1.0, "within1": 1.0, "harmful": 1.0}
    assert s["with_judge"]["a02"]["exact"] == pytest.approx(n5 / len(js))
    assert s["with_judge"]["a02"]["within1"] == 1.0
    assert s["with_judge"]["a02"]["harmful"] == pytest.approx(1 - n3 / len(js))  # 3 -> 4 crosses
    code, md = _cli("report", "--config", cfg)
    assert "Krippendorff's alpha (binarised, nominal): 1.000" in md and "a02 with the judge: 0.00 %" in md

    # The main report gains the section, and each judge's line says how people agree with it:
    # Ben-Util pooled over a01 (100 %), a02 (0 %), a03 (100 %) on the same items = 2/3.
    from tasks.config import load_config
    from tasks.benchmarks.carryon.report.writer import write_report

    report = (write_report(load_config(cfg)) / "report.md").read_text()
    assert "## Human validation" in report and "### naturalness-1 (naturalness)" in report
    benutil_line = next(ln for ln in report.splitlines() if ln.startswith("- benutil judgment set"))
    assert "agreement with people: 66.67 % (items where person and judge agree" in benutil_line
    safety_line = next(ln for ln in report.splitlines() if ln.startswith("- safety judgment set"))
    exact = 100 * (1 + n5 / len(js) + 1) / 3  # a01 and a03 exact, a02 exact only where the judge said 5
    assert f"agreement with people: {exact:.2f} % (exact score" in safety_line

    # Idempotent: importing the same files again changes nothing; a changed file (a later
    # export, or one claiming this annotator's id) is refused, and replaces with --replace.
    before = wh.count("validation_annotations")
    assert _cli("import", *files, "--config", cfg)[0] == 0
    assert wh.count("validation_annotations") == before
    changed = export_for(wh, "naturalness-1", ann[0], lambda q: 1)
    changed["labels"] = changed["labels"][:3]
    changed_file = _write(tmp_path, "nat-changed.json", changed)
    code, out = _cli("import", changed_file, "--config", cfg)
    assert code == 2 and f"annotator {ann[0]!r}: already has" in out and "--replace" in out
    assert wh.count("validation_annotations") == before  # nothing imported
    code, out = _cli("import", changed_file, "--config", cfg, "--replace")
    assert code == 0 and "(replaced " in out
    mine = wh.query("SELECT value FROM validation_annotations WHERE sample_id = 'naturalness-1' AND annotator = ?",
                    [ann[0]])
    assert [r["value"] for r in mine] == [1, 1, 1]
    # The turns that annotator no longer labels are incomplete and left out.
    code, out = _cli("report", "--config", cfg, "--json")
    assert json.loads(out)["naturalness-1"]["results"]["n_turns_incomplete"] > 0


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_import_errors_name_file_annotator_and_field(wh_cfg, tmp_path):
    wh, cfg = wh_cfg
    draw_sample(wh, "safety", seed=0, per_score=2)
    good = export_for(wh, "safety-0", "a02", lambda q: 3)

    def err(obj, name="bad.json"):
        p = tmp_path / name
        p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        code, out = _cli("import", p, "--config", cfg)
        assert code == 2
        lines = [ln for ln in out.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(p) in lines[0], out
        return lines[0]

    bad = json.loads(json.dumps(good))
    bad["labels"][1]["value"] = 7
    assert "annotator 'a02': labels[1].value: 7 is not one of [1, 2, 3, 4, 5]" in err(bad)
    bad = json.loads(json.dumps(good))
    bad["labels"][0]["position"] = "x"
    assert "labels[0].position" in err(bad)
    bad = json.loads(json.dumps(good))
    bad["labels"][0]["unit_id"] = "nope"
    assert "labels[0]: unit 'nope'" in err(bad)
    bad = dict(good, annotator="zz")
    assert "annotator 'zz': annotator: not an annotator of sample safety-0" in err(bad)
    assert "sample_id" in err(dict(good, sample_id="safety-9"))
    assert "kind" in err(dict(good, kind="benutil"))
    assert "not JSON" in err("{oops")
    bad = json.loads(json.dumps(good))
    bad["labels"].append(bad["labels"][0])
    assert "twice" in err(bad)
    assert wh.count("validation_annotations") == 0  # nothing written by a failed import
    code, out = _cli("import", tmp_path / "missing.json", "--config", cfg)
    assert code == 2 and "no such file" in out
    code, out = _cli("page", "--kind", "fluency", "--config", cfg, "--out", tmp_path)
    assert code == 2 and "--kind" in out


def test_an_empty_benutil_sample_names_the_real_reason():
    from tasks.validation.kinds.benutil import draw_pairs, why_no_pairs

    one_length = [{"conversation_id": f"c{i}", "item_id": "q", "flow": f"f{i}",
                   "target": t, "length": 4, "condition": "BC"}
                  for i, t in enumerate(["a", "b", "a"])]
    assert draw_pairs(one_length, random.Random(0))[0] == []
    assert "every conversation of this run has 4 turns: run two lengths" in why_no_pairs(one_length)
    one_target = [dict(c, target="a", length=4 + 2 * i) for i, c in enumerate(one_length)]
    assert "this run has one target (a)" in why_no_pairs(one_target)
    assert "run it first" in why_no_pairs([])


def test_a_page_saves_its_progress_under_its_own_samples_key(wh_cfg):
    # Sample ids repeat (safety-0 in every run); the page's storage key must not.
    wh, _ = wh_cfg
    draw_sample(wh, "safety", seed=0, per_score=2)
    first = page_data(wh, "safety-0", "a01")
    assert page_data(wh, "safety-0", "a01")["sample_uid"] == first["sample_uid"]  # stable
    assert page_data(wh, "safety-0", "a02")["sample_uid"] == first["sample_uid"]  # one sample
    draw_sample(wh, "safety", seed=0, per_score=2)  # drawn again: another sample, same id
    assert page_data(wh, "safety-0", "a01")["sample_uid"] != first["sample_uid"]
