"""The ``carryon`` command line.

Every command validates its input first and exits non-zero with a one-line error that names
the cause (file, field, variable or URL); tracebacks are for bugs, not for user mistakes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

# Before Prefect is imported anywhere: this machine has no internet, so no telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# The temporary Prefect server can take longer than its default to start on a busy 2-core box.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import typer  # noqa: E402

# The table printer lives in cli_table.py, a leaf: flows/cli_episodes.py prints tables too.
from flows.cli_table import _print_table  # noqa: E402
from tasks.config import ConfigError, load_config  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="CarryOnBench: utility recovery under benign intent clarification.")
cache_app = typer.Typer(no_args_is_help=True, help="Inspect and trim the LLM response cache.")
local_app = typer.Typer(no_args_is_help=True, help="The offline local model server (llama.cpp).")
app.add_typer(cache_app, name="cache")
app.add_typer(local_app, name="local-model")


def _register_subcommands() -> None:
    from flows.cli_prefect import merge, server_app
    from flows.cli_validate import validate_app

    app.add_typer(server_app, name="server")
    app.command("merge")(merge)
    app.add_typer(validate_app, name="validate")


_register_subcommands()

ConfigOpt = typer.Option(..., "--config", "-c", help="The run's YAML config file.")


def _fail(msg: str, code: int = 2):
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _home(config: Optional[str]) -> Path:
    if config:
        return load_config(config).home_path
    return Path(os.environ.get("CARRYON_HOME") or ".carryon")


@app.command()
def run(config: str = ConfigOpt,
        stages: str = typer.Option("all", help="Comma-separated: checklists,simulate,judge,report."),
        limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries."),
        shard_index: int = typer.Option(0, help="This worker's shard (0-based)."),
        shard_count: int = typer.Option(1, help="How many shards split the queries."),
        replay: bool = typer.Option(False, "--replay", help=(
            "Run every stage, also a model stage whose inputs are unchanged since it last ran "
            "whole (skipped by default: its rows are already stored)."))):
    """Run the benchmark (all stages, or --stages) through the Prefect flow."""
    import asyncio

    from tasks.gateway.cache import CacheError
    from tasks.gateway.client import ServerUnavailable
    from tasks.data import DataError
    from tasks.stage_errors import StageFailed
    from tasks.judge import JudgeError
    from tasks.report import ReportError
    from tasks.run import parse_stages, preflight
    from warehouse import WarehouseError

    try:  # validate before Prefect starts (its server costs seconds)
        cfg = load_config(config)
        selected = parse_stages(stages, cfg.spec.stages)
        preflight(cfg, selected, limit)
    except ConfigError as e:
        _fail(str(e))
    from tasks.ephemeral import TemporaryServerError, start_temporary_server
    from tasks.gateway.workers import prestart, stop_prestarted, worker_count

    if any(stage != "report" for stage in selected):
        # The gateway's workers import litellm (seconds of CPU) while Prefect's server starts
        # and the flow is imported, instead of holding up the first model call. Stages that
        # turn out unchanged are skipped and leave them unused: stopped below.
        try:
            prestart(worker_count(cfg.gateway.workers))
        except ValueError as e:  # CARRYON_GATEWAY_WORKERS is not a number
            _fail(str(e))

    # No PREFECT_API_URL: our own temporary Prefect server, which dies with this process even
    # on SIGKILL (Prefect's own would be orphaned); it starts while the flow is imported.
    server = start_temporary_server()
    from flows.carryon import carryon

    _quiet_tracebacks((ConfigError, DataError, JudgeError, ReportError, WarehouseError,
                       CacheError, ServerUnavailable, StageFailed))

    try:
        if server:
            server.wait_ready()
        summary = asyncio.run(carryon(config=config, stages=stages, limit=limit,
                                      shard_index=shard_index, shard_count=shard_count,
                                      replay=replay))
    except (ConfigError, DataError, JudgeError, ReportError, WarehouseError, CacheError,
            TemporaryServerError, ServerUnavailable, StageFailed) as e:
        _fail(str(e))
    finally:
        stop_prestarted()
    _print_summary(summary)
    from tasks.config import is_smoke_model

    if any(is_smoke_model(spec.model) for specs in cfg.all_specs().values() for spec in specs):
        typer.echo("NOTE: the embedded 135M local model produced these numbers: a smoke run of "
                   "the pipeline, not a benchmark result.")
    if summary.get("failures"):
        typer.echo(f"calls that failed (recorded, not counted as answers): {summary['failures']}", err=True)


class _NoTracebackFor:
    """A logging filter: records about the errors a user must act on keep their message but
    lose the traceback (the CLI prints the cause as one line; tracebacks are for bugs)."""

    def __init__(self, kinds: tuple):
        self.kinds = kinds

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        seen = 0
        while exc is not None and seen < 10:
            if isinstance(exc, self.kinds):
                record.exc_info = None
                record.exc_text = None
                break
            exc, seen = exc.__cause__ or exc.__context__, seen + 1
        return True


def _quiet_tracebacks(kinds: tuple) -> None:
    """Attach the filter to every handler Prefect's loggers write through."""
    import logging

    filt = _NoTracebackFor(kinds)
    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
                                       if n.startswith("prefect")]
    for lg in loggers:
        for h in getattr(lg, "handlers", []):
            if filt not in h.filters:
                h.addFilter(filt)


def _print_summary(summary: dict) -> None:
    typer.echo(f"run {summary['run_id']}: {summary['requests']} requests to model servers, "
               f"{summary['cache_hits']} cache hits")
    for stage, info in summary["stages"].items():
        typer.echo(f"  {stage}: {json.dumps(info, default=str) if not isinstance(info, str) else info}")
    if summary.get("seconds"):
        typer.echo(f"stage seconds: {json.dumps(summary['seconds'])}")
    home = Path(summary["home"])
    report = (summary["stages"].get("report") or {}).get("report") if isinstance(
        summary["stages"].get("report"), dict) else None
    if report and summary.get("benchmark", "carryon") != "carryon":
        typer.echo(f"report: {report}")  # an episode benchmark: its metrics are in report.md
    elif report:
        from tasks.report import summary_rows
        from warehouse import Warehouse

        typer.echo("\nmodel summary (utilities in %, harm 1-5):")
        _print_table(summary_rows(Warehouse(home / "warehouse.duckdb")))
        typer.echo(f"report: {report}")
    typer.echo(f"warehouse: {home / 'warehouse.duckdb'}  (query it: carryon sql \"SELECT ...\")")


@app.command()
def plan(config: str = ConfigOpt,
         limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries.")):
    """Before spending anything: calls per role, tokens and a cost estimate."""
    from tasks.plan import make_plan

    try:
        rows, notes = make_plan(load_config(config), limit)
    except ConfigError as e:
        _fail(str(e))
    _print_table(rows)
    for n in notes:
        typer.echo(n)


@app.command()
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


def _cache(config: Optional[str]):
    from tasks.gateway.cache import CacheError, ResponseCache

    try:
        return ResponseCache(load_config(config).cache_path if config else
                             Path(os.environ.get("CARRYON_CACHE_DIR") or _home(None) / "cache"))
    except (ConfigError, CacheError) as e:
        _fail(str(e))


@cache_app.command("stats")
def cache_stats(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Entries per role and model, and the cache's size on disk."""
    st = _cache(config).stats()
    rows = [{"role": r, "model": m, "entries": n} for (r, m), n in sorted(st["by_role_model"].items(), key=str)
            if (role is None or r == role) and (model is None or m == model)]
    _print_table(rows)
    typer.echo(f"total entries: {st['entries']}, {st['volume_bytes'] / 1e6:.1f} MB on disk")


@cache_app.command("prune")
def cache_prune(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Drop entries no run in the warehouse used (optionally only of one role/model)."""
    from warehouse import Warehouse

    cache = _cache(config)
    path = _home(config) / "warehouse.duckdb"
    used = {r["call_hash"] for r in Warehouse(path).query("SELECT DISTINCT call_hash FROM llm_calls")} \
        if path.exists() else set()
    n = cache.delete_where(role, model, keep=used)
    typer.echo(f"pruned {n} entries not referenced by any recorded run")


@cache_app.command("clear")
def cache_clear(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Drop every entry (or every entry of one role/model)."""
    n = _cache(config).delete_where(role, model)
    typer.echo(f"cleared {n} entries")


@app.command()
def data(config: str = ConfigOpt, json_out: bool = typer.Option(False, "--json"),
         limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries.")):
    """Print the selected queries (id, category, query, a one-line context) and the count."""
    from tasks.data import DataError, select_queries

    try:
        cfg = load_config(config)
        if cfg.spec.engine == "episodes":
            from flows.cli_episodes import print_items

            return print_items(cfg, json_out, limit)
        queries = select_queries(cfg, limit=limit)
    except (ConfigError, DataError) as e:
        _fail(str(e))
    if json_out:
        for q in queries:
            typer.echo(json.dumps(q.as_dict()))
        return
    _print_table([{"id": q.query_id, "category": q.category, "query": q.query,
                   "context": q.context_line()} for q in queries])
    typer.echo(f"{len(queries)} queries selected")


@app.command("flows")
def flows_cmd(count: bool = typer.Option(False, "--count", help="Valid flows per number of moves."),
              sample: bool = typer.Option(False, "--sample", help="Print sampled flows as JSON lines."),
              queries: int = typer.Option(1, help="With --sample: how many queries."),
              seed: int = typer.Option(0, help="With --sample: the seed."),
              config: Optional[str] = typer.Option(None, "--config", "-c",
                                                   help="With --sample: lengths and counts from this config.")):
    """Count the valid conversation flows, or sample them as the simulation does."""
    from tasks.flowgen import count_rows, sample_rows

    if count == sample:
        _fail("choose one of --count or --sample")
    if count:
        _print_table(count_rows())
        return
    try:
        fcfg = load_config(config).flows if config else None
    except ConfigError as e:
        _fail(str(e))
    for row in sample_rows(queries, seed, fcfg):
        typer.echo(json.dumps(row))


@app.command()
def report(config: str = ConfigOpt,
           run_id: Optional[str] = typer.Option(None, help="Default: the latest run.")):
    """Write <home>/reports/<run id>/ with report.md, report.html and the figures."""
    from tasks.report import ReportError, write_report

    from tasks.report import summary_rows
    from warehouse import Warehouse

    try:
        cfg = load_config(config)
        if cfg.spec.engine == "episodes":
            from flows.cli_episodes import episode_report

            typer.echo(f"report: {episode_report(cfg, run_id)}")
            return
        out = write_report(cfg, run_id)
    except (ConfigError, ReportError) as e:
        _fail(str(e))
    _print_table(summary_rows(Warehouse(cfg.home_path / "warehouse.duckdb")))
    typer.echo(f"report: {out}")


@local_app.command("start")
def local_start(config: Optional[str] = typer.Option(None, "--config", "-c"),
                port: Optional[int] = None, model_path: Optional[str] = None):
    """Start the llama.cpp server on loopback and wait until it answers."""
    from tasks import local_model

    try:
        info = local_model.start(_home(config), port=port, model_path=model_path)
    except (RuntimeError, ConfigError) as e:
        _fail(str(e))
    typer.echo(json.dumps(info))


@local_app.command("stop")
def local_stop(config: Optional[str] = typer.Option(None, "--config", "-c")):
    """Stop the server started by `local-model start`."""
    from tasks import local_model

    typer.echo("stopped" if local_model.stop(_home(config)) else "not running")


@local_app.command("status")
def local_status(config: Optional[str] = typer.Option(None, "--config", "-c")):
    """Print the running server's record, or exit 1 if none."""
    from tasks import local_model

    info = local_model.status(_home(config))
    if info is None:
        typer.echo("not running")
        raise typer.Exit(1)
    typer.echo(json.dumps(info))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
