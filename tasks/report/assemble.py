"""The one entry to every benchmark's report: ``write(cfg, wh, run_id)`` -> ``Written``.

A spec's ``report:`` lists registered sections (tasks/core/registry.py ``@section``). Plain
sections (``fn(wh, spec) -> Markdown``) are assembled under the common head of run, models,
conditions and episode coverage (tasks/report/episodes.py). A *layout* section (registered
with ``layout=True``, beside its benchmark's spec: CarryOnBench's paper report) writes the
whole folder itself, its tables, figures and HTML, and is then the spec's only section.

The report stage (flows/report.py) and ``carryon report`` (flows/cli/results.py) both call
this; neither knows which benchmark it writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tasks.core import registry
from tasks.report.errors import ReportError


@dataclass
class Written:
    folder: Path
    markdown: str
    # Headline rows: the Prefect table artifact (``table``) and the CLI's printed table
    # (``console``); None where the report has none.
    table: list[dict] | None = None
    console: list[dict] | None = None
    summary: dict = field(default_factory=dict)  # extra counts for the stage's summary
    notes: list[str] = field(default_factory=list)  # lines the CLI prints after the table


def layout(spec):
    """The spec's layout section (a component), or None: its report is assembled."""
    for name in spec.report:
        if registry.lookup("section", name).meta.get("layout"):
            return spec.component("section", name)
    return None


def check(spec) -> None:
    """A layout section writes the whole report, so it stands alone (ValueError otherwise)."""
    layouts = [n for n in spec.report if registry.lookup("section", n).meta.get("layout")]
    if layouts and len(spec.report) > 1:
        raise ValueError(f"report: {layouts[0]} writes the whole report; it is the only section")


def compares(spec) -> tuple[str, ...]:
    """What ``carryon report --compare`` can put beside this benchmark's numbers."""
    for name in spec.report:
        comp = registry.lookup("section", name)
        if comp.meta.get("layout"):
            return tuple(comp.meta.get("compare", ()))
    return ()


def written_tables(spec) -> tuple[str, ...]:
    """The warehouse tables the spec's report sections refresh whenever they run (a section
    registered with ``writes=``): the report's outputs, not what it reads."""
    return tuple(t for name in spec.report
                 for t in registry.lookup("section", name).meta.get("writes", ()))


CONSOLE_KEY = "console"  # the report stage summary's headline rows (Written.console)


def console(spec):
    """The headline table ``carryon run`` prints after the report: ``fn(wh, rows=None) ->
    (title, rows)`` of a section registered with ``console=`` (CarryOnBench's model summary),
    or None. ``rows``: the report's own (``Written.console``, carried in the report stage's
    summary), so printing them reads no view again."""
    for name in spec.report:
        fn = registry.lookup("section", name).meta.get("console")
        if fn is not None:
            return fn
    return None


def open_warehouse(cfg):
    from warehouse import Warehouse

    path = cfg.home_path / "warehouse.duckdb"
    if not path.exists():
        raise ReportError(f"{path}: no warehouse yet (run `carryon run` first)")
    return Warehouse(path).init()  # (re)creates the views, so an old file gets today's metrics


def find_run(wh, cfg) -> str:
    """The run a report of ``cfg`` is about when none is named: the latest run of this very
    config (its hash), else the latest of the same benchmark; never another benchmark's
    (configs of several benchmarks may share a home)."""
    rows = wh.query("SELECT run_id, config_hash, config_json FROM runs ORDER BY started DESC")
    if not rows:
        raise ReportError(f"{wh.path}: runs: the warehouse has no run yet (run `carryon run` first)")
    mine = cfg.config_hash()
    for r in rows:
        if r["config_hash"] == mine:
            return r["run_id"]
    for r in rows:
        if _benchmark_of(r) == cfg.benchmark:
            return r["run_id"]
    others = sorted({b for r in rows if (b := _benchmark_of(r))})
    raise ReportError(f"{wh.path}: runs: no run of benchmark {cfg.benchmark} yet (this home "
                      f"holds runs of {', '.join(others) or 'unknown benchmarks'}); run "
                      f"`carryon run --config {cfg.source_path or '...'}` first")


def _benchmark_of(run: dict) -> str | None:
    try:
        doc = json.loads(run["config_json"] or "{}")
    except (TypeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    from tasks.bench import default_benchmark  # a config that names none

    return doc.get("benchmark") or default_benchmark()


def write(cfg, wh=None, run_id: str | None = None, compare: str | None = None) -> Written:
    """Write ``<home>/reports/<run id>/`` for the given run, or this config's latest
    (``find_run``). ReportError for a missing warehouse or run."""
    wh = wh or open_warehouse(cfg)
    if compare is not None and compare not in compares(cfg.spec):
        raise ReportError(f"--compare: {compare!r} is not a comparison of {cfg.spec.name}'s "
                          f"report (it has: {', '.join(compares(cfg.spec)) or 'none'})")
    lay = layout(cfg.spec)
    # On one DuckDB thread: the report's view reads grow with the run's judgments, and each
    # DuckDB thread holds its own share of them (Warehouse.one_thread).
    with wh.one_thread():
        if lay is not None:
            return lay(cfg, wh, run_id, compare)
        from tasks.report.episodes import write as write_sections

        folder, markdown = write_sections(cfg, wh, run_id or find_run(wh, cfg))
        return Written(folder, markdown)
