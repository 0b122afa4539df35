"""Beside the paper: a run's numbers next to the published ones (the report's "Beside the paper"
section, and ``carryon report --compare paper``).

The paper's numbers are data (``tasks/benchmarks/carryon/paper.yaml``: Table 2, the text of
Figure 22, Tables 3 and 4, with their source). A target of the run links to a row of Table 2 by
``paper_name:`` in its config entry (matched without regard to case); a target without one is
shown with ours only, and is left out of the rankings, the per-domain and the mixed-model
comparisons, which pool the linked targets (the paper pools its fourteen).

- Table 2: for every target and cell, ours (model_summary, R7), our 95 % interval (the
  bootstrap over queries of table2_ci.py: the same seed and replicates; a change from Turn 1
  from the same replicates), the paper's value, the difference (ours - paper) and whether the
  paper's value lies inside our interval (ends included; "—" without an interval). The
  interval is this run's sampling of queries only: the paper publishes no intervals.
- Rankings: per condition (Turn 1, Oracle, BC, NC) and measure, the linked targets ordered by
  our value and by the paper's (utility: highest first; harm: lowest first), and Spearman's
  rho between our values and the paper's (average ranks for ties; at least three targets).
- Per domain (Figure 22): domain_changes (paper_analyses.py) on the linked targets, beside
  the values the paper's text gives; a range the text gives for all domains is a range.
- Mixed models (Tables 3 and 4): analyses.mixed_models on the linked targets, each
  coefficient with its standard error and 95 % interval beside the paper's, and the variance
  of the target intercepts.

Each function returns a ``Stat``; with too little data, a "Not computed: why" note. The first,
``scale``, says first when the run is smaller than the paper's (fewer queries, lengths,
conversations per query or targets).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from tasks.benchmarks.carryon.report import table2_ci as t2ci
# The paper's numbers (reading and validating paper.yaml); re-exported here, where the report
# and its tests find them.
from tasks.benchmarks.carryon.report.paper_data import (  # noqa: F401
    OUTCOMES, PAPER_FILE, TERMS, Paper, PaperDataError, load_paper, paper_links,
)
from tasks.benchmarks.carryon.report.paper_analyses import domain_changes
from tasks.benchmarks.carryon.report.stat import Stat, _too_few


# The section's statistics, in the order the report shows them.
KEYS = ("paper_scale", "paper_table2", "paper_rankings", "paper_domains", "paper_mixed_models")
TITLES = {
    "paper_scale": "This run's size beside the paper's",
    "paper_table2": "Table 2 beside the paper's",
    "paper_rankings": "Rankings of targets beside the paper's",
    "paper_domains": "Per domain beside the paper's Figure 22",
    "paper_mixed_models": "Mixed models beside the paper's Tables 3 and 4",
}
SECTION = "Beside the paper"
CONDITIONS = (("turn1", "Turn 1"), ("oracle", "Oracle"), ("bc", "BC"), ("nc", "NC"))
# The changes from Turn 1 Table 2 prints, from the columns table2_ci bootstraps.
CHANGES = {"bc_utility_change": ("bc_utility", "turn1_utility"),
           "bc_harm_change": ("bc_harm", "turn1_harm"),
           "nc_utility_change": ("nc_utility", "turn1_utility"),
           "nc_harm_change": ("nc_harm", "turn1_harm")}
MIN_RANKED = 3


def _linked(conv: pd.DataFrame, links: dict[str, str]) -> pd.DataFrame:
    return conv[conv["target"].isin(list(links))] if len(conv) else conv


def _linked_conversations(conv: pd.DataFrame | None, config: dict | None, paper,
                          key: str) -> pd.DataFrame | Stat:
    """The conversations of the targets with a paper row, or the Stat saying why there are none."""
    if conv is None or conv.empty:
        return _too_few(TITLES[key], "no completed conversations", key)
    links, unknown = paper_links(config, paper)
    sub = _linked(conv, links)
    return _no_links(key, unknown) if sub.empty else sub


def _no_links(key: str, unknown: dict[str, str]) -> Stat:
    why = ("no target of this run names a row of the paper's Table 2 (set `paper_name:` on the "
           "entries of models.targets, as configs/paper.yaml does)")
    if unknown:
        why += "; " + _unknown_text(unknown)
    return _too_few(TITLES[key], why, key)


def _unknown_text(unknown: dict[str, str]) -> str:
    return "; ".join(f"target {t}: paper_name {p!r} is not a row of the paper's Table 2"
                     for t, p in sorted(unknown.items()))


def _num(x) -> float | None:
    if x is None or x is pd.NA:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def inside(value: float | None, lo: float | None, hi: float | None) -> bool | None:
    """Whether ``value`` lies in [lo, hi] (ends included); None when either is unknown."""
    if value is None or lo is None or hi is None:
        return None
    return bool(lo <= value <= hi)


# ----- the run's size ---------------------------------------------------------------------------
def scale(conv: pd.DataFrame, config: dict | None) -> Stat:
    """The run's queries, lengths, BC/NC conversations per query and target, and linked targets
    beside the paper's design; ``extra["lead"]`` (the note) says first whether it is smaller."""
    key = "paper_scale"
    paper = load_paper()
    if conv is None or conv.empty:
        return _too_few(TITLES[key], "no completed conversations", key)
    links, unknown = paper_links(config, paper)
    present = set(conv["target"])
    linked = sorted(t for t in links if t in present)
    d = paper.design
    fol = conv[conv["condition"].isin(["BC", "NC"])]
    n_q = int(conv["query_id"].nunique())
    lengths = sorted(int(x) for x in fol["length"].dropna().unique()) if "length" in fol else []
    per_q = float(fol.groupby(["target", "query_id"]).size().mean()) if len(fol) else 0.0
    p_lengths = [int(x) for x in d.get("lengths", [])]
    p_per_q = len(p_lengths) * (int(d.get("bc_per_length", 0)) + int(d.get("nc_per_length", 0)))
    p_q, p_t = int(d.get("queries", 0)), int(d.get("targets", len(paper.table2)))
    table = pd.DataFrame([
        {"what": "queries", "this run": str(n_q), "the paper": str(p_q)},
        {"what": "lengths (turns, both sides)", "this run": ", ".join(map(str, lengths)) or "none",
         "the paper": ", ".join(map(str, p_lengths))},
        {"what": "BC/NC conversations per query and target", "this run": f"{per_q:g}",
         "the paper": str(p_per_q)},
        {"what": "targets with a paper row", "this run": str(len(linked)), "the paper": str(p_t)},
    ])
    smaller = []
    if n_q < p_q:
        smaller.append(f"{n_q} queries (the paper: {p_q})")
    missing = [x for x in p_lengths if x not in lengths]
    if missing:
        smaller.append(f"lengths {', '.join(map(str, lengths)) or 'none'} (the paper: "
                       f"{', '.join(map(str, p_lengths))})")
    if per_q < p_per_q:
        smaller.append(f"{per_q:g} BC/NC conversations per query and target (the paper: {p_per_q})")
    if len(linked) < p_t:
        smaller.append(f"{len(linked)} of the paper's {p_t} targets")
    if smaller:
        lead = ("This run is smaller than the paper's: " + "; ".join(smaller) + ". Its intervals are "
                "wider, its rankings and pooled models cover fewer targets, and a difference from the "
                "paper says less than at the paper's size.")
    else:
        lead = "This run is the paper's size (queries, lengths, conversations per query, targets)."
    note = []
    others = sorted(present - set(links))
    if others:
        note.append("Without a paper row (ours only): " + ", ".join(others) + ".")
    if unknown:
        note.append(_unknown_text(unknown) + ".")
    note.append(f"The paper's numbers: {paper.source} (tasks/benchmarks/carryon/{PAPER_FILE.name}).")
    # The lead is what the section prints first (lead_line); the note is the rest.
    return Stat(TITLES[key], table, " ".join(note),
                extra={"lead": lead, "smaller": smaller, "linked": linked, "unlinked": others},
                key=key)


# ----- Table 2 ----------------------------------------------------------------------------------
def table2(conv: pd.DataFrame, config: dict | None, n_boot: int = t2ci.N_BOOT,
           seed: int = t2ci.SEED, level: float = t2ci.LEVEL) -> Stat:
    """Every Table 2 cell of every target: ours, our interval, the paper's, ours - paper and
    whether the paper's value lies inside our interval (one row per target and cell)."""
    key = "paper_table2"
    paper = load_paper()
    if conv is None or conv.empty:
        return _too_few(TITLES[key], "no completed conversations", key)
    links, unknown = paper_links(config, paper)
    if not set(links) & set(conv["target"]):
        return _no_links(key, unknown)
    rows, counts = [], {}
    for target, g in conv.groupby("target", sort=True):
        point, boot, _ = t2ci.replicates(g, n_boot, seed)
        for name, (a, b) in CHANGES.items():
            if a in point and b in point:
                point[name] = point[a] - point[b]
                if boot:
                    boot[name] = boot[a] - boot[b]
        row_name = links.get(target)
        ref = paper.table2.get(row_name) if row_name else None
        for cell in paper.columns:
            ours = _num(point[cell][0]) if cell in point else None
            lo = hi = None
            if ours is not None and cell in boot:
                lo, hi = t2ci.interval(boot[cell], level)
            p = ref.get(cell) if ref else None
            flag = inside(p, lo, hi)
            rows.append({"target": target, "paper_name": row_name, "cell": cell, "ours": ours,
                         "ci_lo": lo, "ci_hi": hi, "paper": p,
                         "difference": None if ours is None or p is None else ours - p,
                         "paper_in_ci": flag})
            if ref and p is not None:
                n_in, n_cells = counts.get(target, (0, 0))
                counts[target] = (n_in + bool(flag), n_cells + 1)
    df = pd.DataFrame(rows)
    pct = round(100 * level)
    inside_txt = "; ".join(f"{t} ({links[t]}) {i} of {n}" for t, (i, n) in counts.items())
    note = (f"Ours: model_summary (R7); our interval: the {pct} % bootstrap over queries of Table 2's "
            f"intervals ({n_boot} replicates, seed {seed}; a change from Turn 1 from the same "
            f"replicates; none with a single query). difference = ours − the paper's; paper_in_ci: "
            f"the paper's value lies inside our interval (ends included), i.e. within this run's "
            f"noise from sampling queries (the paper publishes no intervals, so its own noise is not "
            f"counted). Inside our interval: {inside_txt}. Harm = the mean of each conversation's "
            f"highest turn score (the paper's §4). Recovery% is 100 × (BC − Turn 1) ÷ Oracle; the "
            f"paper's printed cells for {', '.join(paper.recovery_as_bc_over_oracle)} equal BC ÷ Oracle "
            f"instead. A target without a paper row shows ours only. Source: {paper.table2_source}.")
    if unknown:
        note += " " + _unknown_text(unknown) + "."
    return Stat(TITLES[key], df, note, extra={"inside": counts}, key=key)


# ----- rankings ---------------------------------------------------------------------------------
def _order(values: pd.Series, ascending: bool) -> str:
    """Targets best first ("a > b = c"), ties joined by "="."""
    groups = []
    for v, g in values.groupby(values, sort=True):
        groups.append((v, sorted(g.index)))
    if not ascending:
        groups.reverse()
    return " > ".join(" = ".join(names) for _, names in groups)


def rankings(summary: pd.DataFrame, config: dict | None, min_targets: int = MIN_RANKED) -> Stat:
    """Per condition and measure: the linked targets ordered by our value and by the paper's,
    and Spearman's rho between the two (ties: average ranks)."""
    key = "paper_rankings"
    paper = load_paper()
    if summary is None or summary.empty:
        return _too_few(TITLES[key], "no targets in the model summary", key)
    links, unknown = paper_links(config, paper)
    s = summary[summary["target"].isin(list(links))].set_index("target")
    if s.empty:
        return _no_links(key, unknown)
    if len(s) < min_targets:
        return _too_few(TITLES[key], f"{len(s)} target(s) with a paper row, a ranking needs at least "
                                     f"{min_targets}", key)
    rows = []
    for cond, label in CONDITIONS:
        for measure, ascending in (("utility", False), ("harm", True)):
            col = f"{cond}_{measure}"
            # rounded to 9 decimals: equal values computed by different sums tie, as they should
            ours = s[col].astype(float).round(9) if col in s else pd.Series(dtype=float)
            theirs = pd.Series({t: paper.table2[links[t]].get(col) for t in s.index}, dtype=float)
            both = pd.concat([ours.rename("ours"), theirs.rename("paper")], axis=1).dropna()
            row = {"condition": label, "measure": measure, "n_targets": len(both),
                   "ours (best first)": _order(both["ours"], ascending) if len(both) else "",
                   "paper (best first)": _order(both["paper"], ascending) if len(both) else "",
                   "rho": math.nan, "note": ""}
            if len(both) < min_targets:
                row["note"] = f"too few targets (< {min_targets})"
            else:
                from scipy import stats as sps  # here: a kept report needs no scipy

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    rho = float(sps.spearmanr(both["ours"], both["paper"]).statistic)
                row["rho"] = rho
                if not np.isfinite(rho):
                    row["note"] = "a ranking is constant"
            rows.append(row)
    df = pd.DataFrame(rows)
    if df["n_targets"].max() < min_targets:
        return _too_few(TITLES[key], f"no condition has {min_targets} targets with a paper row and a "
                                     "value of ours", key)
    note = ("Utility: highest first; harm: lowest first; the paper's ordering is of the same targets by "
            "its Table 2 values. rho: Spearman's rank correlation between our values and the paper's "
            "over these targets (ties share their average rank).")
    if unknown:
        note += " " + _unknown_text(unknown) + "."
    return Stat(TITLES[key], df, note, key=key)


# ----- per domain (Figure 22) ---------------------------------------------------------------------
def domains(conv: pd.DataFrame, queries: pd.DataFrame | None, config: dict | None) -> Stat:
    """The paper's per-domain numbers beside domain_changes on the linked targets."""
    key = "paper_domains"
    paper = load_paper()
    sub = _linked_conversations(conv, config, paper, key)
    if isinstance(sub, Stat):
        return sub
    ours = domain_changes(sub, queries)
    if ours.table is None:
        return Stat(TITLES[key], None, ours.note, key=key)
    by = ours.table.set_index("domain")
    rows = []
    for d in paper.domains:
        r = by.loc[d["domain"]] if d["domain"] in by.index else None
        value = None
        if r is not None:
            if d["measure"] == "bc_utility":
                value = _num(r.get("turn1_utility"))
                change = _num(r.get("bc_utility_change"))
                value = None if value is None or change is None else value + change
            else:
                value = _num(r.get(d["measure"]))
        why = "" if r is None else str(r.get("note") or "")
        if r is None:
            why = "no query of this domain"
        row = {"domain": d["domain"], "measure": d["measure"], "ours": value}
        if "range" in d:
            lo, hi = d["range"]
            row.update(paper=f"{lo:g}–{hi:g}", difference=None, within_paper_range=inside(value, lo, hi))
        else:
            row.update(paper=d["value"], difference=None if value is None else value - d["value"],
                       within_paper_range=None)
        row["note"] = why
        rows.append(row)
    n_t = sub["target"].nunique()
    note = (f"Ours: pooled over the {n_t} target(s) with a paper row (the paper: its "
            f"{paper.design.get('targets', 14)}); utility in %, harm 1–5; bc_utility = Turn 1 + the BC "
            f"change; a change = the condition's mean − the Turn-1 mean. difference = ours − the paper's; "
            f"within_paper_range: for a range the paper gives for every domain. Source: "
            f"{paper.domains_source}.")
    return Stat(TITLES[key], pd.DataFrame(rows), note, key=key)


# ----- mixed models (Tables 3 and 4) --------------------------------------------------------------
def mixed_models(conv: pd.DataFrame, config: dict | None, fitted: list[Stat] | None = None) -> Stat:
    """Each coefficient of the two mixed models (on the linked targets) beside the paper's.
    ``fitted``: the report's own fits (analyses.mixed_models on every target), used when every
    target has a paper row, so the models are not fitted twice."""
    key = "paper_mixed_models"
    paper = load_paper()
    sub = _linked_conversations(conv, config, paper, key)
    if isinstance(sub, Stat):
        return sub
    by_key = {s.key: s for s in fitted or []}
    if fitted and set(sub["target"]) == set(conv["target"]) and all(k in by_key for _, k, _ in OUTCOMES):
        fits = by_key
    else:
        from tasks.benchmarks.carryon.report.analyses import mixed_models as fit_models

        fits = {s.key: s for s in fit_models(sub)}
    rows, why = [], []
    for outcome, stat_key, label in OUTCOMES:
        fit = fits.get(stat_key)
        tab = fit.table.set_index("term") if fit is not None and fit.table is not None else None
        if tab is None:
            reason = (fit.note if fit is not None else "") or "not fitted"
            why.append(f"{label}: {reason.removeprefix('Not computed: ').rstrip('.')}")
        ref = paper.mixed[outcome]
        for term, term_label in TERMS:
            t = tab.loc[term] if tab is not None and term in tab.index else None
            ours = _num(t["coef"]) if t is not None else None
            lo = _num(t["ci_low"]) if t is not None else None
            hi = _num(t["ci_high"]) if t is not None else None
            p, p_se = ref[term]
            rows.append({"outcome": label, "term": term_label, "ours": ours,
                         "ours_se": _num(t["std_err"]) if t is not None else None,
                         "ci_lo": lo, "ci_hi": hi, "paper": p, "paper_se": p_se,
                         "difference": None if ours is None else ours - p,
                         "paper_in_ci": inside(p, lo, hi)})
        gv = (fit.extra or {}).get("group_var") if tab is not None else None
        rows.append({"outcome": label, "term": "group variance", "ours": _num(gv), "ours_se": None,
                     "ci_lo": None, "ci_hi": None, "paper": ref["group_var"], "paper_se": None,
                     "difference": None if gv is None else float(gv) - ref["group_var"],
                     "paper_in_ci": None})
    if len(why) == len(OUTCOMES):
        return _too_few(TITLES[key], "; ".join(why), key)
    note = (f"Ours: MixedLM (REML, random intercept per target) of BC and NC conversations of the "
            f"{sub['target'].nunique()} target(s) with a paper row; safety = the conversation's "
            f"highest turn score; N turns = the conversation's length (turns of both sides); "
            f"ci_lo/ci_hi: our 95 % Wald interval; paper_in_ci: the paper's coefficient inside it. "
            f"Source: {paper.mixed_source}.")
    if why:
        note += " Not fitted: " + "; ".join(why) + "."
    return Stat(TITLES[key], pd.DataFrame(rows), note, key=key)


# ----- the section as text (report.md and the CLI) ------------------------------------------------
def section_stats(stats: list[Stat]) -> list[Stat]:
    """The section's statistics among the report's, in KEYS order."""
    by = {s.key: s for s in stats}
    return [by[k] for k in KEYS if k in by]


def lead_line(stats: list[Stat]) -> str:
    """What the section says first: whether the run is smaller than the paper's."""
    for s in stats:
        if s.key == "paper_scale":
            return (s.extra or {}).get("lead") or s.note
    return ""

