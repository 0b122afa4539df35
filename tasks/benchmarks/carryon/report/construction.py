"""Checklist construction in the report: sizes and categories of the checklists (the paper's
Figure 15), the queries the checklist stage dropped (with the step and reason), and why
ensemble answers were not used.

Three functions, wired by the report: ``load(wh)`` reads the warehouse into plain data (the
caller keeps it as ``ReportData.extra["construction"]``), ``stats(extra)`` turns it into
``Stat`` tables, ``figure(extra, path)`` draws the sizes and categories. Only queries with a
current checklist (the latest ``created`` per query) are simulated, judged and measured, so
the sizes here are those of the measured population.

A warehouse written before the item categories were cut to the paper's seven may hold items
tagged "Safety Consideration" or "Ethical Consideration": they are counted under their stored
name and flagged as retired, never dropped or renamed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tasks.stages.checklists.models import ITEM_CATEGORIES, RETIRED_CATEGORIES
from tasks.benchmarks.carryon.report.analyses import Stat

PAPER_RANGE = (7, 23)  # the paper's checklists hold 7 to 23 items, 18 on average
PAPER_MEAN = 18
# Histogram bins of items per query: (label, lowest, highest); the paper's range is 7..23.
SIZE_BINS = (("1-6", 1, 6), ("7-10", 7, 10), ("11-14", 11, 14), ("15-18", 15, 18),
             ("19-23", 19, 23), ("24+", 24, None))
STEP_ORDER = ("intent", "ensemble", "guard", "decompose", "merge", "misuse")


def dropped_queries(wh) -> list[dict]:
    """The queries left without a checklist, in step order: query_id, the query's category,
    the step and the reason: those whose intent the intents stage could not write (step
    ``intent``, from ``intents``), and those the checklists stage dropped (from
    ``checklist_queries``, written by the latest run that processed each query; a home
    written before the intents stage was its own has its intent drops there too). These
    queries are not simulated, judged or measured."""
    rows = wh.query(
        "WITH cq AS (SELECT query_id, step, reason FROM checklist_queries cq WHERE NOT kept "
        "  AND NOT EXISTS (SELECT 1 FROM checklists c WHERE c.query_id = cq.query_id)), "
        "intent AS (SELECT query_id, 'intent' AS step, 'no benign intent: ' || error AS reason "
        "  FROM intents WHERE intent IS NULL "
        "  AND NOT EXISTS (SELECT 1 FROM checklists c WHERE c.query_id = intents.query_id)) "
        "SELECT d.query_id, q.category, d.step, d.reason FROM ("
        "  SELECT * FROM intent UNION ALL "
        "  SELECT * FROM cq WHERE query_id NOT IN (SELECT query_id FROM intent)) d "
        "LEFT JOIN queries q USING (query_id) ORDER BY d.query_id")
    order = {s: i for i, s in enumerate(STEP_ORDER)}
    return sorted(rows, key=lambda r: (order.get(r["step"], len(order)), r["query_id"]))


def load(wh) -> dict:
    """Everything the construction tables and figure need, as plain lists of dicts.

    per_query: the current checklist of each query (query_id, n_items, capped_from);
    categories: items per (query_id, category) of those checklists;
    dropped: ``dropped_queries(wh)``;
    answers: ensemble answers not used, by reason (harmful response, refusal, both, no verdict,
    truncated, failed call)."""
    per_query = wh.query(
        "WITH cur AS (SELECT query_id, checklist_version, n_items FROM checklists "
        "  QUALIFY row_number() OVER (PARTITION BY query_id ORDER BY created DESC) = 1) "
        "SELECT cur.query_id, cur.checklist_version, cur.n_items, cq.capped_from "
        "FROM cur LEFT JOIN checklist_queries cq USING (query_id) ORDER BY cur.query_id")
    categories = wh.query(
        "WITH cur AS (SELECT query_id, checklist_version FROM checklists "
        "  QUALIFY row_number() OVER (PARTITION BY query_id ORDER BY created DESC) = 1) "
        "SELECT i.query_id, i.category, count(*) AS n FROM checklist_items i "
        "JOIN cur USING (query_id, checklist_version) GROUP BY ALL ORDER BY ALL")
    answers = wh.query(
        "SELECT CASE WHEN error LIKE 'truncated%' THEN 'truncated' ELSE 'failed call' END AS reason, "
        "count(*) AS n FROM ensemble_answers WHERE error IS NOT NULL GROUP BY ALL "
        "UNION ALL "
        "SELECT CASE WHEN reason IN ('harmful response', 'refusal', 'harmful response; refusal') "
        "THEN reason ELSE 'no verdict' END AS reason, count(*) AS n FROM guard_verdicts "
        "WHERE NOT kept GROUP BY ALL ORDER BY reason")
    kept = wh.query("SELECT count(*) AS n FROM guard_verdicts WHERE kept")[0]["n"]
    return {"per_query": [{k: r[k] for k in ("query_id", "n_items", "capped_from")} for r in per_query],
            "categories": categories, "dropped": dropped_queries(wh), "answers": answers,
            "answers_kept": kept}


# ----- tables ------------------------------------------------------------------------------------
def _sizes(extra: dict) -> pd.Series:
    return pd.Series([r["n_items"] for r in extra.get("per_query") or []], dtype="float64")


def size_histogram(sizes) -> list[dict]:
    """Queries per size bin (SIZE_BINS), every bin listed."""
    s = list(sizes)
    return [{"items": label, "queries": sum(1 for n in s if n >= lo and (hi is None or n <= hi))}
            for label, lo, hi in SIZE_BINS]


def _category_table(extra: dict) -> pd.DataFrame:
    n_lists = len(extra.get("per_query") or [])
    rows = pd.DataFrame(extra.get("categories") or [], columns=["query_id", "category", "n"])
    known = list(ITEM_CATEGORIES)
    others = sorted(set(rows["category"]) - set(known))
    out = []
    for cat in known + others:
        g = rows[rows["category"] == cat]
        items = int(g["n"].sum())
        out.append({"category": cat + (" (retired)" if cat in RETIRED_CATEGORIES else
                                       "" if cat in ITEM_CATEGORIES else " (unknown)"),
                    "items": items,
                    "share_of_items_pct": round(100 * items / max(int(rows["n"].sum()), 1), 1),
                    "mean_per_checklist": round(items / n_lists, 2) if n_lists else float("nan"),
                    "checklists_with": int(g["query_id"].nunique())})
    return pd.DataFrame(out)


def stats(extra: dict) -> list[Stat]:
    """Checklist sizes (distribution and histogram), items per category, dropped queries and
    the ensemble answers not used."""
    out = []
    sizes = _sizes(extra)
    lo, hi = PAPER_RANGE
    if sizes.empty:
        out.append(Stat("Checklist items per query", None,
                        "Not computed: no query has a checklist.", key="checklist_sizes"))
        out.append(Stat("Checklist sizes (histogram)", None,
                        "Not computed: no query has a checklist.", key="checklist_size_histogram"))
        out.append(Stat("Checklist items per category", None,
                        "Not computed: no query has a checklist.", key="checklist_categories"))
    else:
        capped = sum(1 for r in extra["per_query"] if r.get("capped_from"))
        table = pd.DataFrame([{
            "checklists": len(sizes), "min": int(sizes.min()), "mean": round(float(sizes.mean()), 2),
            "median": float(sizes.median()), "max": int(sizes.max()),
            f"in_{lo}_{hi}_pct": round(100 * float(((sizes >= lo) & (sizes <= hi)).mean()), 1),
            "capped": capped}])
        out.append(Stat("Checklist items per query", table,
                        f"The paper's checklists hold {lo} to {hi} items, {PAPER_MEAN} on average. "
                        "'capped': checklists whose merged list was cut to the configured maximum "
                        "(checklists.max_items), keeping the merger's most important items first.",
                        extra={"histogram": size_histogram(sizes)}, key="checklist_sizes"))
        out.append(Stat("Checklist sizes (histogram)", pd.DataFrame(size_histogram(sizes)),
                        "Queries per number of checklist items.", key="checklist_size_histogram"))
        cats = _category_table(extra)
        retired = [c for c in RETIRED_CATEGORIES
                   if any(r["category"] == c for r in extra.get("categories") or [])]
        note = "Mean per checklist counts 0 for a checklist without the category."
        if retired:
            note += (" Retired categories (" + ", ".join(retired) + ") come from checklists built "
                     "before items were limited to information serving the benign intent; "
                     "rebuild them to compare with the paper.")
        out.append(Stat("Checklist items per category", cats, note, key="checklist_categories"))

    dropped = extra.get("dropped") or []
    if dropped:
        by_step = pd.DataFrame(dropped).groupby("step", sort=False).size()
        note = ("Not simulated, judged or measured. By step: "
                + ", ".join(f"{s} {int(n)}" for s, n in by_step.items()) + ".")
        out.append(Stat("Queries without a checklist", pd.DataFrame(
            dropped, columns=["query_id", "category", "step", "reason"]), note, key="dropped_queries"))
    else:
        out.append(Stat("Queries without a checklist", None,
                        "None: every processed query has a checklist.", key="dropped_queries"))

    answers = extra.get("answers") or []
    if answers:
        t = pd.DataFrame(answers).groupby("reason", as_index=False)["n"].sum().rename(columns={"n": "answers"})
        out.append(Stat("Ensemble answers not used", t,
                        f"{extra.get('answers_kept', 0)} answers were kept. A refusal is no "
                        "gold-standard answer: it is dropped like a harmful one. 'truncated': "
                        "cut off at max_tokens.", key="ensemble_answers_dropped"))
    else:
        out.append(Stat("Ensemble answers not used", None, "None.", key="ensemble_answers_dropped"))
    return out


# ----- the figure ----------------------------------------------------------------------------------
def figure(extra: dict, path: Path) -> Path:
    """Figure 15: the distribution of checklist sizes (items per query, the paper's 7-23 range
    shaded, the mean dashed) and the mean items per checklist of each category."""
    from tasks.benchmarks.carryon.report.figures import _empty, _save, plt

    title = "Checklist sizes and categories"
    sizes = _sizes(extra)
    if sizes.empty:
        return _empty(Path(path), title, "no query has a checklist")
    cats = _category_table(extra)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    counts = sizes.astype(int).value_counts().sort_index()
    a1.axvspan(PAPER_RANGE[0] - 0.5, PAPER_RANGE[1] + 0.5, color="#2ca02c", alpha=0.12,
               label=f"paper's range ({PAPER_RANGE[0]}-{PAPER_RANGE[1]})")
    a1.bar(counts.index, counts.values, width=0.8, color="#1f77b4", label="checklists")
    a1.axvline(float(sizes.mean()), color="#d62728", ls="--", lw=1.2,
               label=f"mean {sizes.mean():.1f} (paper {PAPER_MEAN})")
    a1.set_xlabel("items per checklist")
    a1.set_ylabel("checklists (queries)")
    a1.set_title(f"Items per checklist ({len(sizes)} checklists)")
    from matplotlib.ticker import MaxNLocator

    a1.xaxis.set_major_locator(MaxNLocator(integer=True))
    a1.yaxis.set_major_locator(MaxNLocator(integer=True))
    a1.legend(fontsize=8)
    c = cats.iloc[::-1]
    a2.barh(c["category"], c["mean_per_checklist"], color="#9467bd")
    for y, (v, n) in enumerate(zip(c["mean_per_checklist"], c["items"])):
        a2.text(v, y, f" {v:.1f} ({n})", va="center", fontsize=8)
    a2.set_xlabel("mean items per checklist (total items)")
    a2.set_title("Items per category")
    a2.set_xlim(0, max(float(c["mean_per_checklist"].max()) * 1.3, 1.0))
    fig.suptitle(title)
    return _save(fig, Path(path))
