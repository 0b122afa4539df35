"""Figures for the paper's remaining outputs (PNG, matplotlib Agg), one per Stat of
paper_analyses plus redundancy per turn. A Stat without a table, or whose table holds no value
to plot, is not drawn: the report says why in a sentence (figures.drawable raises NotDrawn).
Missing values are no bar and a gap in a line, never a 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from tasks.benchmarks.carryon.report.analyses import MOVES, Stat
from tasks.benchmarks.carryon.report import figures as fg
from tasks.benchmarks.carryon.report.figures import COLORS, plt
from tasks.benchmarks.carryon.report.paper_analyses import CONDITION_LABELS, CONDITIONS


def _wrap(s: str, width: int = 16) -> str:
    words, lines, cur = str(s).split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "\n".join(lines + [cur])


def domain_changes(stat: Stat, path: Path) -> Path:
    """Figure 22: per domain, BC and NC change from Turn 1 (bars), the oracle's change as a
    black line across each group; utility (left) and harm (right)."""
    d = fg.drawable(stat, [f"{c}_{w}_change" for c in ("bc", "nc", "oracle")
                           for w in ("utility", "harm")], "no domain has a scored change from Turn 1")
    x = np.arange(len(d))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, what, label in ((axes[0], "utility", "utility change from Turn 1 (points)"),
                            (axes[1], "harm", "harm change from Turn 1 (1–5 scale)")):
        for off, cond in ((-0.2, "BC"), (0.2, "NC")):
            fg._bars(ax, x + off, d[f"{cond.lower()}_{what}_change"], width=0.4,
                     color=COLORS[cond], label=cond)
        labelled = False
        for i, v in enumerate(d[f"oracle_{what}_change"]):
            if pd.notna(v):
                ax.hlines(v, i - 0.45, i + 0.45, colors="black", linestyles="--", lw=1.6,
                          label=None if labelled else "Oracle")
                labelled = True
        ax.axhline(0, color="#999999", lw=0.8)
        ax.set_xticks(x, [f"{_wrap(dom)}\n(n={n})" for dom, n in zip(d["domain"], d["n_queries"])],
                      fontsize=8)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(stat.title)
    return fg._save(fig, path)


def _heat(ax, pivot: pd.DataFrame, label: str, fmt: str):
    vals = pivot.to_numpy(dtype=float)
    lim = np.nanmax(np.abs(vals)) if np.isfinite(vals).any() else 1.0
    im = ax.imshow(np.ma.masked_invalid(vals), cmap="RdBu_r" if "harm" in label else "RdBu",
                   vmin=-lim or -1, vmax=lim or 1, aspect="auto")
    ax.set_xticks(range(pivot.shape[1]), pivot.columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(pivot.shape[0]), pivot.index, fontsize=8)
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            if np.isfinite(vals[i, j]):
                ax.text(j, i, format(vals[i, j], fmt), ha="center", va="center", fontsize=7)
    ax.set_title(label, fontsize=10)
    ax.set_xlabel("follow-up move")
    ax.set_ylabel("target")
    ax.figure.colorbar(im, ax=ax, shrink=0.8, label=label)


def move_effects_per_model(stat: Stat, path: Path) -> Path:
    """Figure 24: targets x moves, deviation of utility (left) and harm (right)."""
    d = fg.drawable(stat, ["utility_dev", "harm_dev"],
                    "no target has a scored deviation for any move")
    moves = [m for m in MOVES if m in set(d["move"])] + sorted(set(d["move"]) - set(MOVES))
    n_t = d["target"].nunique()
    fig, axes = plt.subplots(1, 2, figsize=(13, max(3.2, 0.45 * n_t + 2)))
    for ax, col, label, fmt in ((axes[0], "utility_dev", "utility deviation (points)", ".1f"),
                                (axes[1], "harm_dev", "harm deviation (1–5 scale)", ".2f")):
        targets = sorted(d["target"].astype(str).unique())
        pv = (d.assign(target=d["target"].astype(str)).groupby(["target", "move"])[col].mean()
              .unstack("move").reindex(index=targets, columns=moves))  # all-NaN rows kept
        _heat(ax, pv, label, fmt)
    fig.suptitle(stat.title)
    return fg._save(fig, path)


def family_turn_trends(stat: Stat, path: Path) -> Path:
    """Figure 17: mean turn utility and harm per turn, a colour per family, BC solid, NC dashed."""
    d = fg.drawable(stat, ["utility", "harm"],
                    "no family has a scored turn", stat.extra.get("per_turn", stat.table))
    lo, hi = int(d["turn_index"].min()), int(d["turn_index"].max())
    fams = sorted(d["family"].unique())
    cmap = plt.get_cmap("tab10" if len(fams) <= 10 else "tab20")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    for ax, col, label in ((axes[0], "utility", "turn utility (%)"), (axes[1], "harm", "harm (1–5)")):
        for i, fam in enumerate(fams):
            for cond, style in (("BC", "-"), ("NC", "--")):
                g = fg._series(d[(d["family"] == fam) & (d["condition"] == cond)]
                               .groupby("turn_index")[col].mean(), lo, hi)
                if g.notna().any():  # an unscored turn is a gap in the line
                    ax.plot(g.index, g.values, style, marker="o", color=cmap(i % cmap.N))
        ax.set_xlabel("model turn")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        if not ax.lines:
            ax.text(0.5, 0.5, "no scored turns", transform=ax.transAxes, ha="center", va="center")
    # One legend outside the plots: a colour per family, a line style per condition.
    handles = [Line2D([], [], color=cmap(i % cmap.N), marker="o", label=str(f)) for i, f in enumerate(fams)]
    handles += [Line2D([], [], color="#333333", ls="-", label="BC"),
                Line2D([], [], color="#333333", ls="--", label="NC")]
    axes[1].legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(stat.title + " — solid BC, dashed NC")
    return fg._save(fig, path)


def ranking_comparison(stat: Stat, path: Path) -> Path:
    """Figure 18: a bump chart of ranks over Turn 1, Oracle, BC, NC (utility left, harm right)."""
    d = fg.drawable(stat, [f"{c}_{w}_rank" for c in CONDITIONS for w in ("utility", "harm")],
                    "no target has a rank in any condition")
    n = len(d)
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    fig, axes = plt.subplots(1, 2, figsize=(13, max(4, 0.35 * n + 2.5)))
    x = list(range(len(CONDITIONS)))
    for ax, what, label in ((axes[0], "utility", "utility rank (1 = highest)"),
                            (axes[1], "harm", "harm rank (1 = lowest harm)")):
        for i, r in enumerate(d.itertuples(index=False)):
            ranks = [getattr(r, f"{c}_{what}_rank") for c in CONDITIONS]
            pts = [(xi, v) for xi, v in zip(x, ranks) if pd.notna(v)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=cmap(i % cmap.N),
                        label=str(r.target))
        ax.set_xticks(x, [CONDITION_LABELS[c] for c in CONDITIONS])
        ax.set_ylim(n + 0.5, 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
    for ax in axes:
        if not ax.get_legend_handles_labels()[0]:
            ax.text(0.5, 0.5, "no ranks (too few scored targets)", transform=ax.transAxes,
                    ha="center", va="center")
    src = axes[1] if axes[1].get_legend_handles_labels()[0] else axes[0]
    if src.get_legend_handles_labels()[0]:
        h, lab = src.get_legend_handles_labels()
        axes[1].legend(h, lab, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(stat.title)
    return fg._save(fig, path)


def oracle_vs_bc(stat: Stat, path: Path) -> Path:
    """Figure 19: oracle and BC utility side by side per target, BC / oracle (%) above."""
    d = fg.drawable(stat, ["oracle_utility", "bc_utility"],
                    "no target has a scored oracle or BC utility")
    x = np.arange(len(d))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(d) + 2.5), 4.4))
    fg._bars(ax, x - 0.2, d["oracle_utility"], width=0.4, color=COLORS["oracle"], label="Oracle")
    fg._bars(ax, x + 0.2, d["bc_utility"], width=0.4, color=COLORS["BC"], label="BC")
    for i, (b, o, pct) in enumerate(zip(d["bc_utility"], d["oracle_utility"], d["bc_over_oracle_pct"])):
        if pd.notna(pct):
            top = max(v for v in (b, o) if pd.notna(v))
            ax.text(i, top + 1, f"{pct:.0f}%", ha="center", va="bottom", fontsize=8,
                    color="#b00000" if pct < 100 else "#333333")
    ax.set_xticks(x, d["target"].astype(str), rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("utility (%)")
    ax.set_title(stat.title + "\nlabels: BC as % of oracle (red: below the oracle = lock-in)", fontsize=10)
    ax.legend()
    return fg._save(fig, path)


def redundancy_per_turn(stat: Stat, path: Path) -> Path:
    """Figure 20: mean redundancy at each model turn, BC vs NC."""
    d = fg.drawable(stat, ["BC", "NC"],
                    "no turn has a BC or NC redundancy value").sort_values("turn_index")
    lo, hi = int(d["turn_index"].min()), int(d["turn_index"].max())
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for cond in ("BC", "NC"):
        g = fg._series(d.groupby("turn_index")[cond].mean(), lo, hi) if cond in d else None
        if g is not None and g.notna().any():  # a turn without a value is a gap
            ax.plot(g.index, g.values, marker="o", color=COLORS[cond], label=cond)
    ax.set_xlabel("model turn")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("redundancy (%)")
    ax.set_title(stat.title + ", BC vs NC")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return fg._save(fig, path)
