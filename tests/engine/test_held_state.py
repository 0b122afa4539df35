"""What a run holds in memory is set by its batches, not by its size (issue 55): the gateway
keeps only the provenance rows not yet drained (the run's writer merges a later row into the
stored one), and the stages write each batch's rows as it ends, with a bounded number of
batches in flight."""

from __future__ import annotations

import asyncio

import pytest

from tasks.engine.run import merged_calls
from tasks.gateway import Gateway
from tests.support.gateway import msgs, spec_for
from warehouse import Warehouse


def _row(h: str, run: str = "r1", hit: bool = False, attempts: int = 1, tokens: int = 10,
         cost: float = 0.5, latency: float = 1.0, error: str | None = None,
         batch: str | None = None) -> dict:
    return {"run_id": run, "call_hash": h, "role": "judge", "model": "m", "cache_hit": hit,
            "attempts": attempts, "prompt_tokens": tokens, "completion_tokens": 2 * tokens,
            "cost_usd": cost, "latency_s": latency, "reasoning_tokens": 0, "cached_tokens": 0,
            "error": error, "batch_id": batch}


def test_drained_rows_merge_into_the_stored_ones_of_the_run(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb").init()
    wh.write("llm_calls", [
        _row("a", attempts=3, tokens=10, cost=0.5, latency=1.0, error="timeout: slow",
             batch="b1"),                                 # failed real request
        _row("b", attempts=1, tokens=7),                  # answered real request
        _row("c", hit=True, attempts=0, tokens=4, cost=0.0, latency=0.0),  # a hit
        _row("a", run="r0", attempts=9),                  # another run's row: never merged
    ])
    drained = [
        _row("a", attempts=1, tokens=5, cost=0.25, latency=0.5),  # its retry, answered
        _row("b", hit=True, attempts=0, tokens=7, cost=0.0, latency=0.0),  # a later hit
        _row("c", attempts=2, tokens=4, cost=0.125, latency=0.25),  # a real request after a hit
        _row("d", hit=True, attempts=0, tokens=1, cost=0.0, latency=0.0),  # new to the run
    ]
    rows = {r["call_hash"]: r for r in merged_calls(wh, "r1", drained)}
    # a: the two real requests add up (3 + 1 attempts, 10 + 5 tokens, 0.5 + 0.25 USD,
    # 1.0 + 0.5 s); the retry's error (none) and the first batch id stand.
    a = rows["a"]
    assert (a["attempts"], a["prompt_tokens"], a["completion_tokens"]) == (4, 15, 30)
    assert (a["cost_usd"], a["latency_s"], a["error"], a["batch_id"]) == (0.75, 1.5, None, "b1")
    assert "b" not in rows  # the hit adds nothing to the stored real request
    assert rows["c"] == drained[2] and rows["d"] == drained[3]  # replaces a hit; new as is
    wh.write("llm_calls", list(rows.values()))
    stored = {r["call_hash"]: r for r in wh.query("SELECT * FROM llm_calls WHERE run_id = 'r1'")}
    assert stored["b"]["cache_hit"] is False and stored["b"]["attempts"] == 1
    assert wh.query("SELECT attempts FROM llm_calls WHERE run_id = 'r0'") == [{"attempts": 9}]


def test_gateway_holds_no_state_per_call_after_a_drain(llm_server, tmp_path):
    gw = Gateway(tmp_path / "cache", "r1")
    spec = spec_for(llm_server)
    n = 40

    async def calls():
        await asyncio.gather(*(gw.chat(spec, "t", msgs(f"q{i}"))
                               for i in range(n)))

    asyncio.run(calls())
    assert len(gw.drain_records()) == n
    # Every container the gateway keeps is the size of its models, roles and loops, never of
    # the calls it made (before issue 55 it kept one entry per call hash for the whole run).
    sizes = {k: len(v) for k, v in vars(gw).items() if isinstance(v, (dict, list, set))}
    assert max(sizes.values()) < 10, sizes
    gw.close()


@pytest.mark.e2e
def test_stages_write_each_batch_as_it_ends(prefect_harness, llm_server, write_config, tmp_path,
                                            monkeypatch):
    """Every stage runs no more batches at once than its bound, whatever the number of items
    (the prepare stages too), and the episodes and verdicts stages write a batch's rows when
    it ends: a later batch finds them stored."""
    import flows.checklists
    import flows.episodes
    import flows.verdicts
    import tasks.benchmarks.carryon.subflows as intents
    from flows.carryon import carryon

    watched = {  # stage: (module, its batch function, its batch-size constant, table written)
        "intents": (intents, "ensure_intents", "BATCH_QUERIES", None),
        "checklists": (flows.checklists, "build_batch", "BATCH_ITEMS", None),
        "episodes": (flows.episodes, "play_batch", "BATCH_EPISODES", "episodes"),
        "verdicts": (flows.verdicts, "judge_batch", "BATCH_EPISODES", "verdicts"),
    }
    seen = {stage: [] for stage in watched}
    live = dict.fromkeys(watched, 0)

    def watch(stage: str, fn, table: str | None):
        async def wrapper(ctx, *args):
            live[stage] += 1
            seen[stage].append((ctx.warehouse.count(table) if table else None, live[stage]))
            try:
                return await fn(ctx, *args)
            finally:
                live[stage] -= 1
        return wrapper

    for stage, (mod, fn, size, table) in watched.items():
        monkeypatch.setattr(mod, size, 1)  # one item (episode) a batch: a batch per item
        monkeypatch.setattr(mod, "BATCHES_IN_FLIGHT", 2)
        monkeypatch.setattr(mod, fn, watch(stage, getattr(mod, fn), table))
    path = write_config(dataset={"source": "sample", "path": None, "limit": 4})
    asyncio.run(carryon(config=str(path), stages="intents,checklists,episodes,verdicts"))
    for stage, starts in seen.items():
        assert len(starts) >= 4, (stage, starts)  # several batches
        assert max(n for _, n in starts) <= 2, (stage, starts)  # never more than the bound
        if watched[stage][3]:  # batches after the first two found earlier ones' rows stored
            assert all(stored > 0 for stored, _ in starts[2:]), (stage, starts)
