"""write_report: views -> analyses -> figures -> report.md + report.html, in one folder.

The report is written to a temporary folder beside the target and renamed into place, so a
failure leaves the previous report (or nothing), never half a report."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tasks.config import Config
from tasks.report import analyses as an
from tasks.report import figures as fg
from tasks.report import html as html_mod
from tasks.report import markdown as md_mod
from tasks.report.data import ReportData, ReportError, browser_data, load
from warehouse import Warehouse


@dataclass
class Report:
    data: ReportData
    stats: list[an.Stat] = field(default_factory=list)
    figures: list[tuple[str, Path]] = field(default_factory=list)
    markdown: str = ""
    folder: Path | None = None  # where it was written


def build_stats(data: ReportData, rules: an.FailureRules) -> list[an.Stat]:
    red_turn, red_target = an.redundancy(data.turns)
    return [
        an.move_effects(data.turns),
        an.turn1_bins(data.conv),
        red_turn,
        red_target,
        *an.mixed_models(data.conv),
        an.spearman(data.summary),
        an.per_category(data.conv),
        an.failure_flags(data.summary, data.conv, data.turns, rules),
    ]


def _figures(data: ReportData, stats: list[an.Stat], folder: Path) -> list[tuple[str, Path]]:
    by_title = {s.title: s for s in stats}
    red_target = by_title["Redundancy per target (%)"]
    moves = stats[0]
    bins = stats[1]
    return [
        ("Utility vs harm per target, Turn 1 and BC", fg.utility_vs_harm(data.summary, folder / "utility_vs_harm.png")),
        ("Turn-level utility, harm and cumulative utility, BC vs NC",
         fg.turn_trends(data.turns, data.cumulative, folder / "turn_trends.png")),
        ("Redundancy per target", fg.redundancy_per_target(red_target, folder / "redundancy_per_target.png")),
        ("Move effects", fg.move_effects(moves, folder / "move_effects.png")),
        ("Turn-1 bins", fg.turn1_bins(bins, folder / "turn1_bins.png")),
    ]


def write_report(cfg: Config, run_id: str | None = None, *, warehouse: Warehouse | None = None,
                 rules: an.FailureRules | None = None, max_conversations: int = 3000) -> Path:
    """Write ``<home>/reports/<run id>/`` (report.md, report.html, PNGs); return the folder.

    ``run_id`` None = the latest run in the warehouse. Raises ReportError for a missing
    warehouse or run, or an invalid judgment-set choice."""
    rep, _ = build(cfg, run_id, warehouse=warehouse, rules=rules, max_conversations=max_conversations)
    return rep.folder


def build(cfg: Config, run_id: str | None = None, *, warehouse: Warehouse | None = None,
          rules: an.FailureRules | None = None, max_conversations: int = 3000) -> tuple[Report, dict]:
    """write_report's work; also returns the Report (stats, markdown) and the browser data."""
    wh = warehouse or _open(cfg)
    data = load(wh, run_id)
    rep = Report(data=data, stats=build_stats(data, rules or an.FailureRules()))
    reports = cfg.home_path / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    final = reports / str(data.run["run_id"])
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=reports))
    try:
        rep.figures = _figures(data, rep.stats, tmp)
        rep.markdown = md_mod.render(rep)
        (tmp / "report.md").write_text(rep.markdown, encoding="utf-8")
        browser = browser_data(wh, max_conversations)
        (tmp / "report.html").write_text(html_mod.render(rep, browser), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rep.figures = [(t, final / p.name) for t, p in rep.figures]
    rep.folder = final
    return rep, browser


def _open(cfg: Config) -> Warehouse:
    path = cfg.home_path / "warehouse.duckdb"
    if not path.exists():
        raise ReportError(f"{path}: no warehouse yet (run `carryon run` first)")
    return Warehouse(path).init()  # (re)creates the views, so an old file gets today's metrics


def summary_rows(wh: Warehouse) -> list[dict]:
    """model_summary rows (for console printing and the Prefect table artifact)."""
    return wh.query("SELECT * FROM model_summary")
