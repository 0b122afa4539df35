"""``carryon run`` (the benchmark through the Prefect flow, with a summary) and ``carryon
plan`` (its calls, tokens and cost before anything is spent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import ConfigOpt, _fail
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config


def run(config: str = ConfigOpt,
        stages: str = typer.Option("all", help=(
            "Comma-separated, of the stages the benchmark's spec lists (its stages:), run "
            "in the spec's order.")),
        limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries."),
        shard_index: int = typer.Option(0, help="This worker's shard (0-based)."),
        shard_count: int = typer.Option(1, help="How many shards split the queries."),
        replay: bool = typer.Option(False, "--replay", help=(
            "Run every stage, also a model stage whose inputs are unchanged since it last ran "
            "whole (skipped by default: its rows are already stored).")),
        retry_failed: bool = typer.Option(False, "--retry-failed", help=(
            "Send again the deterministic calls whose invalid or empty answer an earlier run "
            "remembered (not re-sent by default: the same request gives the same junk); "
            "implies --replay.")),
        budget_usd: Optional[float] = typer.Option(None, "--budget-usd", help=(
            "The most this home may have spent on model calls, all runs together, in USD "
            "(replaces the config's budget_usd): the run stops before a request or batch that "
            "could pass it, and exits 3 with what was spent and what is left (docs/costs.md)."))):
    """Run the benchmark (all stages, or --stages) through the Prefect flow."""
    from tasks.gateway.cache import CacheError
    from tasks.gateway.client import ServerUnavailable
    from tasks.datasets.fields import DataError
    from tasks.engine.stage_errors import StageFailed
    from tasks.core.judges import JudgeError
    from tasks.report import ReportError
    from tasks.engine.run import close_if_open, parse_stages, preflight, with_budget
    from warehouse import WarehouseError

    try:  # validate before Prefect starts (its server costs seconds)
        cfg = with_budget(load_config(config), budget_usd)
        selected = parse_stages(stages, cfg.spec.stages, cfg.spec.renamed_stages)
        preflight(cfg, selected, limit)
    except (ConfigError, JudgeError) as e:
        _fail(str(e))
    opened = None
    if not (replay or retry_failed):
        # A run whose every stage is unchanged needs no Prefect server, no workers and no flow:
        # it is recorded (a runs row, succeeded) and answered here, in a second or so. Else the
        # run stays open and the flow takes it over.
        from tasks.engine.run import finish_if_unchanged, open_run

        try:
            ctx = open_run(config, stages, limit, shard_index, shard_count, check=False,
                           budget_usd=budget_usd, loaded=cfg)
            summary = finish_if_unchanged(ctx)
        except (ConfigError, DataError, WarehouseError, CacheError) as e:
            _fail(str(e))
        if summary is not None:
            _after_run(cfg, summary)
            return
        opened = ctx.run_id
    from tasks.ops import interrupt
    from tasks.ops.ephemeral import TemporaryServerError, start_temporary_server
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
        # The flow's loop runs in a thread; this one takes Ctrl-C and SIGTERM: the first stops
        # new calls, lets those in flight finish for a few seconds, keeps whole batches only
        # and marks the run interrupted; a second exits at once (tasks/ops/interrupt.py).
        summary = interrupt.run(lambda: carryon(
            config=config, stages=stages, limit=limit, shard_index=shard_index,
            shard_count=shard_count, replay=replay, retry_failed=retry_failed,
            budget_usd=budget_usd, opened_run=opened))
    except interrupt.Interrupted as e:  # a signal (130) or the budget (3): one line
        typer.echo(f"run stopped: {e}", err=True)
        raise typer.Exit(e.code)
    except (ConfigError, DataError, JudgeError, ReportError, WarehouseError, CacheError,
            TemporaryServerError, ServerUnavailable, StageFailed) as e:
        close_if_open(opened, "failed", str(e))
        _fail(str(e))
    except KeyboardInterrupt:  # before the flow's loop took the signals over
        close_if_open(opened, "interrupted", "interrupted by SIGINT before the flow started")
        raise
    finally:
        stop_prestarted()
    _after_run(cfg, summary)


def _after_run(cfg, summary: dict) -> None:
    """What ``carryon run`` prints of a finished run, and its exit status."""
    _print_summary(summary, cfg.spec)
    from tasks.config import is_smoke_model

    if any(is_smoke_model(spec.model) for specs in cfg.all_specs().values() for spec in specs):
        typer.echo("NOTE: the embedded 135M local model produced these numbers: a smoke run of "
                   "the pipeline, not a benchmark result.")
    if summary.get("failures"):
        typer.echo(f"calls that failed (recorded, not counted as answers): {summary['failures']}", err=True)
    if summary.get("capped_turns"):
        typer.echo(f"model-written turns longer than limits.prompt_turn_chars, cut in the prompts "
                   f"that showed them (stored whole): {summary['capped_turns']}", err=True)
    if summary.get("remembered_failures"):
        typer.echo("calls whose earlier deterministic failure was remembered, not sent again "
                   f"(--retry-failed sends them): {summary['remembered_failures']}", err=True)
    _say_failed_episodes(summary)
    if "episodes" in summary.get("stages", {}):
        _exit_if_a_target_failed(cfg, summary)


def _say_failed_episodes(summary: dict) -> None:
    """The run's last lines say how many items were not played (a prepare stage left them
    out) and how many episodes failed, and why (the play stage's ``items_not_prepared`` and
    ``failed``): left out of every metric, they must not pass for a clean run."""
    for stage, info in summary.get("stages", {}).items():
        if not isinstance(info, dict):
            continue
        left = info.get("items_not_prepared") or {}
        if left:
            n = sum(left.values())
            top, k = next(iter(left.items()))
            more = f"; and {len(left) - 1} other reason(s)" if len(left) > 1 else ""
            typer.echo(f"warning: {stage}: {n} of {n + info.get('items', 0)} items were not "
                       f"played: {top} ({k} time{'s' if k != 1 else ''}){more}", err=True)
        if info.get("failed"):
            typer.echo(f"warning: {stage}: {info['failed']}; failed episodes are left out of "
                       "every metric (the report's Episodes table counts them)", err=True)


def _exit_if_a_target_failed(cfg, summary: dict) -> None:
    """Exit 1 when a target of this config has episodes and none of them completed: the run
    finished and its report shows that target with its counts, but a run with a target that
    produced nothing is not a success (the other targets' numbers stand)."""
    from tasks.engine.episode import run_seats
    from tasks.report.sections import failed_targets
    from warehouse import Warehouse

    seats = {t.name for t in run_seats(cfg)}
    failed = [r for r in failed_targets(Warehouse(Path(summary["home"]) / "warehouse.duckdb"),
                                        cfg.spec.name) if r["target"] in seats]
    for r in failed:
        typer.echo(f"error: target {r['target']}: none of its {r['n_episodes']} episodes "
                   f"completed ({r['reasons']}); the report shows it with these counts", err=True)
    if failed:
        raise typer.Exit(1)


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


def _print_summary(summary: dict, spec) -> None:
    typer.echo(f"run {summary['run_id']}: {summary['requests']} requests to model servers, "
               f"{summary['cache_hits']} cache hits")
    from tasks.report.assemble import CONSOLE_KEY

    for stage, info in summary["stages"].items():
        # A stage's summary as JSON, less the headline rows (printed as the table below).
        shown = (json.dumps({k: v for k, v in info.items() if k != CONSOLE_KEY}, default=str)
                 if isinstance(info, dict) else info)
        typer.echo(f"  {stage}: {shown}")
    if summary.get("seconds"):
        typer.echo(f"stage seconds: {json.dumps(summary['seconds'])}")
    home = Path(summary["home"])
    info = summary["stages"].get("report")
    report = info.get("report") if isinstance(info, dict) else None
    if report:
        from tasks.report.assemble import console

        headline = console(spec)  # None: the report's numbers are in report.md only
        if headline is not None:
            from warehouse import Warehouse

            title, rows = headline(Warehouse(home / "warehouse.duckdb"), info.get(CONSOLE_KEY))
            typer.echo(f"\n{title}:")
            _print_table(rows)
        typer.echo(f"report: {report}")
    typer.echo(f"warehouse: {home / 'warehouse.duckdb'}  (query it: carryon sql \"SELECT ...\")")


def plan(config: str = ConfigOpt,
         limit: Optional[int] = typer.Option(None, help="Use only the first N selected queries."),
         by: str = typer.Option("role", "--by", help=(
             "role: a row per model role; model: a row per model string (its roles summed), "
             "with where its price comes from or why it has none."))):
    """Before spending anything: calls per role, tokens and a cost estimate."""
    from tasks.engine.plan import make_plan
    from tasks.gateway.prices import by_model

    if by not in ("role", "model"):
        _fail(f"--by {by!r}: choose role or model")
    try:
        rows, notes = make_plan(load_config(config), limit)
    except ConfigError as e:
        _fail(str(e))
    _print_table(by_model(rows) if by == "model" else
                 [{k: v for k, v in r.items() if k != "per_model"} for r in rows])
    for n in notes:
        typer.echo(n)
