"""``carryon check``: the smallest real request to every model entry of a config before a long
run (tasks/engine/check.py); exit 1 with one line per failure."""

from __future__ import annotations

import asyncio

import typer

from flows.cli.common import ConfigOpt, _fail
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config


def check(config: str = ConfigOpt,
          batch: bool = typer.Option(False, "--batch", help=(
              "Also a one-line batch per batch provider (the first batch: true entry of each); "
              "waits for it, up to --batch-timeout.")),
          timeout: float = typer.Option(120.0, "--timeout", help="Seconds a live request may take."),
          batch_timeout: float = typer.Option(1800.0, "--batch-timeout", help=(
              "Seconds a one-line batch may take (providers promise 24 hours; most answer in "
              "minutes)."))):
    """Before a long run: one small real request per model entry, with its role's settings
    (key, parameters, structured output, latency, cost); costs cents."""
    from tasks.engine.check import check as run_check, report

    try:
        cfg = load_config(config)
        live, batched = asyncio.run(run_check(cfg, batch, timeout, batch_timeout))
    except ConfigError as e:
        _fail(str(e))
    rows, failures = report(cfg, live, batched)
    _print_table(rows)
    cost = sum(r["cost_usd"] or 0 for r in rows)
    typer.echo(f"{len(rows)} request(s), {len(rows) - len(failures)} passed; cost ${cost:.4f}")
    for line in failures:
        typer.echo(f"error: {line}", err=True)
    if failures:
        raise typer.Exit(1)
