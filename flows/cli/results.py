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
        json_out: bool = typer.Option(False, "--json", help="One JSON object per row.")):
    """Run SQL on the warehouse and print a table."""
    import duckdb

    from warehouse import Warehouse

    try:
        path = _home(config) / "warehouse.duckdb"
    except ConfigError as e:
        _fail(str(e))
    if not path.exists():
        _fail(f"{path}: no warehouse yet (run `carryon run` first)")
    try:
        rows = Warehouse(path).query(query)
    except duckdb.Error as e:
        _fail(f"SQL error: {str(e).splitlines()[0]}")
    if json_out:
        for r in rows:
            typer.echo(json.dumps(r, default=str))
    else:
        _print_table(rows)


def report(config: str = ConfigOpt,
           run_id: Optional[str] = typer.Option(None, help="Default: the latest run.")):
    """Write <home>/reports/<run id>/ with report.md, report.html and the figures."""
    from tasks.report import ReportError, write_report

    from tasks.report import summary_rows
    from warehouse import Warehouse

    try:
        cfg = load_config(config)
        if cfg.spec.engine == "episodes":
            from flows.cli.episodes import episode_report

            typer.echo(f"report: {episode_report(cfg, run_id)}")
            return
        out = write_report(cfg, run_id)
    except (ConfigError, ReportError) as e:
        _fail(str(e))
    _print_table(summary_rows(Warehouse(cfg.home_path / "warehouse.duckdb")))
    typer.echo(f"report: {out}")
