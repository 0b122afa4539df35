"""CarryOnBench's stage of its own as a Prefect subflow, named by its stage (stages.py) as
``"module:function"`` like any benchmark's own: flows/ holds only the generic ones.

``intents_flow`` (queries and their benign intents): one Prefect task per batch of queries
(never one per LLM call); inside a batch every call runs concurrently through the gateway,
which enforces the model's limits. Bad input fails before any row is written: the queries
are selected and the role resolved first.

NO_CACHE: the gateway's content-hash cache makes reruns free; Prefect's own cache would key
on pickled inputs and could not see template changes.
"""

from __future__ import annotations

from collections import Counter

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from tasks.benchmarks.carryon.intents import ensure_intents
from tasks.benchmarks.carryon.queries import run_queries
from tasks.engine.progress import Progress
from tasks.engine.run import get_run
from tasks.engine.stage import run_batches
from tasks.engine.stage_errors import StageFailed, all_failed, causes, every, is_transport_error

BATCH_QUERIES = 8
# Batches at once (8 x 8 calls: the default limit of 64 in flight): the stage's held state is
# set by this, not by the number of queries.
BATCHES_IN_FLIGHT = 8


@task(name="intent-batch", cache_policy=NO_CACHE)
async def intent_batch(run_id: str, queries: list) -> list[dict]:
    ctx = get_run(run_id)
    rows = await ensure_intents(ctx, queries)
    return [{"query_id": r.query_id, "basis": r.basis, "error": r.error} for r in rows.values()]


@flow(name="intents")
async def intents_flow(run_id: str) -> dict:
    ctx = get_run(run_id)
    queries = run_queries(ctx)  # DataError here: nothing written yet
    ctx.config.role_spec("intent_rewriter")  # ConfigError here: nothing written yet
    batches = [queries[i:i + BATCH_QUERIES] for i in range(0, len(queries), BATCH_QUERIES)]
    results = await run_batches(ctx, Progress("intents", len(queries), unit="queries"),
                                batches, lambda b: intent_batch(run_id, b),
                                in_flight=BATCHES_IN_FLIGHT)
    done = [r for result in results for r in result]
    failed = [r for r in done if r["error"]]
    stats = {"queries": len(done), "intents": len(done) - len(failed),
             "basis": dict(Counter(r["basis"] for r in done if not r["error"])),
             "failed": len(failed)}
    # Every query's rewrite failed on a call error, or some got no answer at all: the stage
    # fails (what it wrote stays; a rerun retries the calls that failed).
    line = all_failed(len(done), len(done) - len(failed), [r["error"] for r in failed],
                      f"{every(len(done), 'query', 'queries')} got no benign intent")
    unanswered = [r for r in failed if is_transport_error(r["error"].split(":", 1)[0])]
    if not line and unanswered:
        line = (f"{len(unanswered)} of {len(done)} queries got no benign intent because their "
                f"calls failed (a rerun retries them): {causes([r['error'] for r in unanswered])}")
    if line:
        raise StageFailed("intents", line, stats)
    return stats
