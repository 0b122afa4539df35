"""CarryOnBench's two stages of its own as Prefect subflows, named by its stages (stages.py) as
``"module:function"`` like any benchmark's own: flows/ holds only the engine's generic ones.

- ``checklists_flow`` (queries, benign intents, Ben-Util checklists): one Prefect task per
  batch of queries (never one per LLM call); inside a batch every call runs concurrently
  through the gateway, which enforces each model's limits. Bad input fails before any row is
  written: the queries are selected and the roles resolved first.
- ``judge_flow`` (Ben-Util and safety): reads stored conversations, so ``carryon run
  --stages judge`` re-judges them (another judge model, template or checklist gives a new
  judgment set) without regenerating anything; one Prefect task per batch of whole queries'
  conversations.

NO_CACHE everywhere: the gateway's content-hash cache makes reruns free; Prefect's own cache
would key on pickled inputs and could not see template changes.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.benchmarks.carryon.checklist_roles import resolve_roles
from tasks.benchmarks.carryon.checklist_stats import stage_stats
from tasks.benchmarks.carryon.checklists import build_batch
from tasks.benchmarks.carryon.failures import checklists_failure, checklists_unbuilt, judge_failure
from tasks.benchmarks.carryon.judge import (
    BENUTIL, SAFETY, agreement_rows, judge_batch, judges, merge_summaries, plan_judging,
    write_sets,
)
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


# ----- judge ---------------------------------------------------------------------------------------
# About 3 queries' conversations per target: big enough to share first responses and keep
# the gateway busy, small enough that a batch's prompts stay a few MB.
BATCH_CONVERSATIONS = 48
BATCHES_IN_FLIGHT = 4


def run_query_ids(ctx) -> list[str]:
    """The queries this run covers (limit and shard applied by the data stage)."""
    return [q.query_id for q in run_queries(ctx)]


@task(name="judge-batch", cache_policy=NO_CACHE, persist_result=False)
async def judge_batch_task(run_id: str, conversation_ids: list[str],
                           checklist_versions: dict[str, str], benutil_set: str,
                           safety_set: str) -> dict:
    ctx = get_run(run_id)
    return await judge_batch(ctx, conversation_ids, checklist_versions, benutil_set, safety_set)


@flow(name="judge")
async def judge_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    plan = plan_judging(ctx, run_query_ids(ctx))
    write_sets(ctx.warehouse, plan.set_rows)
    batches = plan.batches(BATCH_CONVERSATIONS)
    query_of = dict(plan.conversations)

    def one(cids: list[str]):
        qids = {query_of[c] for c in cids}
        versions = {q: v for q, v in plan.checklist_versions.items() if q in qids}
        return judge_batch_task(run_id, cids, versions, plan.benutil_set, plan.safety_set)

    summary = merge_summaries(await run_batches(
        ctx, Progress("judge", len(plan.conversations), unit="conversations"), batches, one,
        in_flight=BATCHES_IN_FLIGHT))
    agreement = []
    for kind, set_id, role in (("benutil", plan.benutil_set, BENUTIL),
                               ("safety", plan.safety_set, SAFETY)):
        if len(judges(ctx.config, role)) > 1:
            agreement += agreement_rows(ctx.warehouse, set_id, kind)
    if agreement:
        ctx.warehouse.write("judge_agreement", agreement,
                            delete=("list_contains(?, judgment_set_id)",
                                    [[plan.benutil_set, plan.safety_set]]))
    summary["judgment_sets"] = {"benutil": plan.benutil_set, "safety": plan.safety_set}
    # One population: conversations of queries without a checklist are counted, not judged.
    summary["not_judged_without_checklist"] = {
        "conversations": len(plan.without_checklist),
        "queries": len({q for _, q in plan.without_checklist})}
    summary["agreement"] = [{k: (round(v, 3) if isinstance(v, float) else v)
                             for k, v in r.items() if k != "judgment_set_id"} for r in agreement]
    failure = judge_failure(ctx.warehouse, plan)
    if failure:
        raise StageFailed("judge", failure, summary)
    return summary
