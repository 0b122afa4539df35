"""``carryon data`` (the run's work: the selected queries, or an episode benchmark's items) and ``carryon
flows`` (the valid conversation flows, counted or sampled)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from flows.cli.common import ConfigOpt, _fail
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config


def data(config: str = ConfigOpt, json_out: bool = typer.Option(False, "--json"),
         limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries.")):
    """Print the run's work (CarryOnBench's selected queries, another benchmark's items) and
    the count."""
    from tasks.datasets.fields import DataError

    try:
        cfg = load_config(config)
        lines, rows, count = cfg.spec.work_stage().listing(cfg, limit)
    except (ConfigError, DataError) as e:
        _fail(str(e))
    if json_out:
        for line in lines:
            typer.echo(json.dumps(line))
        return
    _print_table(rows)
    typer.echo(count)


def scripts_cmd(count: bool = typer.Option(False, "--count", help="Valid scripts per number of moves."),
                sample: bool = typer.Option(False, "--sample", help="Print sampled scripts as JSON lines."),
                queries: int = typer.Option(1, help="With --sample: how many queries."),
                seed: int = typer.Option(0, help="With --sample: the seed."),
                config: Optional[str] = typer.Option(None, "--config", "-c",
                                                     help="With --sample: lengths and counts from this config.")):
    """Count the valid scripts (the simulated user's move sequences), or sample them as the
    simulation does."""
    from tasks.users.scripts import count_rows, sample_rows

    if count == sample:
        _fail("choose one of --count or --sample")
    if count:
        _print_table(count_rows())
        return
    try:
        fcfg = load_config(config).scripts if config else None
    except ConfigError as e:
        _fail(str(e))
    for row in sample_rows(queries, seed, fcfg):
        typer.echo(json.dumps(row))
