"""Table 2's bootstrap intervals on hand-computed data: the point estimates are
model_summary's (the view's own SQL run on the same rows), the intervals bracket them, equal
queries give zero-width intervals, the draws are seeded, and the rows land in table2_ci."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from tasks.bench import condition_rows, load_spec, views_sql
from tasks.benchmarks.carryon.report.table2_ci import COLUMNS, store, table2_ci

N = None  # a NULL cell


def _conv_rows():
    # (target, query, condition, turn1_utility, turn1_harm, utility, harm_max, harm_mean)
    a = [
        ("A", "q1", "BC", 10, 1, 50, 2, 1.5), ("A", "q1", "BC", 10, 1, 70, 3, 2.0),
        ("A", "q1", "NC", 10, 1, 20, 1, 1.0), ("A", "q1", "oracle", 10, 1, 60, 1, 1.0),
        ("A", "q2", "BC", 30, 3, 40, 4, 3.0), ("A", "q2", "NC", 30, 3, 30, 2, 2.0),
        ("A", "q2", "NC", 30, 3, N, N, N), ("A", "q2", "oracle", 40, 2, 40, 2, 2.0),
        ("A", "q3", "BC", N, N, 90, 5, 4.0), ("A", "q3", "oracle", 80, 1, 80, 1, 1.0),
    ]
    # B: three identical queries -> every replicate equals the estimate
    b = [row for q in ("q1", "q2", "q3") for row in (
        ("B", q, "BC", 20, 2, 50, 2, 2.0), ("B", q, "NC", 20, 2, 30, 1, 1.0),
        ("B", q, "oracle", 40, 1, 40, 1, 1.0))]
    cols = ["target", "query_id", "condition", "turn1_utility", "turn1_harm", "utility",
            "harm_max", "harm_mean"]
    df = pd.DataFrame(a + b, columns=cols)
    for c in cols[3:]:
        df[c] = df[c].astype(float)
    return df


# Target A by hand (R7): Turn-1 per query 10, 30, (none) -> 20; oracle (60+40+80)/3 = 60;
# BC (50+70+40+90)/4 = 62.5; NC (20+30)/2 = 25 (the NULL is left out); recovery
# 100 * (62.5 - 20) / 60; harm: Turn-1 (1+3)/2, oracle 4/3, BC 14/4, NC 3/2; harm_mean:
# oracle 4/3, BC 10.5/4, NC 1.5.
HAND_A = {"turn1_utility": 20.0, "oracle_utility": 60.0, "bc_utility": 62.5, "nc_utility": 25.0,
          "recovery_pct": 100 * 42.5 / 60, "turn1_harm": 2.0, "oracle_harm": 4 / 3,
          "bc_harm": 3.5, "nc_harm": 1.5, "oracle_harm_mean": 4 / 3, "bc_harm_mean": 10.5 / 4,
          "nc_harm_mean": 1.5}


def _model_summary(df: pd.DataFrame) -> pd.DataFrame:
    """The model_summary view's own SQL, run on these rows as conversation_scores."""
    sql = views_sql(load_spec("carryon"))
    con = duckdb.connect(":memory:")
    con.register("conv_df", df)
    con.execute("CREATE TABLE conversation_scores AS SELECT * FROM conv_df")
    # The view finds the conditions by their part, from the spec's rows (R12).
    con.register("cond_df", pd.DataFrame(condition_rows(load_spec("carryon"))))
    con.execute("CREATE TABLE bench_conditions AS SELECT * FROM cond_df")
    for name in ("carryon_conditions", "model_summary"):
        con.execute(re.search(rf"CREATE OR REPLACE VIEW {name} AS.*?;", sql, re.S).group(0))
    return con.execute("SELECT * FROM model_summary").df().set_index("target")


def _cells(stat) -> dict:
    return {(r["target"], r["metric"]): r for r in stat.table.to_dict("records")}


def test_point_estimates_are_model_summary_and_intervals_bracket_them():
    df = _conv_rows()
    stat = table2_ci(df, n_boot=1000, seed=7)
    cells = _cells(stat)
    ms = _model_summary(df)
    for col, want in HAND_A.items():
        assert cells[("A", col)]["estimate"] == pytest.approx(want), col
    for target in ("A", "B"):
        for col in ms.columns:
            assert cells[(target, col)]["estimate"] == pytest.approx(float(ms.loc[target, col])), (target, col)
    for (target, col), r in cells.items():
        assert r["n_queries"] == 3
        assert r["ci_lo"] <= r["estimate"] + 1e-9 and r["estimate"] - 1e-9 <= r["ci_hi"], (target, col, r)
        if target == "A" and col in ("turn1_utility", "bc_utility", "oracle_utility"):
            assert r["ci_hi"] - r["ci_lo"] > 0  # queries differ: a real interval
    assert {c for _, c in cells} == set(COLUMNS)
    # The bounds of A's oracle utility are percentiles of means of 3 of {40, 60, 80}: in range.
    o = cells[("A", "oracle_utility")]
    assert 40 <= o["ci_lo"] < 60 < o["ci_hi"] <= 80


def test_equal_queries_give_zero_width_intervals():
    stat = table2_ci(_conv_rows(), n_boot=200, seed=1)
    for (target, col), r in _cells(stat).items():
        if target == "B":
            assert r["ci_lo"] == pytest.approx(r["estimate"]) == pytest.approx(r["ci_hi"]), col
    assert _cells(stat)[("B", "recovery_pct")]["estimate"] == pytest.approx(100 * (50 - 20) / 40)


def test_seeded_and_clustered():
    df = _conv_rows()
    a, b = table2_ci(df, n_boot=300, seed=3), table2_ci(df, n_boot=300, seed=3)
    pd.testing.assert_frame_equal(a.table, b.table)
    c = table2_ci(df, n_boot=300, seed=4)
    assert not a.table.equals(c.table)
    assert set(a.table["n_queries"]) == {3} and "resample queries" in a.note
    # Clustered: q1 has three BC conversations at 0, q2 one at 100 (estimate 25). Drawing
    # queries, a replicate is 0 (q1 twice, p = 1/4), 25 (one each) or 100 (q2 twice, p = 1/4),
    # so the 95 % bounds are 0 and 100. Drawing conversations, 100 would need all four draws
    # on q2's one conversation (p = 1/256) and the upper bound would stay below it.
    rows = [("T", "q1", "BC", 0.0, 1.0, 0.0, 1.0, 1.0)] * 3 + [("T", "q2", "BC", 0.0, 1.0, 100.0, 1.0, 1.0)]
    cl = pd.DataFrame(rows, columns=df.columns)
    r = _cells(table2_ci(cl, n_boot=1000, seed=0))[("T", "bc_utility")]
    assert (r["estimate"], r["ci_lo"], r["ci_hi"]) == (25.0, 0.0, 100.0)
    # One query: no interval, the estimate still there.
    one = table2_ci(df[df["query_id"] == "q1"], n_boot=50)
    r = _cells(one)[("A", "bc_utility")]
    assert r["estimate"] == 60.0 and pd.isna(r["ci_lo"]) and pd.isna(r["ci_hi"])
    assert table2_ci(df.iloc[0:0]).table is None


def test_recovery_without_oracle_is_null():
    df = _conv_rows()
    df.loc[(df["target"] == "A") & (df["condition"] == "oracle"), "utility"] = 0.0
    r = _cells(table2_ci(df, n_boot=50))[("A", "recovery_pct")]
    assert pd.isna(r["estimate"]) and pd.isna(r["ci_lo"]) and pd.isna(r["ci_hi"])


def test_store_writes_table2_ci(tmp_path):
    from warehouse import Warehouse

    wh = Warehouse(tmp_path / "w.duckdb").init()
    stat = table2_ci(_conv_rows(), n_boot=100, seed=0)
    n = store(wh, stat, run_id="r1")
    assert n == 2 * len(COLUMNS) == wh.count("table2_ci")
    row = wh.query("SELECT * FROM table2_ci WHERE target = 'A' AND metric = 'bc_utility'")[0]
    assert row["estimate"] == 62.5 and row["n_boot"] == 100 and row["run_id"] == "r1"
    assert row["ci_lo"] <= 62.5 <= row["ci_hi"] and row["level"] == 0.95
    # Replaced as a whole, not appended.
    store(wh, table2_ci(_conv_rows()[lambda d: d["target"] == "B"], n_boot=10), run_id="r2")
    assert wh.query("SELECT DISTINCT target FROM table2_ci") == [{"target": "B"}]
    nulls = wh.query("SELECT count(*) AS n FROM table2_ci WHERE ci_lo IS NULL")[0]["n"]
    assert nulls == 0
    rec = wh.query("SELECT estimate FROM table2_ci WHERE target = 'B' AND metric = 'recovery_pct'")
    assert rec[0]["estimate"] == 75.0
