"""The ``carryon`` flow: the whole benchmark, one subflow per stage.

The flow takes only plain parameters (a config path, stage names, a limit, a shard) so
nothing secret or unserialisable reaches Prefect. Stages run in pipeline order; each one
reads its inputs from the warehouse, so any suffix of the pipeline can run on its own. A model
stage whose inputs are unchanged since it last ran whole is skipped (its summary says
``unchanged_since``; tasks/engine/stage_memo.py), unless the run asks for ``replay``.

A stage that had work and did none of it because its model calls failed raises
``StageFailed`` (tasks/engine/stage_errors.py): the run is recorded as failed with that one-line
reason and no later stage runs. The report is written inside the run, before the run's row
is closed; once it is closed, the report's status line is rewritten with the final status.
"""

from __future__ import annotations

import importlib
import time

from prefect import flow
from prefect.context import SyncClientContext

import prompts
from flows.report import republish_report
from tasks.ops import interrupt
from tasks.engine.run import finish_run, get_run, open_run, run_totals
from tasks.engine.stage_errors import StageFailed
from tasks.engine.stage_memo import StageMemo, keeps_memo

__all__ = ["StageFailed", "carryon", "stage_flow"]


def stage_flow(spec, stage: str):
    """The Prefect subflow of a spec's stage: the one its registration names (tasks/stages/)."""
    module, _, name = spec.stage(stage).flow.partition(":")
    return getattr(importlib.import_module(module), name)


def _error_line(e: BaseException) -> str:
    if isinstance(e, StageFailed):
        return str(e)  # already "<stage>: <cause>"
    return " ".join(f"{type(e).__name__}: {e}".split())


def _restamp_report(ctx, summary: dict) -> None:
    """Show the closed run's status in report.md / report.html (see the module docstring)."""
    report = summary["stages"].get("report")
    folder = report.get("report") if isinstance(report, dict) else None
    if not folder or "unchanged_since" in report:
        return  # no report, or one kept from the run that wrote it (and stamped it)
    from pathlib import Path

    from tasks.report.page_base import restamp_status

    row = ctx.warehouse.run_row(ctx.run_id)
    if row:
        restamp_status(Path(folder), row)
        md = Path(folder) / "report.md"
        if md.exists():
            republish_report(ctx.run_id, md.read_text(encoding="utf-8"))


async def _release_limits(ctx) -> None:
    # Shared provider slots go back to the Prefect server at once (other shards wait on them).
    if ctx._gateway is not None:
        await ctx._gateway.release_limits()


@flow(name="carryon")
async def carryon(config: str, stages: str = "all", limit: int | None = None,
                  shard_index: int = 0, shard_count: int = 1, replay: bool = False,
                  retry_failed: bool = False, budget_usd: float | None = None,
                  opened_run: str | None = None) -> dict:
    """``replay``: run every stage, also those whose inputs are unchanged since they last ran
    whole (tasks/engine/stage_memo.py; by default those are skipped, their rows already stored).
    ``retry_failed``: send again the deterministic calls whose failure an earlier run
    remembered (tasks/gateway/client.py); implies ``replay``. ``budget_usd``: the spending
    cap in place of the config's (tasks/gateway/budget.py). ``opened_run``: the id of a run
    this process already opened with these arguments (``carryon run`` opens it to see
    whether any stage must run before it starts Prefect's server); None: the flow opens it."""
    # One synchronous Prefect client for the whole run: the stages' progress and report
    # artifacts are sync calls, and each would otherwise build its own client (~50 ms, most
    # of it loading TLS certificates, even for an http:// API).
    with SyncClientContext.get_or_create():
        return await _carryon(config, stages, limit, shard_index, shard_count,
                              replay or retry_failed, retry_failed, budget_usd, opened_run)


async def _carryon(config: str, stages: str, limit: int | None, shard_index: int,
                   shard_count: int, replay: bool, retry_failed: bool = False,
                   budget_usd: float | None = None, opened_run: str | None = None) -> dict:
    ctx = (get_run(opened_run) if opened_run else
           open_run(config, stages, limit, shard_index, shard_count, budget_usd=budget_usd))
    # Every stage of the run renders the benchmark's own templates (prompts/ beside its spec)
    # before the shared ones: set here, inside the flow, so its subflows and tasks inherit it.
    try:
        with prompts.benchmark_prompts(ctx.config.spec.prompts_dir):
            return await _stages(ctx, replay, retry_failed)
    finally:
        interrupt.end_of_run()  # a budget stop of this run is not the next run's


async def _stages(ctx, replay: bool, retry_failed: bool) -> dict:
    if retry_failed:
        ctx.gateway.retry_failed = True
    summary: dict = {"run_id": ctx.run_id, "benchmark": ctx.config.spec.name,
                     "home": str(ctx.home), "stages": {}, "seconds": {}}
    work_rows = None
    try:
        for stage in ctx.stages:
            interrupt.raise_if_requested()  # Ctrl-C: no further stage starts
            started = time.perf_counter()
            memo = kept = None
            if keeps_memo(ctx.config.spec, stage):  # a replay records its memo too
                if work_rows is None:  # the run's work (queries, items) as rows
                    work_rows = ctx.config.spec.work_stage().rows(ctx)
                memo = StageMemo.open(ctx, stage, work_rows)
                kept = None if replay else memo.skipped()
            if kept is not None:  # inputs unchanged: a replay would write the same rows
                summary["stages"][stage] = kept
            else:
                summary["stages"][stage] = await stage_flow(ctx.config.spec, stage)(ctx.run_id)
                ctx.flush_calls()
                if memo is not None:
                    memo.record(summary["stages"][stage])
            # Wall seconds per stage: where a run's time went (the CLI prints them).
            summary["seconds"][stage] = round(time.perf_counter() - started, 2)
    except BaseException as e:
        await _release_limits(ctx)
        if interrupt.requested():  # Ctrl-C / SIGTERM (tasks/ops/interrupt.py): the last write
            finish_run(ctx, "interrupted", interrupt.reason())
        else:
            finish_run(ctx, "failed", _error_line(e))
        raise
    await _release_limits(ctx)
    summary.update(run_totals(ctx))
    finish_run(ctx, "succeeded")
    _restamp_report(ctx, summary)
    return summary
