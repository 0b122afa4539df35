"""The episode engine's first stage (sister benchmarks) as a Prefect subflow: store the
run's items, then play every (item, condition, target) episode the spec defines.

One Prefect task per batch of whole items; a few batches run at once and the gateway bounds
the calls inside them. A stage whose every episode failed on a call error raises StageFailed.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.engine.episode import merge_counts, play_batch, run_seats, run_work
from tasks.core.items import store_items, stored_items
from tasks.engine.stage import run_batches, whole_batches
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.engine.stage_errors import StageFailed, all_failed, causes, every, not_prepared

BATCH_EPISODES = 64
BATCHES_IN_FLIGHT = 4


def episode_keys(batch: list) -> list[list]:
    """A batch as plain values for a Prefect task: (item_id, condition, target, script)."""
    return [[item.item_id, cond.name, t.name, list(plan)] for item, cond, t, plan in batch]


@task(name="episode-batch", cache_policy=NO_CACHE, persist_result=False)
async def episode_batch_task(run_id: str, keys: list[list]) -> dict:
    ctx = get_run(run_id)
    spec = ctx.config.spec
    # The flow stored the run's items before the batches: read them back, not the dataset.
    items = stored_items(ctx.warehouse, spec.name, (k[0] for k in keys))
    targets = {t.name: t for t in run_seats(ctx.config)}
    work = [(items[i], spec.condition(c), targets[t], tuple(p)) for i, c, t, p in keys]
    return await play_batch(ctx, spec, work)


@flow(name="episodes")
async def episodes_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    spec = ctx.config.spec
    items, work, skipped, left_out = run_work(ctx)
    store_items(ctx.warehouse, spec.name, items, ctx.run_id)
    results = await run_batches(
        ctx, Progress("episodes", len(work), unit="episodes"), whole_batches(work, BATCH_EPISODES, lambda w: w[0].item_id),
        lambda part: episode_batch_task(run_id, episode_keys(part)), in_flight=BATCHES_IN_FLIGHT)
    summary = {"items": len(items), **merge_counts(results),
               "conditions_skipped": skipped}
    not_prepared("episodes", left_out, len(items), summary, "was prepared")
    failures = [f for r in results for f in r["failures"]]
    if failures:  # said again in the run's last lines (flows/cli/run.py)
        summary["failed"] = f"{len(failures)} of {len(work)} episodes: {causes(failures)}"
    errors = [e for r in results for e in r["errors"]]
    line = all_failed(len(work), summary["status"].get("completed", 0), errors,
                      f"{every(len(work), 'episode', 'episodes')} failed")
    if line:
        raise StageFailed("episodes", line, summary)
    return summary
