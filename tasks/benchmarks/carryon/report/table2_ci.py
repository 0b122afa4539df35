"""95 % confidence intervals for every Table 2 cell, by a bootstrap over queries.

Why clustered: with prefix sharing (this project's choice, not the paper's) the conversations
of one query share their first answer and every shared prefix, so they are correlated; even
without it they share the query and its checklist. The bootstrap therefore resamples
*queries* with replacement, and all conversations of a drawn query go together (a cluster
bootstrap). Per target, the draws are seeded (``seed``, the same draws for every target) and
``n_boot`` = 1000 by default; the interval is the percentile interval of the replicates.

Every replicate, and the point estimate, is computed exactly like ``model_summary`` (R7 in
tasks/benchmarks/carryon/views.sql) from ``conversation_scores``: turn1_* = mean over queries
of the mean Turn-1 value of the query's BC/NC conversations; oracle_*, bc_*, nc_* = mean over the
conversations of that condition (utility, harm = harm_max, harm_mean); recovery_pct =
100 * (bc_utility - turn1_utility) / oracle_utility (NULL when oracle_utility is 0 or NULL).
NULL values are left out of each mean, as SQL's avg does. Each of these is a ratio of per-query
sums, so a replicate is a weighted sum over queries: the whole bootstrap is two matrix products
per target.

``table2_ci(conv)`` returns a ``Stat`` (one row per target and column); ``store(wh, stat)``
writes it to the ``table2_ci`` table so ad-hoc SQL sees the same intervals as the report.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd

from tasks.benchmarks.carryon.report.analyses import Stat

N_BOOT = 1000
LEVEL = 0.95
TITLE = "Table 2 with 95 % confidence intervals (bootstrap over queries)"
SEED = 0
# Table 2's columns, in model_summary's order (the harm_mean columns after them).
COLUMNS = ("turn1_utility", "oracle_utility", "bc_utility", "nc_utility", "recovery_pct",
           "turn1_harm", "oracle_harm", "bc_harm", "nc_harm",
           "oracle_harm_mean", "bc_harm_mean", "nc_harm_mean")
# column -> (source column of conversation_scores, condition); turn1_* are per-query means.
_COND = {"oracle_utility": ("utility", "oracle"), "bc_utility": ("utility", "BC"),
         "nc_utility": ("utility", "NC"), "oracle_harm": ("harm_max", "oracle"),
         "bc_harm": ("harm_max", "BC"), "nc_harm": ("harm_max", "NC"),
         "oracle_harm_mean": ("harm_mean", "oracle"), "bc_harm_mean": ("harm_mean", "BC"),
         "nc_harm_mean": ("harm_mean", "NC")}
_TURN1 = {"turn1_utility": "turn1_utility", "turn1_harm": "turn1_harm"}


def _sums(conv: pd.DataFrame, queries: list) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per column, per query: (sum, count) whose ratio over any weighting of the queries is
    the column's model_summary value on that weighting."""
    out = {}
    idx = pd.Index(queries, name="query_id")
    fol = conv[conv["condition"].isin(["BC", "NC"])]
    for col, src in _TURN1.items():
        if src not in conv:
            continue
        per_q = fol.groupby("query_id")[src].mean().reindex(idx)  # NaN: no value for the query
        out[col] = (per_q.fillna(0).to_numpy(float), per_q.notna().to_numpy(float))
    for col, (src, cond) in _COND.items():
        if src not in conv:
            continue
        g = conv[conv["condition"] == cond].groupby("query_id")[src]
        out[col] = (g.sum(min_count=1).reindex(idx).fillna(0).to_numpy(float),
                    g.count().reindex(idx).fillna(0).to_numpy(float))
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _values(sums: dict, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every column for each row of ``weights`` (replicates x queries)."""
    vals = {col: _ratio(weights @ s, weights @ n) for col, (s, n) in sums.items()}
    if {"bc_utility", "turn1_utility", "oracle_utility"} <= vals.keys():
        o = vals["oracle_utility"]
        with np.errstate(invalid="ignore", divide="ignore"):
            vals["recovery_pct"] = np.where(o > 0, 100.0 * (vals["bc_utility"] - vals["turn1_utility"])
                                            / np.where(o > 0, o, 1), np.nan)
    return vals


def replicates(g: pd.DataFrame, n_boot: int = N_BOOT,
               seed: int = SEED) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """One target's conversation_scores rows -> (point, boot, n_queries): every column's point
    estimate (an array of one value) and its ``n_boot`` replicates ({} with a single query), from
    the seeded draws of queries every interval of Table 2 uses (the paper comparison derives
    its changes from Turn 1 from the same replicates)."""
    queries = sorted(g["query_id"].unique())
    sums = _sums(g, queries)
    point = _values(sums, np.ones((1, len(queries))))
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(queries), np.full(len(queries), 1 / len(queries)), size=n_boot)
    boot = _values(sums, draws.astype(float)) if len(queries) > 1 else {}
    return point, boot, len(queries)


def interval(replicates_of_one: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The percentile interval of one column's replicates (NaN replicates left out);
    (None, None) when none is a number."""
    alpha = (1 - level) / 2
    b = replicates_of_one[~np.isnan(replicates_of_one)]
    if not len(b):
        return None, None
    return float(np.quantile(b, alpha)), float(np.quantile(b, 1 - alpha))


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def table2_ci(conv: pd.DataFrame, n_boot: int = N_BOOT, seed: int = SEED,
              level: float = LEVEL) -> Stat:
    """Point estimate (= model_summary) and a clustered percentile bootstrap interval for every
    target x Table 2 column. ``conv`` is the conversation_scores view as a DataFrame."""
    title = TITLE if level == LEVEL else TITLE.replace("95 %", f"{round(100 * level)} %")
    if conv is None or conv.empty:
        return Stat(title, None, "Not computed: no completed conversations.", key="table2_ci")
    rows, wide = [], []
    for target, g in conv.groupby("target", sort=True):
        point, boot, n_q = replicates(g, n_boot, seed)
        w = {"target": target, "n_queries": n_q}
        for col in COLUMNS:
            if col not in point:
                continue
            est = _num(point[col][0])
            lo = hi = None
            if est is not None and col in boot:
                lo, hi = interval(boot[col], level)
            rows.append({"target": target, "metric": col, "estimate": est, "ci_lo": lo,
                         "ci_hi": hi, "n_queries": n_q})
            w[col] = (f"{est:.1f} [{lo:.1f}, {hi:.1f}]" if lo is not None
                      else ("" if est is None else f"{est:.1f}"))
        wide.append(w)
    note = (f"Point estimates are model_summary's (R7). Intervals: {round(100 * level)} % percentile "
            f"intervals of {n_boot} bootstrap replicates that resample queries with replacement, "
            f"all conversations of a query together (conversations of a query are correlated, "
            f"the more so with prefix sharing); seed {seed}. No interval with a single query.")
    return Stat(title, pd.DataFrame(rows), note,
                extra={"wide": pd.DataFrame(wide), "n_boot": n_boot, "seed": seed, "level": level},
                key="table2_ci")


def store(wh, stat: Stat, run_id: str | None = None) -> int:
    """Replace the ``table2_ci`` table's rows with the Stat's (one transaction)."""

    rows = [] if stat.table is None else [
        {**{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()},
         "n_boot": stat.extra["n_boot"], "seed": stat.extra["seed"], "level": stat.extra["level"],
         "run_id": run_id, "created": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)}
        for r in stat.table.to_dict("records")]
    wh.write_many([("table2_ci", rows, ("true", []))])
    return len(rows)
