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

from tasks.data import run_queries
from tasks.move_checker import CHECKER_ROLE
from tasks.engine.stage import run_batches
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
    ready, skipped, skipped_by_step = select_checklisted(ctx.warehouse, queries)
    before = _stats(ctx.gateway)
    per_query = len(flows_for(cfg, "any")) + 1  # flows + oracle (the count is the same per query)
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
    failure = failure_line(ctx.warehouse, queries, ready, skipped, by_status,
                           [q["query_id"] for q in ready], [t.name for t in targets])
    if failure:
        raise StageFailed("simulate", failure, summary)
    return summary


NO_CHECKLIST_YET = "no checklist yet: run the checklists stage"


def select_checklisted(wh, queries) -> tuple[list[dict], dict[str, str], dict[str, int]]:
    """The queries that enter simulation: those with a current checklist (a ``checklists``
    row), with the benign intent their checklist was built from. Returns (ready, skipped,
    skipped_by_step): ``skipped`` maps each other query to its reason, "no checklist: <step>:
    <reason>" from ``checklist_queries``, or NO_CHECKLIST_YET; ``skipped_by_step`` counts them
    by step ("not built" for the latter)."""
    ids = [q.query_id for q in queries]
    if not ids:
        return [], {}, {}
    rows = wh.query(
        "SELECT q.query_id, i.intent, i.oracle_prompt, cq.step, cq.reason, "
        "EXISTS (SELECT 1 FROM checklists c WHERE c.query_id = q.query_id) AS has_checklist "
        "FROM (SELECT unnest(?::VARCHAR[]) AS query_id) q "
        "LEFT JOIN intents i USING (query_id) LEFT JOIN checklist_queries cq USING (query_id)", [ids])
    by_id = {r["query_id"]: r for r in rows}
    ready, skipped, by_step = [], {}, {}
    for q in queries:
        r = by_id.get(q.query_id) or {}
        if r.get("has_checklist") and r.get("intent") is not None:
            ready.append({"query_id": q.query_id, "query": q.query, "intent": r["intent"],
                          "oracle_prompt": r["oracle_prompt"]})
            continue
        if r.get("step"):
            step, reason = r["step"], f"no checklist: {r['step']}: {r['reason']}"
        elif r.get("has_checklist"):  # a checklist whose intent was lost by a later rewrite
            step, reason = "intent", "no checklist: intent: no benign intent stored"
        else:
            step, reason = "not built", NO_CHECKLIST_YET
        skipped[q.query_id] = reason
        by_step[step] = by_step.get(step, 0) + 1
    return ready, skipped, by_step


def failure_line(wh, queries, ready, skipped: dict, by_status: dict, query_ids: list[str],
                 targets: list[str]) -> str | None:
    """Why the stage failed: it had queries but every one lacked its checklist because the
    checklist stage's calls failed (the reasons are call errors), or it ran conversations and
    none completed because their calls failed (target_error, simulator_error,
    context_exceeded). None otherwise: queries skipped by a content decision (a guard verdict,
    the misuse filter) or not built yet leave the stage with nothing to do, not failed."""
    if queries and not ready:
        reasons = [(r or "").removeprefix("no checklist: ").replace("no benign intent: ", "", 1)
                   for r in skipped.values()]
        return all_failed(len(queries), 0, reasons, every(len(queries), "query", "queries") + " skipped")
    n = sum(by_status.values())
    # Conversations the move checker excluded ran to their end: that is not a call failure.
    if not n or by_status.get("completed", 0) or by_status.get("move_check_failed", 0):
        return None
    rows = wh.query("SELECT status, error FROM conversations WHERE list_contains(?, query_id) "
                    "AND list_contains(?, target) AND status <> 'completed'", [query_ids, targets])
    return all_failed(n, 0, [f"{r['status']}: {r['error']}" for r in rows],
                      every(n, "conversation", "conversations") + " failed")
