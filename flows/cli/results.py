"""``carryon sql`` (SQL on the warehouse) and ``carryon report`` (the run's report folder)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from flows.cli.common import ConfigOpt, _fail, _warehouse_path
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

    path = _warehouse_path(config)
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
               None, "--compare", help="A comparison the benchmark's report offers (CarryOnBench: "
                                       "paper, its numbers beside the paper's).")):
    """Write <home>/reports/<run id>/ with report.md and report.html (the report's sections
    and an episode browser; a benchmark with a report layout of its own, such as
    CarryOnBench's, writes its figures too)."""
    from tasks.report import ReportError
    from tasks.report.assemble import write

    try:
        cfg = load_config(config)
        out = write(cfg, None, run_id, compare)
    except (ConfigError, ReportError) as e:
        _fail(str(e))
    if out.console is not None:
        _print_table(out.console)
    if out.notes:
        typer.echo("\n" + "\n".join(out.notes))
    typer.echo(f"report: {out.folder}")
