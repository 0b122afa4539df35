"""``carryon sql`` (SQL on the warehouse) and ``carryon report`` (the run's report folder)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from flows.cli.common import ConfigOpt, _fail, _home
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config


def sql(query: str = typer.Argument(..., help="SQL to run on the warehouse (DuckDB dialect)."),
        config: Optional[str] = typer.Option(None, "--config", "-c"),
        json_out: bool = typer.Option(False, "--json", help="One JSON object per row."),
        write: bool = typer.Option(False, "--write", help=(
            "Allow statements that change the warehouse or touch other files (read-only "
            "by default)."))):
    """Run SQL on the warehouse (read-only unless --write) and print a table."""
    import duckdb

    from warehouse import Warehouse, WarehouseError

    try:
        path = _home(config) / "warehouse.duckdb"
    except ConfigError as e:
        _fail(str(e))
    if not path.exists():
        _fail(f"{path}: no warehouse yet (run `carryon run` first)")
    try:
        rows = Warehouse(path).user_query(query, write=write)
    except WarehouseError as e:
        _fail(str(e))
    except duckdb.Error as e:
        line = str(e).splitlines()[0]
        if not write and ("read-only" in line or "disabled by configuration" in line):
            line += " (carryon sql is read-only; --write allows changes)"
        _fail(f"SQL error: {line}")
    if json_out:
        for r in rows:
            typer.echo(json.dumps(r, default=str))
    else:
        _print_table(rows)


def report(config: str = ConfigOpt,
           run_id: Optional[str] = typer.Option(None, help="Default: the latest run."),
           compare: Optional[str] = typer.Option(
               None, "--compare", help="paper: also print the run's numbers beside the paper's "
                                       "(the report's \"Beside the paper\" section).")):
    """Write <home>/reports/<run id>/ with report.md, report.html and the figures."""
    from tasks.report import ReportError, build, write_report

    from tasks.report import summary_rows
    from warehouse import Warehouse

    if compare is not None and compare != "paper":
        _fail(f"--compare: {compare!r} is not a comparison (the one there is: paper)")
    try:
        cfg = load_config(config)
        if cfg.spec.engine == "episodes":
            if compare:
                _fail(f"--compare paper: the paper's numbers are CarryOnBench's, not {cfg.spec.name}'s")
            from flows.cli.episodes import episode_report

            typer.echo(f"report: {episode_report(cfg, run_id)}")
            return
        rep = build(cfg, run_id)[0] if compare else None
        out = rep.folder if rep else write_report(cfg, run_id)
    except (ConfigError, ReportError) as e:
        _fail(str(e))
    _print_table(summary_rows(Warehouse(cfg.home_path / "warehouse.duckdb")))
    if rep:
        from tasks.report.markdown import paper_section

        typer.echo("\n" + "\n".join(paper_section(rep.stats)))
    typer.echo(f"report: {out}")
