"""Agreement measures for human validation (pure functions; each kind's ``results`` feeds
them; CarryOnBench's naturalness study adds its own, tasks/benchmarks/carryon/validation.py).

Definitions (the report repeats them):
- Cohen's kappa (statsmodels.stats.inter_rater.cohens_kappa) on binarised labels for every
  pair of annotators that labelled at least 2 common turns; the report gives the mean over
  pairs where kappa is defined (the pool design means each pair shares only some turns).
- Krippendorff's alpha (the ``krippendorff`` package, nominal) on the binarised labels, one
  reliability matrix of annotators x units with missing cells where an annotator did not
  label the unit.
- Share agreement (benutil, safety): equal labels / units both labelled.
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np


def cohen_kappa(a: list[int], b: list[int], categories=(0, 1)) -> float | None:
    """Cohen's kappa of two raters' paired labels; None where undefined (chance agreement 1)."""
    from statsmodels.stats.inter_rater import cohens_kappa

    if len(a) != len(b) or not a:
        return None
    idx = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    for x, y in zip(a, b):
        table[idx[x], idx[y]] += 1
    n = table.sum()
    p_e = float((table.sum(0) / n) @ (table.sum(1) / n))
    if p_e >= 1.0 - 1e-12:
        return None
    return float(cohens_kappa(table, return_results=False))


def krippendorff_alpha(matrix: list[list[float]]) -> float | None:
    """Nominal Krippendorff's alpha; rows = annotators, columns = units, NaN = missing.
    None where undefined (fewer than two pairable values, or a single value overall)."""
    import krippendorff

    data = np.array(matrix, dtype=float)
    if data.size == 0:
        return None
    pairable = data[:, (~np.isnan(data)).sum(0) >= 2]
    values = pairable[~np.isnan(pairable)]
    if values.size < 2 or len(set(values.tolist())) < 2:
        return None
    a = float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))
    return None if math.isnan(a) else a


def pairwise_kappa(labels: dict, min_common: int = 2) -> tuple[float | None, list[dict]]:
    """labels = {unit: {annotator: binary label}} -> (mean kappa over pairs, per-pair rows)."""
    annotators = sorted({a for v in labels.values() for a in v})
    rows = []
    for x, y in itertools.combinations(annotators, 2):
        common = [u for u, v in labels.items() if x in v and y in v]
        if len(common) < min_common:
            continue
        k = cohen_kappa([labels[u][x] for u in common], [labels[u][y] for u in common])
        rows.append({"a": x, "b": y, "n": len(common), "kappa": k})
    ks = [r["kappa"] for r in rows if r["kappa"] is not None]
    return (statistics.fmean(ks) if ks else None), rows


def alpha_of(labels: dict) -> float | None:
    annotators = sorted({a for v in labels.values() for a in v})
    units = sorted(labels)
    return krippendorff_alpha([[labels[u].get(a, math.nan) for u in units] for a in annotators])


def share(a: list, b: list) -> tuple[int, float | None]:
    n = len(a)
    return n, (sum(1 for x, y in zip(a, b) if x == y) / n if n else None)


def between_annotators(labels: dict) -> dict:
    """labels = {unit: {annotator: value}} -> pooled and per-pair share of equal labels."""
    annotators = sorted({a for v in labels.values() for a in v})
    pairs, eq, seen = [], 0, 0
    for x, y in itertools.combinations(annotators, 2):
        common = [u for u, v in labels.items() if x in v and y in v]
        n, s = share([labels[u][x] for u in common], [labels[u][y] for u in common])
        if n:
            pairs.append({"a": x, "b": y, "n": n, "share": s})
            eq += round(s * n)
            seen += n
    return {"pooled": (eq / seen) if seen else None, "n": seen, "pairs": pairs}


def with_judge(labels: dict, judge: dict, transform=lambda x: x) -> dict:
    """Per annotator: share of units where transform(label) == transform(judge)."""
    out = {}
    for a in sorted({a for v in labels.values() for a in v}):
        common = [u for u, v in labels.items() if a in v and judge.get(u) is not None]
        n, s = share([transform(labels[u][a]) for u in common], [transform(judge[u]) for u in common])
        out[a] = {"n": n, "share": s}
    return out
