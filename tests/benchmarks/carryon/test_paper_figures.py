"""The paper's remaining analyses (tasks/benchmarks/carryon/report/paper_analyses.py) on hand-made view frames,
the expected numbers worked out by hand, and their figures (figures_paper.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tasks.benchmarks.carryon.report import figures as fg
from tasks.benchmarks.carryon.report import figures_paper as fp
from tasks.benchmarks.carryon.report import paper_analyses as pa
from tasks.benchmarks.carryon.report.analyses import Stat
from tasks.benchmarks.carryon.report.not_drawn import NotDrawn

CONV_COLS = ["target", "query_id", "category", "condition", "turn1_utility", "turn1_harm", "utility",
             "harm_max", "harm_mean"]
TURN_COLS = ["target", "condition", "turn_index", "move", "utility", "harm", "redundancy"]


def _conv(rows):
    return pd.DataFrame(rows, columns=CONV_COLS)


def _turns(rows):
    return pd.DataFrame(rows, columns=TURN_COLS)


# ----- Table 2 with harm means ------------------------------------------------------------------
def test_table2_harm_mean_beside_harm_max():
    summary = pd.DataFrame({"target": ["A", "B"], "turn1_harm": [1.0, 2.0], "oracle_harm": [2.0, None],
                            "bc_harm": [3.0, 4.0], "nc_harm": [None, None]})
    conv = _conv([
        ("A", "q1", "c", "oracle", 0, 1, 10, 2, 1.0), ("A", "q2", "c", "oracle", 0, 1, 10, 2, 2.0),
        ("A", "q1", "c", "BC", 0, 1, 10, 3, 2.0), ("A", "q2", "c", "BC", 0, 1, 10, None, 3.0),
        ("A", "q3", "c", "BC", 0, 1, 10, 3, None),  # no scored turn: left out of the mean
        ("B", "q1", "c", "BC", 0, 1, 10, 4, 4.0),
    ])
    t = pa.table2(summary, conv)
    assert list(t.columns) == ["target", "turn1_harm", "oracle_harm", "oracle_harm_mean", "bc_harm",
                               "bc_harm_mean", "nc_harm", "nc_harm_mean"]
    r = t.set_index("target")
    # A: oracle (1 + 2) / 2 = 1.5; BC (2 + 3) / 2 = 2.5 (the unknown-max conversation counts: its
    #    mean is known); NC none. B: BC 4; no oracle.
    assert r.loc["A", "oracle_harm_mean"] == pytest.approx(1.5)
    assert r.loc["A", "bc_harm_mean"] == pytest.approx(2.5)
    assert math.isnan(r.loc["A", "nc_harm_mean"]) and math.isnan(r.loc["B", "oracle_harm_mean"])
    assert r.loc["B", "bc_harm_mean"] == pytest.approx(4.0)
    assert list(pa.table2(summary.iloc[:0], conv.iloc[:0])["target"]) == []


# ----- per domain -----------------------------------------------------------------------------------
DOMAIN_CONV = _conv([
    # q1: the queries table says Hate Speech Generation.
    ("A", "q1", "whatever", "BC", 10, 1, 50, 3, 2), ("A", "q1", "whatever", "BC", 10, 1, 30, 2, 1),
    ("A", "q1", "whatever", "NC", 10, 1, 20, 1, 1), ("A", "q1", "whatever", "oracle", 60, 1, 60, 1, 1),
    # q2: no domain in the queries table; "medical advice" is SORRY-Bench id 41 -> Unqualified Advice.
    # A has two conversations sharing one Turn 1: Turn 1 averages per (target, query) first.
    ("A", "q2", "medical advice", "BC", 0, 2, 40, 4, 3), ("A", "q2", "medical advice", "BC", 0, 2, 40, 4, 3),
    ("B", "q2", "medical advice", "BC", 20, 2, 60, 2, 2),
    # q3: neither a domain nor a known category.
    ("A", "q3", "cat-x", "BC", 0, 1, 10, 1, 1),
])
QUERIES = pd.DataFrame({"query_id": ["q1", "q2", "q3"], "category": ["whatever", "medical advice", "cat-x"],
                        "domain": ["Hate Speech Generation", None, None]})


def test_domain_changes_from_turn1_with_the_oracle():
    s = pa.domain_changes(DOMAIN_CONV, QUERIES, min_queries=1)
    t = s.table.set_index("domain")
    assert list(t.index[:4]) == ["Hate Speech Generation", "Assistance with Crimes or Torts",
                                 "Potentially Inappropriate Topics", "Potentially Unqualified Advice"]
    h = t.loc["Hate Speech Generation"]
    # Turn 1 (A,q1) 10, harm 1. BC (50 + 30) / 2 = 40 -> +30, harm 2.5 -> +1.5; NC 20 -> +10,
    # harm 1 -> 0; oracle 60 -> +50, harm 1 -> 0.
    assert h["n_queries"] == 1 and h["turn1_utility"] == pytest.approx(10)
    assert h["bc_utility_change"] == pytest.approx(30) and h["bc_harm_change"] == pytest.approx(1.5)
    assert h["nc_utility_change"] == pytest.approx(10) and h["nc_harm_change"] == pytest.approx(0)
    assert h["oracle_utility_change"] == pytest.approx(50) and h["oracle_harm_change"] == pytest.approx(0)
    a = t.loc["Potentially Unqualified Advice"]
    # Turn 1 per (target, query): A 0, B 20 -> 10 (per conversation it would be 20/3); harm 2.
    # BC per conversation (40 + 40 + 60) / 3 -> +(140/3 - 10); harm (4 + 4 + 2) / 3 - 2 = 4/3.
    assert a["turn1_utility"] == pytest.approx(10) and a["bc_utility_change"] == pytest.approx(140 / 3 - 10)
    assert a["bc_harm_change"] == pytest.approx(4 / 3)
    assert math.isnan(a["nc_utility_change"]) and math.isnan(a["oracle_utility_change"])
    assert t.loc["Assistance with Crimes or Torts", "note"] == "no queries"
    assert t.loc[pa.UNKNOWN_DOMAIN, "n_queries"] == 1
    # With the default minimum of 3 queries per domain nothing is left: a note, not a table.
    few = pa.domain_changes(DOMAIN_CONV, QUERIES)
    assert few.table is None and few.note.startswith("Not computed:")
    assert pa.domain_changes(DOMAIN_CONV.iloc[:0], QUERIES).note == "Not computed: no conversations."


def test_domain_without_a_queries_table_maps_the_category():
    d = pa.query_domains(DOMAIN_CONV, None)
    assert list(d[DOMAIN_CONV["query_id"] == "q2"].unique()) == ["Potentially Unqualified Advice"]
    assert list(d[DOMAIN_CONV["query_id"] == "q1"].unique()) == [pa.UNKNOWN_DOMAIN]


# ----- per-model move effects --------------------------------------------------------------------------
def test_move_effects_per_model():
    t = _turns([
        ("A", "BC", 2, "benign_justification", 10, 1, None), ("A", "BC", 3, "pushback", 30, 3, None),
        ("A", "NC", 2, "pushback", 50, 2, None),
        ("B", "BC", 2, "benign_justification", 80, 4, None), ("B", "NC", 2, "pushback", 100, 4, None),
        ("A", "BC", 1, "query", 0, 5, None),  # turn 1: not a follow-up
    ])
    s = pa.move_effects_per_model(t)
    r = s.table.set_index(["target", "move"])
    # A's mean follow-up: utility 30, harm 2. bj: -20, -1; pushback (0 + 20) / 2 = 10, (1 + 0) / 2.
    assert r.loc[("A", "benign_justification"), "utility_dev"] == pytest.approx(-20)
    assert r.loc[("A", "benign_justification"), "harm_dev"] == pytest.approx(-1)
    assert r.loc[("A", "pushback"), "utility_dev"] == pytest.approx(10)
    assert r.loc[("A", "pushback"), "harm_dev"] == pytest.approx(0.5)
    assert r.loc[("A", "pushback"), "n_turns"] == 2
    # B's mean 90: bj -10, pushback +10; harm constant -> 0.
    assert r.loc[("B", "benign_justification"), "utility_dev"] == pytest.approx(-10)
    assert r.loc[("B", "pushback"), "harm_dev"] == pytest.approx(0)
    assert list(s.table["move"][:2]) == ["benign_justification", "pushback"]  # the paper's order
    assert pa.move_effects_per_model(t[t["turn_index"] == 1]).note == "Not computed: no follow-up turns."


# ----- per-family turn trends --------------------------------------------------------------------------
CONFIG = {"models": {"targets": [{"name": "A", "model": "m/a", "family": "Fam"},
                                 {"name": "B", "model": "m/b", "family": "Fam"},
                                 {"model": "m/c"}]}}


def test_target_families_from_the_config():
    assert pa.target_families(CONFIG) == {"A": "Fam", "B": "Fam", "m/c": "m/c"}
    assert pa.target_families({}) == {} and pa.target_families(None) == {}
    assert pa.target_families({"models": {"targets": ["bare-string"]}}) == {}


def test_family_turn_trends():
    t = _turns([
        ("A", "BC", 1, "query", 10, 1, None), ("B", "BC", 1, "query", 30, 3, None),
        ("A", "BC", 2, "benign_justification", 50, 2, None),
        ("m/c", "BC", 1, "query", 20, 1, None),
        ("Z", "NC", 1, "query", 5, 5, None),  # not in the config: its own family
        ("A", "oracle", 1, "oracle", 99, 1, None),  # oracle: not a trend
    ])
    s = pa.family_turn_trends(t, CONFIG)
    w = s.table.set_index(["family", "condition"])
    # Fam BC: turn 1 (10 + 30) / 2 = 20, harm 2; turn 2 50, harm 2; 2 targets.
    assert w.loc[("Fam", "BC"), "U t1"] == pytest.approx(20) and w.loc[("Fam", "BC"), "harm t1"] == pytest.approx(2)
    assert w.loc[("Fam", "BC"), "U t2"] == pytest.approx(50) and w.loc[("Fam", "BC"), "n_targets"] == 2
    assert w.loc[("m/c", "BC"), "U t1"] == pytest.approx(20) and math.isnan(w.loc[("m/c", "BC"), "U t2"])
    assert w.loc[("Z", "NC"), "harm t1"] == pytest.approx(5)
    assert set(s.extra["per_turn"]["family"]) == {"Fam", "m/c", "Z"}
    blank = t.assign(utility=None, harm=None)
    assert pa.family_turn_trends(blank, CONFIG).note == "Not computed: no scored BC/NC turns."


# ----- ranking comparison and oracle vs BC ---------------------------------------------------------
SUMMARY = pd.DataFrame({
    "target": ["A", "B", "C"],
    "turn1_utility": [10.0, 30.0, 20.0], "oracle_utility": [50.0, 0.0, None],
    "bc_utility": [60.0, 60.0, 10.0], "nc_utility": [None, None, None],
    "turn1_harm": [1.0, 2.0, 3.0], "oracle_harm": [2.0, 1.0, None],
    "bc_harm": [3.0, 2.0, 2.0], "nc_harm": [None, None, None]})


def test_ranking_comparison():
    s = pa.ranking_comparison(SUMMARY)
    r = s.table.set_index("target")
    assert list(r["turn1_utility_rank"]) == [3, 1, 2]
    assert list(r["oracle_utility_rank"][:2]) == [1, 2] and r.loc["C", "oracle_utility_rank"] is pd.NA
    assert list(r["bc_utility_rank"]) == [1, 1, 3]  # a tie shares the best rank
    assert r["nc_utility_rank"].isna().all()
    assert list(r["turn1_harm_rank"]) == [1, 2, 3]  # 1 = least harmful
    assert list(r["bc_harm_rank"]) == [3, 1, 1]
    assert pa.ranking_comparison(SUMMARY.iloc[:1]).note == \
        "Not computed: 1 target(s), a ranking needs at least 2."


def test_oracle_vs_bc():
    t = pa.oracle_vs_bc(SUMMARY).table.set_index("target")
    assert t.loc["A", "bc_minus_oracle"] == pytest.approx(10) and t.loc["A", "bc_over_oracle_pct"] == pytest.approx(120)
    assert t.loc["B", "bc_minus_oracle"] == pytest.approx(60) and math.isnan(t.loc["B", "bc_over_oracle_pct"])
    assert math.isnan(t.loc["C", "bc_minus_oracle"])
    none = SUMMARY.assign(bc_utility=None)
    assert pa.oracle_vs_bc(none).note == "Not computed: no target has both an oracle and a BC utility."


# ----- figures ---------------------------------------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    """Keep each figure's axes before it is closed (what it draws, not only that a PNG exists)."""
    figs = []
    orig = fg._save

    def save(fig, path):
        figs.append(fig)
        return orig(fig, path)

    monkeypatch.setattr(fg, "_save", save)
    return figs


def _png(path):
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_utility_vs_harm_draws_the_harmful_boundary(tmp_path, captured):
    fg.utility_vs_harm(SUMMARY, tmp_path / "u.png")
    ax = captured[-1].axes[0]
    assert any(list(ln.get_ydata()) == [4, 4] for ln in ax.lines)
    assert any("harm ≥ 4" in t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_xlabel() and ax.get_ylabel()


def test_every_paper_figure_draws_labelled_axes_or_says_why(tmp_path, captured):
    stats = {
        "domain_changes": pa.domain_changes(DOMAIN_CONV, QUERIES, min_queries=1),
        "move_effects_per_model": pa.move_effects_per_model(_turns([
            ("A", "BC", 2, "benign_justification", 10, 1, None), ("A", "NC", 2, "pushback", 50, 2, None)])),
        "family_turn_trends": pa.family_turn_trends(_turns([("A", "BC", 1, "query", 10, 1, None),
                                                           ("A", "NC", 2, "pushback", 30, 2, None)]), CONFIG),
        "ranking_comparison": pa.ranking_comparison(SUMMARY),
        "oracle_vs_bc": pa.oracle_vs_bc(SUMMARY),
        "redundancy_per_turn": Stat("Redundancy per turn (%)", pd.DataFrame(
            {"turn_index": [2, 3], "BC": [20.0, 40.0], "NC": [10.0, math.nan]}), key="redundancy_per_turn"),
    }
    for name, stat in stats.items():
        assert stat.table is not None, name
        p = getattr(fp, name)(stat, tmp_path / f"{name}.png")
        assert _png(p), name
        fig = captured[-1]
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                continue
            assert ax.get_ylabel(), (name, "no y label")
        # a title on the figure or on its axes
        assert (fig._suptitle is not None and fig._suptitle.get_text()) or any(a.get_title() for a in fig.axes), name
        # not computed: no figure, the reason instead (tasks/benchmarks/carryon/report/not_drawn.py), never a crash
        drawn = len(captured)
        with pytest.raises(NotDrawn, match="Not computed: nothing here."):
            getattr(fp, name)(Stat(stat.title, None, "Not computed: nothing here.", key=name),
                              tmp_path / f"{name}-none.png")
        assert len(captured) == drawn and not (tmp_path / f"{name}-none.png").exists()
        # a table whose plotted values are all NULL: no empty axes either
        nulls = stat.table.assign(**{c: math.nan for c in stat.table.columns
                                     if c not in ("target", "move", "domain", "family", "turn_index",
                                                  "condition", "n_queries", "n")})
        with pytest.raises(NotDrawn):
            getattr(fp, name)(Stat(stat.title, nulls, key=name, extra={}), tmp_path / f"{name}-nan.png")
        assert len(captured) == drawn


def test_turn1_bins_figure_has_a_harm_panel(tmp_path, captured):
    from tasks.benchmarks.carryon.report import analyses as an
    from tests.support.analyses import CONV

    fg.turn1_bins(an.turn1_bins(CONV), tmp_path / "b.png")
    axes = captured[-1].axes
    assert [a.get_ylabel() for a in axes] == ["utility (%)", "harm (1-5)"]
    # Harm panel, Turn-1 bars: hard refusal 1, partial 1, high 2 (see test_analyses).
    turn1_bars = [p.get_height() for p in axes[1].containers[0]]
    assert turn1_bars == pytest.approx([1.0, 1.0, 2.0])
