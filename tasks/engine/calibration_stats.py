"""The statistics of a calibration (``carryon calibrate``, tasks/engine/calibrate.py): how far two
settings of one judge agree on the same units.

- Agreement over the units both settings scored: the share of equal labels and Cohen's kappa,
  (p_o - p_e) / (1 - p_e) with p_e from each setting's own label frequencies (the rule of
  tasks/core/votes.py ``cohen_kappa``, which a panel's agreement uses too); None where p_e = 1.
- Its confidence interval: a percentile bootstrap over *clusters* (a benchmark item: a
  CarryOnBench query), every unit of a drawn cluster together, because the units of one
  cluster are correlated: its conversations share their checklist, and under prefix sample
  keys (DESIGN.md: the project's choice, not the paper's) their first answers and every shared
  prefix. Seeded, so the same sample gives the same interval. Each cluster's units reduce to a
  contingency table, so a replicate is a weighted sum of tables: one product for all of them.
- Where the settings disagree most: the disagreement share per group of units (a checklist
  position, a response length, a condition, a target), with its count.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tasks.core.votes import cohen_kappa

N_BOOT = 1000
LEVEL = 0.95
SEED = 0
# Response length bins (words) for the breakdown: upper bounds, the last open.
LENGTH_BINS = (50, 150, 300, 600)


def _kappas(tables: np.ndarray) -> np.ndarray:
    """Cohen's kappa of each contingency table (..., k, k); NaN where undefined."""
    n = tables.sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        p_o = np.trace(tables, axis1=-2, axis2=-1) / n
        p_e = (tables.sum(axis=-1) * tables.sum(axis=-2)).sum(axis=-1) / (n * n)
        k = (p_o - p_e) / (1 - p_e)
    return np.where((n > 0) & (p_e < 1), k, np.nan)


def kappa_ci(pairs: list[tuple], n_boot: int = N_BOOT, seed: int = SEED,
             level: float = LEVEL) -> dict:
    """``pairs`` = [(cluster, label a, label b)] over the units both settings scored ->
    {n, n_clusters, share, disagree, kappa, ci_lo, ci_hi}: the point estimates over every
    pair, and the percentile interval of kappa over ``n_boot`` replicates that draw clusters
    with replacement (none with fewer than two clusters, or where no replicate is defined)."""
    n, share, kappa = cohen_kappa([a for _, a, _ in pairs], [b for _, _, b in pairs])
    out = {"n": n, "n_clusters": len({c for c, _, _ in pairs}), "share": share,
           "disagree": None if share is None else 1 - share, "kappa": kappa,
           "ci_lo": None, "ci_hi": None}
    if out["n_clusters"] < 2 or kappa is None:
        return out
    labels = sorted({x for _, a, b in pairs for x in (a, b)}, key=repr)
    at = {x: i for i, x in enumerate(labels)}
    clusters = sorted({c for c, _, _ in pairs}, key=repr)
    ci = {c: i for i, c in enumerate(clusters)}
    tables = np.zeros((len(clusters), len(labels), len(labels)))
    for c, a, b in pairs:
        tables[ci[c], at[a], at[b]] += 1
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(clusters), np.full(len(clusters), 1 / len(clusters)),
                            size=n_boot).astype(float)
    boot = _kappas(np.einsum("bc,ckl->bkl", draws, tables))
    boot = boot[~np.isnan(boot)]
    if len(boot):
        alpha = (1 - level) / 2
        out["ci_lo"] = float(np.quantile(boot, alpha))
        out["ci_hi"] = float(np.quantile(boot, 1 - alpha))
    return out


def length_bin(words: int) -> str:
    """A response length's bin, in words ("<50", "50-149", ..., "600+")."""
    low = 0
    for high in LENGTH_BINS:
        if words < high:
            return f"<{high}" if low == 0 else f"{low}-{high - 1}"
        low = high
    return f"{LENGTH_BINS[-1]}+"


def breakdown(units: list[dict], by: str) -> list[dict]:
    """Per value of ``by`` over units both settings scored ({..., "agree": bool}): the units,
    how many the settings disagree on, and that share; the groups in their own order."""
    groups: dict = defaultdict(lambda: [0, 0])
    for u in units:
        g = groups[u[by]]
        g[0] += 1
        g[1] += not u["agree"]
    return [{by: k, "n": n, "n_disagree": d, "disagree": d / n}
            for k, (n, d) in sorted(groups.items(), key=lambda kv: _order(kv[0]))]


def _order(value):
    # Numbers in numeric order, length bins shortest first, the rest by name.
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, _BINS.index(value) if value in _BINS else len(_BINS), str(value))


_BINS = [length_bin(w) for w in (0, *LENGTH_BINS)]
