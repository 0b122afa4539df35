"""CarryOnBench's stage of its own as a Prefect subflow, named by its stage (stages.py) as
``"module:function"`` like any benchmark's own: flows/ holds only the engine's generic ones.

``checklists_flow`` (queries, benign intents, Ben-Util checklists): one Prefect task per
batch of queries (never one per LLM call); inside a batch every call runs concurrently
through the gateway, which enforces each model's limits. Bad input fails before any row is
written: the queries are selected and the roles resolved first.

NO_CACHE everywhere: the gateway's content-hash cache makes reruns free; Prefect's own cache
would key on pickled inputs and could not see template changes.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.benchmarks.carryon.checklist_roles import resolve_roles
from tasks.benchmarks.carryon.checklist_stats import stage_stats
from tasks.benchmarks.carryon.checklists import build_batch
from tasks.benchmarks.carryon.failures import checklists_failure, checklists_unbuilt
from tasks.benchmarks.carryon.queries import run_queries
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.engine.stage import run_batches
from tasks.engine.stage_errors import StageFailed


# ----- checklists ------------------------------------------------------------------------------
CHECKLIST_BATCH_QUERIES = 8


@task(name="checklist-batch", cache_policy=NO_CACHE)
async def checklist_batch(run_id: str, queries: list) -> list[dict]:
    ctx = get_run(run_id)
    return await build_batch(ctx, queries, resolve_roles(ctx.config))


@flow(name="checklists")
async def checklists_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    queries = run_queries(ctx)  # DataError here: nothing written yet
    resolve_roles(ctx.config)  # ConfigError here: nothing written yet
    batches = [queries[i:i + CHECKLIST_BATCH_QUERIES]
               for i in range(0, len(queries), CHECKLIST_BATCH_QUERIES)]
    results = await run_batches(ctx, Progress("checklists", len(queries), unit="queries"),
                                batches, lambda b: checklist_batch(run_id, b),
                                count=lambda _, result: len(result))
    summaries = [s for result in results for s in result]
    stats = stage_stats(summaries)
    # Every query dropped by call errors, or some left unbuilt because a call got no answer:
    # the stage fails (what it built is written; a rerun builds the rest).
    failure = checklists_failure(ctx.warehouse, summaries) or checklists_unbuilt(summaries)
    if failure:
        raise StageFailed("checklists", failure, stats)
    return stats
