"""The episode engine's judging stage as a Prefect subflow: the spec's judges over the run's
stored episodes (``carryon run --stages verdicts`` re-judges without regenerating)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.engine.stage import run_batches, whole_batches
from tasks.engine.verdicts import (
    agreement_rows, judge_batch, judge_sets, judged_episodes, merge, set_rows, spec_judges,
)
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.engine.stage_errors import StageFailed, all_failed, every

BATCH_EPISODES = 64
BATCHES_IN_FLIGHT = 4


@task(name="verdict-batch", cache_policy=NO_CACHE, persist_result=False)
async def verdict_batch_task(run_id: str, episode_ids: list[str], set_ids: list[str]) -> dict:
    ctx = get_run(run_id)
    judges, _ = spec_judges(ctx.config)
    return await judge_batch(ctx, judges, episode_ids, set_ids)


@flow(name="verdicts")
async def verdicts_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    judges, skipped = spec_judges(ctx.config)
    episodes, items = judged_episodes(ctx)
    # The sets hash the versions of the judged items (Ben-Util: their checklists).
    judged = {i for _, i in episodes}
    sets = judge_sets(ctx, judges, [it for it in items if it.item_id in judged])
    ctx.warehouse.write("verdict_sets", set_rows(ctx, sets))
    set_ids = [s.set_id for s in sets]
    # Batches of whole items: an item's episodes that share their first responses are
    # judged in one batch, so each distinct request is sent once.
    parts = [[e for e, _ in b] for b in whole_batches(episodes, BATCH_EPISODES, lambda e: e[1])]
    results = await run_batches(ctx, Progress("verdicts", len(episodes), unit="episodes"), parts,
                                lambda part: verdict_batch_task(run_id, part, set_ids),
                                in_flight=BATCHES_IN_FLIGHT)
    summary = {**merge(results), "judges": [j.kind for j, _ in judges],
               "judges_skipped": skipped, "verdict_sets": {s.judge.kind: s.set_id for s in sets}}
    # A voting panel's agreement over its whole set (this run's votes and earlier ones).
    agreement = agreement_rows(ctx.warehouse, sets)
    if agreement:
        ctx.warehouse.write("judge_agreement", agreement, delete=(
            "list_contains(?, judgment_set_id)", [sorted({r["judgment_set_id"] for r in agreement})]))
        summary["agreement"] = [{k: (round(v, 3) if isinstance(v, float) else v)
                                 for k, v in r.items() if k != "judgment_set_id"}
                                for r in agreement]
    errors = [e for r in results for e in r["errors"]]
    if summary["calls"]:
        line = all_failed(summary["calls"], summary["calls"] - summary["failed_calls"], errors,
                          f"{every(summary['calls'], 'judge call', 'judge calls')} failed")
        if line:
            raise StageFailed("verdicts", line, summary)
    return summary
