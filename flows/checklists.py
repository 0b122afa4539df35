"""The checklists stage as a Prefect subflow (tasks/stages/checklists/): a checklist for each of
the spec's items that has none, one Prefect task per batch of items (never one per LLM call);
inside a batch every call runs concurrently through the gateway, which enforces each model's
limits. Bad input fails before any row is written: the items are selected and prepared and the
roles resolved first.

NO_CACHE: the gateway's content-hash cache makes reruns free; Prefect's own cache would key on
pickled inputs and could not see template changes.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.core.items import prepare_items, run_items
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.engine.stage import run_batches
from tasks.engine.stage_errors import StageFailed, not_prepared
from tasks.stages.checklists.build import build_batch
from tasks.stages.checklists.failures import checklists_failure, checklists_unbuilt
from tasks.stages.checklists.roles import resolve_roles
from tasks.stages.checklists.stats import stage_stats

BATCH_ITEMS = 8
# Batches at once: the stage's held state is set by this, not by the number of items.
BATCHES_IN_FLIGHT = 8


@task(name="checklist-batch", cache_policy=NO_CACHE)
async def checklist_batch(run_id: str, work: list[tuple[str, str]]) -> list[dict]:
    ctx = get_run(run_id)
    return await build_batch(ctx, work, resolve_roles(ctx.config))


@flow(name="checklists")
async def checklists_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    spec = ctx.config.spec
    stage = spec.stage("checklists")
    # The spec's items as the prepare stages before this one left them (DataError: nothing
    # written yet).
    items, left = prepare_items(ctx, run_items(ctx), until="checklists")
    work = stage.work(spec, items)
    resolve_roles(ctx.config)  # ConfigError here: nothing written yet
    batches = [work[i:i + BATCH_ITEMS] for i in range(0, len(work), BATCH_ITEMS)]
    results = await run_batches(ctx, Progress("checklists", len(work), unit="items"),
                                batches, lambda b: checklist_batch(run_id, b),
                                count=lambda _, result: len(result), in_flight=BATCHES_IN_FLIGHT)
    summaries = [s for result in results for s in result]
    stats = stage_stats(summaries)
    if len(items) > len(work):
        stats["items_given_a_checklist"] = len(items) - len(work)
    not_prepared("checklists", left, len(items), stats, "reached the stage")
    # Every item dropped by call errors, or some left unbuilt because a call got no answer:
    # the stage fails (what it built is written; a rerun builds the rest).
    failure = checklists_failure(ctx.warehouse, summaries) or checklists_unbuilt(summaries)
    if failure:
        raise StageFailed("checklists", failure, stats)
    return stats
