"""CarryOnBench's report, a layout section (tasks/report/assemble.py): report.md and
report.html with Table 2, the paper's figures and analyses and the conversation browser
(writer.py), over the views beside its spec.

The paper report's modules, all in this folder: data.py reads the warehouse; analyses.py,
paper_analyses.py, failure_modes.py, table2_ci.py compute (stat.py: what each returns);
paper_compare.py and paper_data.py put them beside the paper's numbers (../paper.yaml);
figures.py, figures_paper.py draw (not_drawn.py: a figure with nothing to show);
construction.py, fidelity.py, judging.py, cost.py are the checklist, move-checker, judging
and cost sections (``load(wh)`` into ``ReportData.extra``, ``stats(extra)``), benutil_mode.py
the sets in use with their mode and calibration; calibration.py gives ``carryon calibrate``
Table 2 under two settings of a judge;
figure_cache.py, stats_cache.py keep a rerun from drawing and computing again; writer.py
assembles, markdown.py and html.py render. The page shell and its escaping are the shared
tasks/report/page_base.py's."""

from __future__ import annotations

import math

from tasks.core.registry import section
from tasks.report.assemble import Written


BENCHMARK = "carryon"  # the built-in spec's name: its views are made for rows of that name


def _clean(v):
    # Prefect stores artifacts as JSON: NaN is not JSON, and None says "no value" plainly.
    return None if isinstance(v, float) and math.isnan(v) else v


def summary_rows(wh) -> list[dict]:
    """model_summary rows (for console printing and the Prefect table artifact), each with the
    share of its judgments that were scored beside the numbers resting on them: a utility
    computed from a few scored judgments must not read like one computed from all. Here, not
    in writer.py: printing them after a run must not import the report's libraries (pandas,
    statistics: most of a second of an unchanged rerun)."""
    # Two reads, not one join: target_coverage computes model_summary's chain again, and
    # the join held both chains at once (36 MB more than the larger read alone, at 6,400
    # conversations).
    cov = {r["target"]: r for r in wh.query(
        "SELECT target, round(scored_pct, 1) AS benutil_scored_pct, "
        "round(safety_scored_pct, 1) AS safety_scored_pct FROM target_coverage")}
    return [{**r, **{k: (cov.get(r["target"]) or {}).get(k)
                     for k in ("benutil_scored_pct", "safety_scored_pct")}}
            for r in wh.query("SELECT * FROM model_summary ORDER BY target")]


def console(wh, rows: list[dict] | None = None) -> tuple[str, list[dict]]:
    """The model summary ``carryon run`` prints after the report: ``rows``, the ones the
    report read when it was written (its stage's summary), or read now."""
    return ("model summary (utilities in %, harm 1-5; *_scored_pct: the share of judgments "
            "scored, the rest unscored and left out)", summary_rows(wh) if rows is None else rows)


def calibration_cells(*args, **kwargs) -> list[dict]:
    """Table 2 of the sampled conversations under two settings of a judge, with each cell's
    shift and interval (``carryon calibrate``; calibration.py)."""
    from tasks.benchmarks.carryon.report.calibration import cell_shifts

    return cell_shifts(*args, **kwargs)


def check(spec) -> None:
    """The paper layout reads CarryOnBench's three conditions (through its views) and a
    Ben-Util and a safety set (other judges may run beside them): a spec without them is
    one line at load."""
    from tasks.benchmarks.carryon.conditions import carryon_conditions

    carryon_conditions(spec)  # exactly BC, NC and oracle, else one line naming them
    if spec.views is None and spec.name != BENCHMARK:
        # Its tables read the metric views (model_summary, conversation_scores, ...) the
        # spec's views.sql makes for the spec's own rows (the built-in spec's for a spec
        # named like it): without them it would read another benchmark's rows, and say "no
        # judgment sets" over stored verdicts.
        raise ValueError("report: paper reads CarryOnBench's metric views of the spec's own "
                         "rows, and this spec brings none (views: {file: views.sql, prefix: "
                         "carryon}, with CarryOnBench's views.sql beside the spec)")
    kinds = [j.kind for _, j in spec.judge_objects()]
    if "benutil" not in kinds or "safety" not in kinds:
        raise ValueError(f"judges: CarryOnBench's views and report read Ben-Util and safety "
                         f"verdicts: the spec needs benutil and safety; got {spec.judges}")


# writes: the table it refreshes with every report (Table 2's intervals, for SQL): an output
# of the report, never one of its inputs (tasks/engine/stage_memo.py).
@section("paper", title="CarryOnBench report", layout=True, compare=("paper",), console=console,
         check=check, calibration=calibration_cells, writes=("table2_ci",))
def paper(cfg, wh, run_id, compare=None) -> Written:
    # pandas, scipy, matplotlib: loaded now
    from tasks.benchmarks.carryon.report.writer import build

    # First, while the report holds nothing: this read computes the whole chain of metric
    # views again (~150 MB of DuckDB memory at 6,400 conversations), and after the report it
    # would add to the report's frames and the process's peak.
    console_rows = summary_rows(wh)
    rep, browser = build(cfg, run_id, warehouse=wh)
    table = [{k: _clean(v) for k, v in r.items()} for r in rep.data.summary.to_dict("records")]
    notes = []
    if compare == "paper":
        from tasks.benchmarks.carryon.report.markdown import paper_section

        notes = paper_section(rep.stats)
    return Written(rep.folder, rep.markdown, table=table, console=console_rows,
                   summary={"targets": len(table), "conversations": len(rep.data.conv),
                            "browser_conversations": len(browser["conversations"])},
                   notes=notes)
