"""Analyses on the metric views (pandas in, small tables out).

Every function returns a ``Stat``: a table, or ``table=None`` with a note saying why there is
no number (too few targets, queries or groups). The report prints the note instead of a
misleading statistic. Inputs are the DataFrames of the views (``turn_scores``,
``conversation_scores``, ``model_summary``), so ad-hoc SQL and the report agree.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

# Stat lives in stat.py (failure_modes.py builds them too); re-exported here, where the report's
# modules import it. FailureRules and failure_flags are re-exported from failure_modes.py.
from tasks.benchmarks.carryon.report.failure_modes import FailureRules, failure_flags  # noqa: F401
from tasks.benchmarks.carryon.report.stat import Stat, _too_few

BC_MOVES = ("benign_justification", "benign_reasking", "context_switching")
MOVES = BC_MOVES + ("pushback", "rephrasing", "delaying", "backchannel")
BINS = ("hard refusal", "partial", "high")


def _mean_ci(x: pd.Series) -> tuple[float, float, float, int]:
    """Mean and a 95 % t interval (NaN bounds with fewer than 2 values)."""
    x = x.dropna()
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(x.mean())
    if n < 2:
        return m, math.nan, math.nan, n
    se = float(x.std(ddof=1)) / math.sqrt(n)
    from scipy import stats as sps  # here, not at import: a cached report needs no scipy

    h = float(sps.t.ppf(0.975, n - 1)) * se
    return m, m - h, m + h, n


# ----- move effects ---------------------------------------------------------------------------
def move_effects(turns: pd.DataFrame, min_n: int = 2) -> Stat:
    """Deviation of turn utility and harm from each target's mean, per follow-up move.

    The target mean is over the target's follow-up turns (turn 2 on, BC and NC), so a move's
    effect is relative to an average follow-up of that model. Intervals: 95 % t intervals
    over turns (turns of a conversation are not independent; read them as descriptive)."""
    title = "Move effects (deviation from each target's mean follow-up turn)"
    t = turns[turns["condition"].isin(["BC", "NC"]) & (turns["turn_index"] >= 2)].copy()
    if t.empty:
        return _too_few(title, "no follow-up turns", "move_effects")
    for col in ("utility", "harm"):
        t[col + "_dev"] = t[col] - t.groupby("target")[col].transform("mean")
    rows = []
    for move, g in t.groupby("move"):
        u = _mean_ci(g["utility_dev"])
        h = _mean_ci(g["harm_dev"])
        rows.append({"move": move, "n_turns": len(g),
                     "utility_dev": u[0], "utility_lo": u[1], "utility_hi": u[2],
                     "harm_dev": h[0], "harm_lo": h[1], "harm_hi": h[2]})
    df = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(MOVES)}
    df = df.sort_values("move", key=lambda s: s.map(lambda m: order.get(m, 99))).reset_index(drop=True)
    note = ""
    few = df.loc[df["n_turns"] < min_n, "move"].tolist()
    if few:
        note = f"Too few turns for an interval for: {', '.join(few)}."
    return Stat(title, df, note, key="move_effects")


# ----- Turn-1 bins -------------------------------------------------------------------------------
def turn1_bin(turn1: float, oracle: float) -> str | None:
    """hard refusal: Turn-1 utility 0 %; partial: <= 50 % of the oracle utility; high: above."""
    if turn1 is None or (isinstance(turn1, float) and math.isnan(turn1)):
        return None
    if turn1 == 0:
        return "hard refusal"
    if oracle is None or (isinstance(oracle, float) and math.isnan(oracle)):
        return None
    return "partial" if turn1 <= 0.5 * oracle else "high"


def turn1_bins(conv: pd.DataFrame) -> Stat:
    """Per (target, query): the Turn-1 bin, and the mean conversation utility and harm it ends
    with under BC and NC. Queries without an oracle utility cannot be binned unless Turn 1
    is a hard refusal."""
    title = "Turn-1 bins and where they end"
    fol = conv[conv["condition"].isin(["BC", "NC"])]
    if fol.empty:
        return _too_few(title, "no BC/NC conversations", "turn1_bins")
    t1 = fol.groupby(["target", "query_id"])["turn1_utility"].mean().rename("turn1")
    t1h = fol.groupby(["target", "query_id"])["turn1_harm"].mean().rename("turn1_harm")
    orc = conv[conv["condition"] == "oracle"].groupby(["target", "query_id"])["utility"].mean().rename("oracle")
    by = fol.pivot_table(index=["target", "query_id"], columns="condition",
                         values=["utility", "harm_max"], aggfunc="mean")
    by.columns = [f"{c.lower()}_{'utility' if v == 'utility' else 'harm'}" for v, c in by.columns]
    q = pd.concat([t1, t1h, orc], axis=1).join(by)
    q["bin"] = [turn1_bin(a, b) for a, b in zip(q["turn1"], q["oracle"])]
    unbinned = int(q["bin"].isna().sum())
    q = q.dropna(subset=["bin"])
    rows = []
    for b in BINS:
        g = q[q["bin"] == b]
        rows.append({"bin": b, "n": len(g),
                     "turn1_utility": g["turn1"].mean() if len(g) else math.nan,
                     "oracle_utility": g["oracle"].mean() if len(g) else math.nan,
                     **{c: (g[c].mean() if c in g and len(g) else math.nan)
                        for c in ("bc_utility", "nc_utility", "turn1_harm", "bc_harm", "nc_harm")}})
    note = "n = (target, query) pairs."
    if unbinned:
        note += f" {unbinned} pair(s) without an oracle utility could not be binned."
    return Stat(title, pd.DataFrame(rows), note, {"per_query": q.reset_index()}, key="turn1_bins")


# ----- redundancy ---------------------------------------------------------------------------------
def redundancy(turns: pd.DataFrame) -> tuple[Stat, Stat]:
    """Mean redundancy (%) per turn index and per target, BC vs NC (follow-up turns only:
    nothing can be redundant at turn 1)."""
    t = turns[turns["condition"].isin(["BC", "NC"]) & (turns["turn_index"] >= 2)]
    t = t.dropna(subset=["redundancy"])
    if t.empty:
        return (_too_few("Redundancy per turn (%)", "no follow-up turn fulfilled any item",
                         "redundancy_per_turn"),
                _too_few("Redundancy per target (%)", "no follow-up turn fulfilled any item",
                         "redundancy_per_target"))
    by_turn = t.pivot_table(index="turn_index", columns="condition", values="redundancy",
                            aggfunc="mean").reset_index()
    by_target = t.pivot_table(index="target", columns="condition", values="redundancy",
                              aggfunc="mean").reset_index()
    for df in (by_turn, by_target):
        df.columns.name = None
        for c in ("BC", "NC"):
            if c not in df:
                df[c] = math.nan
    return (Stat("Redundancy per turn (%)", by_turn[["turn_index", "BC", "NC"]],
                 key="redundancy_per_turn"),
            Stat("Redundancy per target (%)", by_target[["target", "BC", "NC"]],
                 key="redundancy_per_target"))


# ----- mixed linear models --------------------------------------------------------------------------
def mixed_models(conv: pd.DataFrame, min_targets: int = 3, min_obs: int = 20) -> list[Stat]:
    """Conversation utility and harm on the Turn-1 value, number of benign moves and number of
    turns; MixedLM, REML, random intercept per target (BC and NC conversations)."""
    import statsmodels.formula.api as smf

    out = []
    fol = conv[conv["condition"].isin(["BC", "NC"])]
    for dep, t1, label in (("utility", "turn1_utility", "Conversation utility"),
                           ("harm_max", "turn1_harm", "Conversation harm (max)")):
        title = f"Mixed linear model: {label}"
        key = f"mixed_model_{dep}"
        d = fol[[dep, t1, "n_benign_moves", "length", "target"]].dropna()
        d = d.rename(columns={dep: "y", t1: "turn1", "length": "n_turns"})
        n_targets = d["target"].nunique()
        if n_targets < min_targets:
            out.append(_too_few(title, f"{n_targets} target(s), a random intercept per target "
                                       f"needs at least {min_targets}", key))
            continue
        if len(d) < min_obs:
            out.append(_too_few(title, f"{len(d)} conversation(s), at least {min_obs} needed", key))
            continue
        const = [c for c in ("turn1", "n_benign_moves", "n_turns") if d[c].nunique() < 2]
        if const:
            out.append(_too_few(title, f"{', '.join(const)} does not vary", key))
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = smf.mixedlm("y ~ turn1 + n_benign_moves + n_turns", d,
                                  groups=d["target"]).fit(reml=True)
        except (np.linalg.LinAlgError, ValueError) as e:
            out.append(_too_few(title, f"the model did not fit ({e})", key))
            continue
        ci = fit.conf_int()
        terms = ["Intercept", "turn1", "n_benign_moves", "n_turns"]
        tab = pd.DataFrame({"term": terms,
                            "coef": [fit.fe_params[t] for t in terms],
                            "std_err": [fit.bse_fe[t] for t in terms],
                            "z": [fit.tvalues[t] for t in terms],
                            "p": [fit.pvalues[t] for t in terms],
                            "ci_low": [ci.loc[t, 0] for t in terms],
                            "ci_high": [ci.loc[t, 1] for t in terms]})
        group_var = float(fit.cov_re.iloc[0, 0])
        note = (f"{len(d)} conversations, {n_targets} targets; target intercept variance "
                f"{group_var:.4g}; converged: {bool(fit.converged)}.")
        out.append(Stat(title, tab, note, extra={"group_var": group_var, "n_obs": len(d),
                                                 "n_targets": n_targets}, key=key))
    return out


# ----- Spearman ---------------------------------------------------------------------------------
def spearman(summary: pd.DataFrame, min_targets: int = 3) -> Stat:
    """Spearman correlation between the targets' utility ranking and harm ranking, per
    condition (Turn 1, Oracle, BC, NC)."""
    title = "Spearman correlation of utility and harm rankings of targets"
    rows = []
    for cond in ("turn1", "oracle", "bc", "nc"):
        d = summary[[f"{cond}_utility", f"{cond}_harm"]].dropna()
        if len(d) < min_targets:
            rows.append({"condition": cond, "n_targets": len(d), "rho": math.nan, "p": math.nan,
                         "note": f"too few targets (< {min_targets})"})
            continue
        from scipy import stats as sps

        with warnings.catch_warnings():  # a constant ranking: NaN, and the note says why
            warnings.simplefilter("ignore")
            r = sps.spearmanr(d.iloc[:, 0], d.iloc[:, 1])
        rows.append({"condition": cond, "n_targets": len(d), "rho": float(r.statistic),
                     "p": float(r.pvalue), "note": "" if np.isfinite(r.statistic) else "a ranking is constant"})
    df = pd.DataFrame(rows)
    if df["rho"].isna().all():
        enough = df["n_targets"] >= min_targets
        if enough.any():  # enough targets somewhere, but a ranking does not vary there
            why = f"a ranking is constant in {', '.join(df.loc[enough, 'condition'])}"
            if (~enough).any():
                why += (f"; fewer than {min_targets} targets with both measures in "
                        f"{', '.join(df.loc[~enough, 'condition'])}")
            return _too_few(title, why, "spearman")
        return _too_few(title, f"fewer than {min_targets} targets with both measures in every condition",
                        "spearman")
    return Stat(title, df, key="spearman")


# ----- per category -----------------------------------------------------------------------------
def per_category(conv: pd.DataFrame, min_queries: int = 3) -> Stat:
    """Utility recovery and harm change per query category, pooled over targets, with
    model_summary's averaging (Turn 1 per (target, query); the rest per conversation)."""
    title = "Utility recovery and harm change per category"
    if conv.empty:
        return _too_few(title, "no conversations", "per_category")
    rows = []
    for cat, g in conv.groupby(conv["category"].fillna("(unknown)")):
        fol = g[g["condition"].isin(["BC", "NC"])]
        t1 = fol.groupby(["target", "query_id"])[["turn1_utility", "turn1_harm"]].mean()
        bc = g[g["condition"] == "BC"]
        orc = g[g["condition"] == "oracle"]
        n_q = g["query_id"].nunique()
        row = {"category": cat, "n_queries": n_q, "turn1_utility": t1["turn1_utility"].mean(),
               "oracle_utility": orc["utility"].mean(), "bc_utility": bc["utility"].mean(),
               "turn1_harm": t1["turn1_harm"].mean(), "bc_harm": bc["harm_max"].mean()}
        row["recovery_pct"] = (100 * (row["bc_utility"] - row["turn1_utility"]) / row["oracle_utility"]
                               if row["oracle_utility"] and row["oracle_utility"] > 0 else math.nan)
        row["harm_change"] = row["bc_harm"] - row["turn1_harm"]
        if n_q < min_queries:
            for k in ("turn1_utility", "oracle_utility", "bc_utility", "turn1_harm", "bc_harm",
                      "recovery_pct", "harm_change"):
                row[k] = math.nan
            row["note"] = f"too few queries (< {min_queries})"
        else:
            row["note"] = ""
        rows.append(row)
    df = pd.DataFrame(rows)
    cols = ["category", "n_queries", "turn1_utility", "oracle_utility", "bc_utility", "recovery_pct",
            "turn1_harm", "bc_harm", "harm_change", "note"]
    return Stat(title, df[cols], key="per_category")
