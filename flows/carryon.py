"""The ``carryon`` flow: the whole benchmark, one subflow per stage.

The flow takes only plain parameters (a config path, stage names, a limit, a shard) so
nothing secret or unserialisable reaches Prefect. Stages run in pipeline order; each one
reads its inputs from the warehouse, so any suffix of the pipeline can run on its own.
"""

from __future__ import annotations

from prefect import flow

from flows.checklists import checklists_flow
from flows.judge import judge_flow
from flows.report import report_flow
from flows.simulate import simulate_flow
from tasks.run import finish_run, open_run

STAGE_FLOWS = {
    "checklists": checklists_flow,
    "simulate": simulate_flow,
    "judge": judge_flow,
    "report": report_flow,
}


@flow(name="carryon")
async def carryon(config: str, stages: str = "all", limit: int | None = None,
                  shard_index: int = 0, shard_count: int = 1) -> dict:
    ctx = open_run(config, stages, limit, shard_index, shard_count)
    summary: dict = {"run_id": ctx.run_id, "home": str(ctx.home), "stages": {}}
    try:
        for stage in ctx.stages:
            summary["stages"][stage] = await STAGE_FLOWS[stage](ctx.run_id)
            ctx.flush_calls()
    except BaseException as e:
        finish_run(ctx, "failed", f"{type(e).__name__}: {e}")
        raise
    gw = ctx._gateway
    summary["requests"] = sum(s.requests for s in gw.stats.values()) if gw else 0
    summary["cache_hits"] = sum(s.hits for s in gw.stats.values()) if gw else 0
    summary["failures"] = {r: s.failures for r, s in gw.stats.items() if s.failures} if gw else {}
    finish_run(ctx, "succeeded")
    return summary
