"""The paper's remaining analyses (pandas on the metric views, like analyses.py).

Table 2 with harm means, per-domain change from Turn 1 (Figure 22), per-model move effects
(Figure 24), per-family turn trends (Figure 17), ranking comparison across the four
conditions (Figure 18) and oracle vs BC per model (Figure 19). Each returns a ``Stat``; with
too little data the Stat has no table and a "Not computed: why" note.
"""

from __future__ import annotations

import math

import pandas as pd

from tasks.benchmarks.carryon.categories import DOMAIN_NAMES, lookup
from tasks.benchmarks.carryon.report.analyses import MOVES, Stat, _too_few

CONDITIONS = ("turn1", "oracle", "bc", "nc")
CONDITION_LABELS = {"turn1": "Turn 1", "oracle": "Oracle", "bc": "BC", "nc": "NC"}
UNKNOWN_DOMAIN = "(unknown domain)"


# ----- Table 2 with harm means -------------------------------------------------------------------
def table2(summary: pd.DataFrame, conv: pd.DataFrame) -> pd.DataFrame:
    """model_summary with ``<cond>_harm_mean`` beside each ``<cond>_harm`` (the view's harm_max
    mean): the mean over completed conversations of that condition of the conversation's
    harm_mean (R7's averaging; Turn 1 is a single turn, so its mean is its max)."""
    out = summary.copy()
    for cond, col in (("oracle", "oracle_harm"), ("BC", "bc_harm"), ("NC", "nc_harm")):
        c = conv[conv["condition"] == cond]
        means = c.groupby("target")["harm_mean"].mean() if len(c) else pd.Series(dtype=float)
        new = f"{col}_mean"
        out[new] = out["target"].map(means) if len(out) else pd.Series(dtype=float)
        if col in out.columns:  # beside the max
            cols = [x for x in out.columns if x != new]
            cols.insert(cols.index(col) + 1, new)
            out = out[cols]
    return out


# ----- per domain (Figure 22) --------------------------------------------------------------------
def query_domains(conv: pd.DataFrame, queries: pd.DataFrame | None) -> pd.Series:
    """The SORRY-Bench domain of each conversation: the queries table's domain, else the
    domain of its category name, else "(unknown domain)"."""
    dom = {}
    if queries is not None and len(queries) and "domain" in queries:
        dom = {q: d for q, d in zip(queries["query_id"], queries["domain"]) if isinstance(d, str) and d}

    def one(qid, cat):
        if qid in dom:
            return dom[qid]
        c = lookup(cat) if isinstance(cat, str) else None
        return c.domain if c else UNKNOWN_DOMAIN

    return pd.Series([one(q, c) for q, c in zip(conv["query_id"], conv["category"])], index=conv.index,
                     dtype=object)


def domain_changes(conv: pd.DataFrame, queries: pd.DataFrame | None = None, min_queries: int = 3) -> Stat:
    """Per SORRY-Bench domain, pooled over targets: Turn-1 utility and harm, and the change
    from Turn 1 under Oracle, BC and NC (condition mean - Turn-1 mean; Turn 1 per (target,
    query) first, the others per conversation, as in model_summary)."""
    title = "Change from Turn 1 per domain (BC, NC; oracle line)"
    key = "domain_changes"
    if conv.empty:
        return _too_few(title, "no conversations", key)
    c = conv.assign(domain=query_domains(conv, queries))
    present = [d for d in DOMAIN_NAMES] + sorted(set(c["domain"]) - set(DOMAIN_NAMES))
    rows = []
    for dom in present:
        g = c[c["domain"] == dom]
        n_q = g["query_id"].nunique()
        row = {"domain": dom, "n_queries": n_q}
        fol = g[g["condition"].isin(["BC", "NC"])]
        t1 = fol.groupby(["target", "query_id"])[["turn1_utility", "turn1_harm"]].mean()
        row["turn1_utility"] = t1["turn1_utility"].mean() if len(t1) else math.nan
        row["turn1_harm"] = t1["turn1_harm"].mean() if len(t1) else math.nan
        for cond in ("oracle", "BC", "NC"):
            x = g[g["condition"] == cond]
            row[f"{cond.lower()}_utility_change"] = x["utility"].mean() - row["turn1_utility"] if len(x) else math.nan
            row[f"{cond.lower()}_harm_change"] = x["harm_max"].mean() - row["turn1_harm"] if len(x) else math.nan
        if n_q < min_queries:
            for k in list(row):
                if k not in ("domain", "n_queries"):
                    row[k] = math.nan
            row["note"] = "no queries" if n_q == 0 else f"too few queries (< {min_queries})"
        else:
            row["note"] = ""
        if dom in DOMAIN_NAMES or n_q:
            rows.append(row)
    df = pd.DataFrame(rows)
    vals = [k for k in df.columns if k.endswith("_change")]
    if df[vals].isna().all().all():
        return _too_few(title, f"no domain has at least {min_queries} queries with Turn-1 and "
                               "BC/NC/oracle scores", key)
    return Stat(title, df, "Change = condition mean − Turn-1 mean (utility in points, harm on 1–5); "
                           "pooled over targets.", key=key)


# ----- per-model move effects (Figure 24) ----------------------------------------------------------
def move_effects_per_model(turns: pd.DataFrame) -> Stat:
    """Per target and follow-up move: mean deviation of turn utility and harm from that target's
    mean follow-up turn (turn 2 on, BC and NC), as in move_effects but not pooled."""
    title = "Move effects per target (deviation from the target's mean follow-up turn)"
    key = "move_effects_per_model"
    t = turns[turns["condition"].isin(["BC", "NC"]) & (turns["turn_index"] >= 2)].copy()
    if t.empty:
        return _too_few(title, "no follow-up turns", key)
    for col in ("utility", "harm"):
        t[col + "_dev"] = t[col] - t.groupby("target")[col].transform("mean")
    df = (t.groupby(["target", "move"])
          .agg(n_turns=("move", "size"), utility_dev=("utility_dev", "mean"), harm_dev=("harm_dev", "mean"))
          .reset_index())
    if df[["utility_dev", "harm_dev"]].isna().all().all():
        return _too_few(title, "no follow-up turn is scored", key)
    order = {m: i for i, m in enumerate(MOVES)}
    df = df.sort_values(["target", "move"], key=lambda s: s.map(lambda m: order.get(m, 99))
                        if s.name == "move" else s).reset_index(drop=True)
    return Stat(title, df, key=key)


# ----- per-family turn trends (Figure 17) ----------------------------------------------------------
def target_families(config: dict | None) -> dict[str, str]:
    """target name -> family, from the run's config: the entry's ``family``, else its name."""
    models = (config or {}).get("models") if isinstance(config, dict) else None
    targets = models.get("targets") if isinstance(models, dict) else None
    out = {}
    for e in targets if isinstance(targets, list) else []:
        if isinstance(e, dict) and (e.get("name") or e.get("model")):
            name = str(e.get("name") or e.get("model"))
            out[name] = str(e.get("family") or name)
    return out


def family_turn_trends(turns: pd.DataFrame, config: dict | None = None) -> Stat:
    """Mean turn utility and harm per model family, condition (BC, NC) and turn index."""
    title = "Turn trends per model family (BC, NC)"
    key = "family_turn_trends"
    t = turns[turns["condition"].isin(["BC", "NC"])]
    t = t.dropna(subset=["utility", "harm"], how="all")
    if t.empty:
        return _too_few(title, "no scored BC/NC turns", key)
    fam = target_families(config)
    t = t.assign(family=t["target"].map(lambda x: fam.get(x, x)))
    df = (t.groupby(["family", "condition", "turn_index"])
          .agg(n_turns=("target", "size"), n_targets=("target", "nunique"),
               utility=("utility", "mean"), harm=("harm", "mean"))
          .reset_index())
    wide = df.pivot_table(index=["family", "condition"], columns="turn_index",
                          values=["utility", "harm"], aggfunc="mean")
    wide.columns = [f"{'U' if v == 'utility' else 'harm'} t{int(t)}" for v, t in wide.columns]
    order = [c for p in ("U", "harm") for c in wide.columns if c.startswith(p + " ")]
    wide = wide[order]
    wide.insert(0, "n_targets", df.groupby(["family", "condition"])["n_targets"].max())
    note = ("Family = the target's `family` in the run's config, else its name. U t<k> = mean turn "
            "utility (%) at model turn k, harm t<k> = mean harm (1–5).")
    return Stat(title, wide.reset_index(), note, {"per_turn": df}, key=key)


# ----- ranking comparison (Figure 18) ---------------------------------------------------------------
def ranking_comparison(summary: pd.DataFrame, min_targets: int = 2) -> Stat:
    """Each target's utility rank (1 = most useful) and harm rank (1 = least harmful) in each
    of the four conditions; ties share the best rank."""
    title = "Target rankings across Turn 1, Oracle, BC and NC"
    key = "ranking_comparison"
    cols = [f"{c}_utility" for c in CONDITIONS] + [f"{c}_harm" for c in CONDITIONS]
    if summary.empty or len(summary) < min_targets:
        return _too_few(title, f"{len(summary)} target(s), a ranking needs at least {min_targets}", key)
    s = summary.set_index("target")[[c for c in cols if c in summary]]
    if s.notna().sum().max() < min_targets:
        return _too_few(title, f"no condition has at least {min_targets} targets with a score", key)
    out = pd.DataFrame(index=s.index)
    for what, ascending in (("utility", False), ("harm", True)):
        for c in CONDITIONS:
            v = s.get(f"{c}_{what}")
            r = v.rank(ascending=ascending, method="min") if v is not None else pd.Series(math.nan, s.index)
            out[f"{c}_{what}_rank"] = r.astype("Int64")  # whole ranks; <NA> where not scored
    out = out.reset_index()
    return Stat(title, out, "Utility rank 1 = highest utility; harm rank 1 = lowest harm.", key=key)


# ----- oracle vs BC (Figure 19) ----------------------------------------------------------------------
def oracle_vs_bc(summary: pd.DataFrame) -> Stat:
    """Per target: oracle and BC utility, BC - oracle and BC / oracle (%)."""
    title = "Oracle vs BC utility per target"
    key = "oracle_vs_bc"
    if summary.empty:
        return _too_few(title, "no targets", key)
    d = summary[["target", "oracle_utility", "bc_utility"]].copy()
    if d[["oracle_utility", "bc_utility"]].notna().all(axis=1).sum() == 0:
        return _too_few(title, "no target has both an oracle and a BC utility", key)
    d["bc_minus_oracle"] = d["bc_utility"] - d["oracle_utility"]
    d["bc_over_oracle_pct"] = [100 * b / o if pd.notna(b) and pd.notna(o) and o > 0 else math.nan
                               for b, o in zip(d["bc_utility"], d["oracle_utility"])]
    return Stat(title, d, "BC below the oracle is the utility lock-in rule (see Rules).", key=key)
