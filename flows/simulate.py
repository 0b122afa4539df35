"""Stage 2 (flows and multi-turn simulation) as a Prefect subflow.

One Prefect task per batch of a few queries (each batch runs every target on them); inside a
batch every conversation runs concurrently through the gateway, which enforces each model's
limits, so several targets proceed side by side within their own limits. Whole
(target, query) slices are written as they finish, so a killed run restarted replays its
completed calls from the cache and re-issues only the rest.

One population: only queries with a current checklist are simulated (and then judged and
measured), so utility and harm are averages over the same queries. A query without one is
skipped with the step and reason that dropped it at the checklists stage, or "no checklist
yet" when that stage never processed it.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.benchmarks.carryon.queries import run_queries
from tasks.users.move_checker import CHECKER_ROLE
from tasks.engine.stage import run_batches
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.benchmarks.carryon.simulate import SIMULATOR_ROLE, TARGET_ROLE, SimQuery, scripts_for, simulate_batch
from tasks.benchmarks.carryon.simulate_plan import select_checklisted
from tasks.engine.stage_errors import StageFailed, simulate_failure

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
    ready, skipped, skipped_by_step = select_checklisted(ctx.warehouse, queries)
    before = _stats(ctx.gateway)
    per_query = len(scripts_for(cfg, "any")) + 1  # flows + oracle (the count is the same per query)
    progress = Progress("simulate", len(ready) * len(targets) * per_query, unit="conversations")
    batches = [ready[i:i + BATCH_SIZE] for i in range(0, len(ready), BATCH_SIZE)]
    results = await run_batches(ctx, progress, batches, lambda b: simulate_batch_task(run_id, b),
                                count=lambda _, result: sum(result["conversations"].values()))
    by_status: dict[str, int] = {}
    turns = blocked = flagged = 0
    for result in results:
        for status, n in result["conversations"].items():
            by_status[status] = by_status.get(status, 0) + n
        turns += result["turns"]
        blocked += result.get("blocked_turns", 0)
        flagged += result.get("move_check_failed", 0)
    after = _stats(ctx.gateway)
    calls = {role: {"requests": after[role][0] - before.get(role, (0, 0))[0],
                    "cache_hits": after[role][1] - before.get(role, (0, 0))[1]}
             for role in (TARGET_ROLE, SIMULATOR_ROLE, CHECKER_ROLE) if role in after}
    summary = {"queries": len(ready), "skipped_queries": skipped, "skipped_by_step": skipped_by_step,
               "targets": [t.name for t in targets],
               "conversations": by_status, "turns": turns, "blocked_turns": blocked, "calls": calls}
    if cfg.models.move_checker is not None:
        summary["move_check_failed"] = flagged
    failure = simulate_failure(ctx.warehouse, queries, ready, skipped, by_status,
                               [q["query_id"] for q in ready], [t.name for t in targets])
    if failure:
        raise StageFailed("simulate", failure, summary)
    return summary
