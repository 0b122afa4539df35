"""Stage 2 (flows and multi-turn simulation) as a Prefect subflow.

One Prefect task per batch of a few queries (each batch runs every target on them); inside a
batch every conversation runs concurrently through the gateway, which enforces each model's
limits, so several targets proceed side by side within their own limits. Whole
(target, query) slices are written as they finish, so a killed run restarted replays its
completed calls from the cache and re-issues only the rest.
"""

from __future__ import annotations

import asyncio

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.data import run_queries
from tasks.intents import ensure_intents
from tasks.progress import Progress
from tasks.run import get_run
from tasks.simulate import SIMULATOR_ROLE, TARGET_ROLE, SimQuery, flows_for, simulate_batch
from tasks.stage_errors import StageFailed, all_failed, every

BATCH_SIZE = 4  # queries per task; x targets x (flows + oracle) conversations each


# NO_CACHE: the gateway's content-hash cache makes reruns free; Prefect's own cache would key
# on pickled inputs and could not see template changes.
@task(name="simulate-batch", cache_policy=NO_CACHE)
async def simulate_batch_task(run_id: str, queries: list[dict]) -> dict:
    ctx = get_run(run_id)
    return await simulate_batch(ctx, [SimQuery(**q) for q in queries])


def _stats(gw) -> dict:
    return {role: (s.requests, s.hits) for role, s in gw.stats.items()}


@flow(name="simulate")
async def simulate_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    cfg = ctx.config
    # Configuration problems surface here, before any row is written.
    cfg.role_spec(SIMULATOR_ROLE)
    cfg.role_spec(TARGET_ROLE)  # raises ConfigError naming the field when no target is set
    targets = cfg.role_specs(TARGET_ROLE)
    queries = run_queries(ctx)
    intents = await ensure_intents(ctx, queries)
    ready, skipped = [], {}
    for q in queries:
        row = intents.get(q.query_id)
        if row is None:
            skipped[q.query_id] = None
        else:
            ready.append({"query_id": q.query_id, "query": q.query, "intent": row.intent,
                          "oracle_prompt": row.oracle_prompt})
    if skipped:  # the intents table holds the rewriter's error; echo it in the summary
        marks = ", ".join("?" * len(skipped))
        for r in ctx.warehouse.query(f"SELECT query_id, error FROM intents WHERE query_id IN ({marks})",
                                     list(skipped)):
            skipped[r["query_id"]] = f"no benign intent: {r['error']}"
    before = _stats(ctx.gateway)
    per_query = len(flows_for(cfg, "any")) + 1  # flows + oracle (the count is the same per query)
    progress = Progress("simulate", len(ready) * len(targets) * per_query, unit="conversations")
    batches = [ready[i:i + BATCH_SIZE] for i in range(0, len(ready), BATCH_SIZE)]
    by_status: dict[str, int] = {}
    turns = 0
    for done in asyncio.as_completed([simulate_batch_task(run_id, b) for b in batches]):
        result = await done
        for status, n in result["conversations"].items():
            by_status[status] = by_status.get(status, 0) + n
        turns += result["turns"]
        progress.advance(sum(result["conversations"].values()))
    after = _stats(ctx.gateway)
    calls = {role: {"requests": after[role][0] - before.get(role, (0, 0))[0],
                    "cache_hits": after[role][1] - before.get(role, (0, 0))[1]}
             for role in (TARGET_ROLE, SIMULATOR_ROLE) if role in after}
    summary = {"queries": len(ready), "skipped_queries": skipped, "targets": [t.name for t in targets],
               "conversations": by_status, "turns": turns, "calls": calls}
    failure = failure_line(ctx.warehouse, queries, ready, skipped, by_status,
                           [q["query_id"] for q in ready], [t.name for t in targets])
    if failure:
        raise StageFailed("simulate", failure, summary)
    return summary


def failure_line(wh, queries, ready, skipped: dict, by_status: dict, query_ids: list[str],
                 targets: list[str]) -> str | None:
    """Why the stage failed: it had queries but every one lacked its benign intent because
    the rewriter's calls failed, or it ran conversations and none completed because their
    calls failed (target_error, simulator_error, context_exceeded). None otherwise."""
    if queries and not ready:
        reasons = [f"intent: {(r or '').removeprefix('no benign intent: ')}" for r in skipped.values()]
        return all_failed(len(queries), 0, reasons, every(len(queries), "query", "queries") + " skipped")
    n = sum(by_status.values())
    if not n or by_status.get("completed", 0):
        return None
    rows = wh.query("SELECT status, error FROM conversations WHERE list_contains(?, query_id) "
                    "AND list_contains(?, target) AND status <> 'completed'", [query_ids, targets])
    return all_failed(n, 0, [f"{r['status']}: {r['error']}" for r in rows],
                      every(n, "conversation", "conversations") + " failed")
