"""Stage 1 (queries, benign intents, Ben-Util checklists) as a Prefect subflow.

One Prefect task per batch of queries (never one per LLM call); inside a batch every call runs
concurrently through the gateway, which enforces each model's limits. Batches run
concurrently too. Bad input fails before any row is written: the queries are selected and the
roles resolved first.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.checklists import build_batch, resolve_roles, stage_stats
from tasks.data import run_queries
from tasks.engine.stage import run_batches
from tasks.progress import Progress
from tasks.run import get_run
from tasks.stage_errors import StageFailed, all_failed, every, is_call_error

BATCH_SIZE = 8


# NO_CACHE: the gateway's content-hash cache makes reruns free; Prefect's own cache would key
# on pickled inputs and could not see template changes.
@task(name="checklist-batch", cache_policy=NO_CACHE)
async def checklist_batch(run_id: str, queries: list) -> list[dict]:
    ctx = get_run(run_id)
    return await build_batch(ctx, queries, resolve_roles(ctx.config))


@flow(name="checklists")
async def checklists_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    queries = run_queries(ctx)  # DataError here: nothing written yet
    resolve_roles(ctx.config)  # ConfigError here: nothing written yet
    batches = [queries[i:i + BATCH_SIZE] for i in range(0, len(queries), BATCH_SIZE)]
    results = await run_batches(ctx, Progress("checklists", len(queries), unit="queries"),
                                batches, lambda b: checklist_batch(run_id, b),
                                count=lambda _, result: len(result))
    summaries = [s for result in results for s in result]
    stats = stage_stats(summaries)
    failure = failure_line(ctx.warehouse, summaries)
    if failure:
        raise StageFailed("checklists", failure, stats)
    return stats


def _drop_reason(s: dict, guard_errors: dict[str, str]) -> str | None:
    step, reason = s["step"], s["reason"] or ""
    if step == "intent":
        reason = reason.removeprefix("no benign intent: ")
    elif step == "guard" and s["query_id"] in guard_errors:
        reason = guard_errors[s["query_id"]]  # the guard calls failed: not a verdict
    return f"{step}: {reason}"


def failure_line(wh, summaries: list[dict]) -> str | None:
    """Why the stage failed, when it had queries, built no checklist, and every query was
    dropped by a model/call error (a query dropped by a guard verdict or the misuse filter is
    a content decision, not a failure of the stage). None otherwise."""
    if not summaries or any(s["version"] for s in summaries):
        return None
    guard_ids = [s["query_id"] for s in summaries if s["step"] == "guard"]
    guard_errors: dict[str, str] = {}
    if guard_ids:
        # A query dropped at the guard step lost its answers either to harmful verdicts (data)
        # or to failed guard calls; only the latter, for every dropped answer, is an error.
        rows = wh.query("SELECT query_id, reason FROM guard_verdicts "
                        "WHERE list_contains(?, query_id) AND NOT kept", [guard_ids])
        by_query: dict[str, list[str]] = {}
        for r in rows:
            by_query.setdefault(r["query_id"], []).append(r["reason"] or "")
        guard_errors = {q: rs[0] for q, rs in by_query.items() if rs and all(is_call_error(x) for x in rs)}
    reasons = [_drop_reason(s, guard_errors) for s in summaries]
    return all_failed(len(summaries), 0, reasons, every(len(summaries), "query", "queries") + " dropped")
