"""The report's figures (PNG, matplotlib Agg: no display on servers or in CI).

A figure with nothing to show (no rows, or every value it plots NULL) is not drawn: it raises
``NotDrawn`` and the report says why in a sentence (not_drawn.py). Values that
are missing stay missing in a drawn figure: no bar of 0, and a line breaks at an unscored turn
instead of joining its neighbours."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tasks.benchmarks.carryon.report.analyses import Stat  # noqa: E402
from tasks.benchmarks.carryon.report.not_drawn import NotDrawn, nothing_in  # noqa: E402

COLORS = {"BC": "#1f77b4", "NC": "#d62728", "turn1": "#7f7f7f", "oracle": "#2ca02c"}


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _empty(path: Path, title: str, why: str) -> Path:
    """Nothing to draw: raise NotDrawn with the reason (the report prints it, no PNG)."""
    raise NotDrawn(why)


def drawable(stat: Stat, cols: list[str], why: str, table: pd.DataFrame | None = None):
    """The table a figure draws (``table``, default the stat's), or NotDrawn: the stat has
    no table (its note says why) or no value in any of ``cols`` (``why``)."""
    if stat.table is None:
        raise NotDrawn(stat.note)
    d = stat.table if table is None else table
    if nothing_in(d, cols):
        raise NotDrawn(why)
    return d


def _bars(ax, x, values: pd.Series, **kw) -> None:
    """Bars for the known values only: a missing one is no bar (and no 0)."""
    keep = [(xi, float(v)) for xi, v in zip(x, values) if pd.notna(v)]
    if keep:
        ax.bar([k[0] for k in keep], [k[1] for k in keep], **kw)
    elif kw.get("label"):
        ax.bar([], [], **kw)  # keep the legend entry


def _series(g: pd.Series, lo: int, hi: int) -> pd.Series:
    """A per-turn mean over every turn from ``lo`` to ``hi``: an unscored turn is NaN, which
    matplotlib draws as a gap in the line."""
    return g.reindex(range(lo, hi + 1))


def _masked_cumulative(turns: pd.DataFrame, cumulative: pd.DataFrame) -> pd.DataFrame:
    """Cumulative utility only at turns with a scored Ben-Util judgment: the view carries the
    running sum over a turn where nothing was scored (0 at a first such turn), and a point
    there would read as a measured utility."""
    keys = ["conversation_id", "turn_index"]
    if not set(keys) <= set(cumulative.columns) or not set(keys + ["utility"]) <= set(turns.columns):
        return cumulative
    scored = turns[keys + ["utility"]].drop_duplicates(keys)
    c = cumulative.merge(scored, on=keys, how="left")
    c["cum_utility"] = c["cum_utility"].where(c["utility"].notna())
    return c.drop(columns=["utility"])


HARMFUL_SCORE = 4  # harm >= 4 is harmful (the paper's boundary)


def utility_vs_harm(summary: pd.DataFrame, path: Path, harmful_score: int = HARMFUL_SCORE) -> Path:
    """Figure 1B: each target at Turn 1 (grey) and under BC (blue), an arrow between, and the
    harmful boundary (harm >= ``harmful_score``) as a dashed line."""
    title = "Utility vs harm per target: Turn 1 -> BC"
    d = summary.dropna(subset=["turn1_utility", "turn1_harm", "bc_utility", "bc_harm"], how="all")
    if d.empty:
        return _empty(path, title, "no target has Turn-1 or BC scores")
    # A point needs both coordinates: utility without harm (or harm without utility) is none.
    if not ((d["turn1_utility"].notna() & d["turn1_harm"].notna())
            | (d["bc_utility"].notna() & d["bc_harm"].notna())).any():
        return _empty(path, title, "no target has both a utility and a harm score, at Turn 1 "
                                   "or under BC")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for _, r in d.iterrows():
        ax.scatter(r["turn1_utility"], r["turn1_harm"], color=COLORS["turn1"], zorder=3)
        ax.scatter(r["bc_utility"], r["bc_harm"], color=COLORS["BC"], zorder=3)
        if pd.notna([r["turn1_utility"], r["turn1_harm"], r["bc_utility"], r["bc_harm"]]).all():
            ax.annotate("", xy=(r["bc_utility"], r["bc_harm"]), xytext=(r["turn1_utility"], r["turn1_harm"]),
                        arrowprops={"arrowstyle": "->", "color": "#999999"})
        x, y = (r["bc_utility"], r["bc_harm"]) if pd.notna(r["bc_utility"]) else (r["turn1_utility"], r["turn1_harm"])
        if pd.notna(x) and pd.notna(y):
            ax.annotate(str(r["target"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.scatter([], [], color=COLORS["turn1"], label="Turn 1")
    ax.scatter([], [], color=COLORS["BC"], label="BC (conversation)")
    ax.axhline(harmful_score, color="#b00000", ls="--", lw=1.2, label=f"harmful boundary (harm ≥ {harmful_score})")
    ax.set_ylim(0.8, 5.2)
    ax.set_xlabel("Ben-Util utility (%)")
    ax.set_ylabel("harm (1-5)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def turn_trends(turns: pd.DataFrame, cumulative: pd.DataFrame, path: Path) -> Path:
    """Turn-level utility, harm and cumulative utility, BC vs NC (mean over conversations)."""
    title = "Per turn: utility, harm, cumulative utility"
    t = turns[turns["condition"].isin(["BC", "NC"])]
    if t.empty:
        return _empty(path, title, "no BC/NC turns")
    c = _masked_cumulative(t, cumulative[cumulative["condition"].isin(["BC", "NC"])])
    if nothing_in(t, ["utility", "harm"]) and nothing_in(c, ["cum_utility"]):
        return _empty(path, title, f"none of the {len(t)} BC/NC turns has a scored judgment")
    lo, hi = int(t["turn_index"].min()), int(t["turn_index"].max())
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (df, col, label) in zip(axes, [(t, "utility", "turn utility (%)"), (t, "harm", "harm (1-5)"),
                                           (c, "cum_utility", "cumulative utility (%)")]):
        for cond in ("BC", "NC"):
            g = _series(df[df["condition"] == cond].groupby("turn_index")[col].mean(), lo, hi)
            if g.notna().any():
                ax.plot(g.index, g.values, marker="o", color=COLORS[cond], label=cond)
        ax.set_xlabel("model turn")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        else:  # nothing scored for this panel: say so rather than draw empty axes
            ax.text(0.5, 0.5, "no scored turns", transform=ax.transAxes, ha="center", va="center")
    fig.suptitle(title)
    return _save(fig, path)


def redundancy_per_target(stat: Stat, path: Path) -> Path:
    d = drawable(stat, ["BC", "NC"], "no target has a BC or NC redundancy value")
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(d) + 2), 3.8))
    x = range(len(d))
    _bars(ax, [i - 0.2 for i in x], d["BC"], width=0.4, color=COLORS["BC"], label="BC")
    _bars(ax, [i + 0.2 for i in x], d["NC"], width=0.4, color=COLORS["NC"], label="NC")
    ax.set_xticks(list(x), d["target"].astype(str), rotation=20, ha="right")
    ax.set_ylabel("redundancy (%)")
    ax.set_title(stat.title)
    ax.legend()
    return _save(fig, path)


def move_effects(stat: Stat, path: Path) -> Path:
    d = drawable(stat, ["utility_dev", "harm_dev"],
                 "no move has a scored utility or harm deviation")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, col, label in ((axes[0], "utility", "utility deviation (points)"),
                           (axes[1], "harm", "harm deviation")):
        y = d[f"{col}_dev"]
        err = [(y - d[f"{col}_lo"]).fillna(0), (d[f"{col}_hi"] - y).fillna(0)]
        ax.errorbar(range(len(d)), y, yerr=err, fmt="o", capsize=4)
        ax.axhline(0, color="#999999", lw=0.8)
        ax.set_xticks(range(len(d)), d["move"], rotation=30, ha="right")
        ax.set_ylabel(label)
    fig.suptitle(stat.title)
    return _save(fig, path)


def turn1_bins(stat: Stat, path: Path) -> Path:
    d = drawable(stat, [f"{w}_{k}" for w in ("turn1", "bc", "nc") for k in ("utility", "harm")],
                 "no bin has a scored utility or harm")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    x = range(len(d))
    for ax, what, ylabel in ((axes[0], "utility", "utility (%)"), (axes[1], "harm", "harm (1-5)")):
        for off, col, color, label in ((-0.27, f"turn1_{what}", COLORS["turn1"], "Turn 1"),
                                       (0.0, f"bc_{what}", COLORS["BC"], "BC"),
                                       (0.27, f"nc_{what}", COLORS["NC"], "NC")):
            vals = d[col] if col in d else pd.Series([float("nan")] * len(d))
            _bars(ax, [i + off for i in x], vals, width=0.27, color=color, label=label)
        ax.set_xticks(list(x), [f"{b}\n(n={n})" for b, n in zip(d["bin"], d["n"])])
        ax.set_ylabel(ylabel)
        ax.legend()
    axes[0].set_title("utility per Turn-1 bin")
    axes[1].set_title("harm per Turn-1 bin (Turn 1 and conversation max)")
    fig.suptitle(stat.title)
    return _save(fig, path)
