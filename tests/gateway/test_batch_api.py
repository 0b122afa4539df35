"""The provider batch path (tasks/gateway/batch.py) against the loopback server's OpenAI batch
API (tests/support/llm_batch.py): same answers and cache entries as live calls, nothing sent twice,
resume after a killed process, expired / partly failed / cancelled batches retried live once,
cached prompt tokens recorded."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from tasks.config import load_config
from tasks.gateway import Gateway
from tasks.gateway.batch import BatchCall, BatchClient
from tests.support.batch import (  # home: conftest.py
    ROLE, Verdict, calls_for, die_when, gateway, run_batch, run_live, spec_for,
)
from tests.support.llm_server import answer


def batch_lines_sent(server) -> list[dict]:
    """Every request line of every uploaded batch input file."""
    out = []
    for f in server.batch.files.values():
        if f["purpose"] == "batch":
            out += [json.loads(x) for x in f["bytes"].decode().splitlines() if x.strip()]
    return out


def test_batch_gives_the_live_answers_and_cache_entries(llm_server, home):
    tmp, wh = home
    spec = spec_for(llm_server, batch_size=2)
    calls = calls_for(spec)
    gb = gateway(tmp, "cache-batch")
    got = run_batch(gb, wh, calls)
    # 5 calls, 4 distinct requests, 2 per batch: 2 batches, 4 lines, no live request.
    assert llm_server.counts["POST /v1/batches"] == 2
    assert llm_server.counts["POST /v1/files"] == 2
    assert llm_server.counts["batch_lines"] == 4 and llm_server.counts[ROLE] == 0
    live_gw = gateway(tmp, "cache-live")
    want = run_live(live_gw, calls)
    assert llm_server.counts[ROLE] == 4  # the live run's 4 distinct requests
    assert all(r.ok for r in got) and [r.content for r in got] == [r.content for r in want]
    assert [r.parsed for r in got] == [r.parsed for r in want]
    assert got[0].parsed is not None and got[1].parsed is None and got[4].content == got[0].content
    # Same keys, same entries (content and tokens) in both caches.
    assert [r.call_hash for r in got] == [r.call_hash for r in want]
    fields = ("content", "prompt_tokens", "completion_tokens", "reasoning_tokens", "role", "model")
    for r in got:
        b, w = gb.cache.get(r.call_hash), live_gw.cache.get(r.call_hash)
        assert {k: b[k] for k in fields} == {k: w[k] for k in fields}
    # Each batch line carries exactly the body the live path sent.
    live_bodies = sorted(json.dumps(q["body"], sort_keys=True) for q in llm_server.requests)
    batch_bodies = sorted(json.dumps(x["body"], sort_keys=True) for x in batch_lines_sent(llm_server))
    assert batch_bodies == live_bodies
    # Provenance: one row per distinct call, attempts 1, the batch that answered it (ids in
    # upload order: file-0001, batch-0002, file-0003, batch-0004); the
    # warehouse keeps both batches as consumed.
    rows = gb.drain_records()
    assert len(rows) == 4 and {r["attempts"] for r in rows} == {1}
    assert {r["batch_id"] for r in rows} == {"batch-0002", "batch-0004"}
    stored = wh.query("SELECT batch_id, n_lines, status, consumed FROM llm_batches ORDER BY batch_id")
    assert stored == [{"batch_id": "batch-0002", "n_lines": 2, "status": "completed", "consumed": True},
                      {"batch_id": "batch-0004", "n_lines": 2, "status": "completed", "consumed": True}]
    gb.close(), live_gw.close()


def test_second_batch_run_sends_nothing(llm_server, home):
    tmp, wh = home
    calls = calls_for(spec_for(llm_server))
    g1 = gateway(tmp)
    first = run_batch(g1, wh, calls)
    # The progress heartbeat says what the batches did.
    assert g1.activity().endswith("; batches: 1 submitted, 0 resumed, 1 done, 0 pending "
                                  "(0 calls waiting)")
    g1.close()
    llm_server.reset()
    g2 = gateway(tmp, run_id="run-2")
    again = run_batch(g2, wh, calls)
    assert llm_server.counts["total"] == 0  # no file, no batch, no poll, no live call
    assert all(r.cached for r in again) and [r.content for r in again] == [r.content for r in first]
    assert {r["cache_hit"] for r in g2.drain_records()} == {True}
    g2.close()


def test_killed_after_submit_resumes_polling_and_never_resubmits(llm_server, home):
    tmp, wh = home
    calls = calls_for(spec_for(llm_server))
    llm_server.batch_faults.delay_polls = 10_000  # the first process never sees it end

    g1 = gateway(tmp)  # killed while it polls
    asyncio.run(die_when(g1, wh, calls, lambda: wh.query(
        "SELECT 1 FROM llm_batches WHERE status <> 'submitting'")))
    g1.close()
    (row,) = wh.query("SELECT batch_id, consumed FROM llm_batches")
    assert row == {"batch_id": "batch-0002", "consumed": False}
    llm_server.batch.batches["batch-0002"]["_faults"].delay_polls = 1  # the provider gets to it
    g2 = gateway(tmp, run_id="run-2")
    got = run_batch(g2, wh, calls)
    assert "batches: 0 submitted, 1 resumed, 1 done, 0 pending" in g2.activity()
    assert llm_server.counts["POST /v1/batches"] == 1 and llm_server.counts["POST /v1/files"] == 1
    assert llm_server.counts["batch_lines"] == 4 and llm_server.counts[ROLE] == 0
    assert all(r.ok and r.batch_id == "batch-0002" for r in got)
    assert wh.query("SELECT consumed FROM llm_batches") == [{"consumed": True}]
    g2.close()


@pytest.mark.parametrize("outcome, answered, fail_lines, in_batch", [
    ("expired", 1, set(), 1),       # 1 of 4 lines answered before the window ran out
    ("completed", None, {1, 3}, 2),  # lines 1 and 3 failed inside the batch
    ("cancelled", 0, set(), 0),     # cancelled before any line was answered
])
def test_unanswered_lines_are_retried_live_once(llm_server, home, outcome, answered, fail_lines,
                                                in_batch):
    tmp, wh = home
    f = llm_server.batch_faults
    f.outcome, f.answered, f.fail_lines = outcome, answered, fail_lines
    calls = calls_for(spec_for(llm_server))
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls)
    assert all(r.ok for r in got)
    assert llm_server.counts["POST /v1/batches"] == 1
    assert llm_server.counts["batch_lines"] == in_batch
    assert llm_server.counts[ROLE] == 4 - in_batch  # each missing line once, live
    rows = gw.drain_records()
    assert sorted(r["batch_id"] is None for r in rows) == [False] * in_batch + [True] * (4 - in_batch)
    assert {r["attempts"] for r in rows} == {1}
    (row,) = wh.query("SELECT status, consumed FROM llm_batches")
    assert row == {"status": outcome, "consumed": True}
    gw.close()


def test_lines_that_still_fail_live_are_failures_as_data(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.outcome, llm_server.batch_faults.answered = "cancelled", 0
    llm_server.faults.error500 = 1.0  # the live retries fail too
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server)))
    assert [r.error_kind for r in got] == ["retries_exhausted"] * 5
    # 4 distinct lines retried live once each: 1 request + max_retries=1 retry = 8 requests.
    assert llm_server.counts[ROLE] == 8 and llm_server.counts["batch_lines"] == 0
    assert all(gw.cache.get(r.call_hash) is None for r in got)
    gw.close()


def test_an_invalid_batch_answer_is_reasked_live(llm_server, home):
    tmp, wh = home
    seen = []

    def script(body):  # the first answer to each question is not valid JSON for the schema
        q = body["messages"][0]["content"]
        seen.append(q)
        return '{"nope": 1}' if seen.count(q) == 1 else json.dumps({"fulfilled": True, "evidence": ""})

    llm_server.scripts[ROLE] = script
    gw = gateway(tmp)
    (r,) = run_batch(gw, wh, [BatchCall(spec_for(llm_server), ROLE,
                                        [{"role": "user", "content": "q"}], schema=Verdict)])
    assert r.ok and r.parsed == Verdict(fulfilled=True, evidence="")
    assert llm_server.counts["batch_lines"] == 1 and llm_server.counts[ROLE] == 1
    (row,) = gw.drain_records()
    assert row["attempts"] == 2 and row["error"] is None  # the batch line + the live retry
    gw.close()


def test_cached_tokens_are_recorded_for_batch_and_live_calls(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.cached_tokens = 7
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server), n=2))
    assert [r.cached_tokens for r in got] == [7, 7]
    llm_server.scripts["t"] = lambda body: answer("a live answer with a cached prefix", cached_tokens=5)
    live = asyncio.run(gw.chat(spec_for(llm_server, batch=False), "t", [{"role": "user", "content": "x"}]))
    assert live.cached_tokens == 5 and live.batch_id is None
    wh.write("llm_calls", gw.drain_records())
    rows = wh.query("SELECT role, cached_tokens, batch_id FROM llm_calls ORDER BY role, batch_id")
    assert rows == [{"role": ROLE, "cached_tokens": 7, "batch_id": "batch-0002"},
                    {"role": "t", "cached_tokens": 5, "batch_id": None}]
    # A hit reports what the stored answer cost: the cached tokens come back from the cache.
    assert asyncio.run(gw.chat(spec_for(llm_server, batch=False), "t",
                               [{"role": "user", "content": "x"}])).cached_tokens == 5
    gw.close()


def test_models_without_batch_are_called_live(llm_server, home):
    tmp, wh = home
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, batch=False)))
    assert all(r.ok and r.batch_id is None for r in got)
    assert llm_server.counts["POST /v1/batches"] == 0 and llm_server.counts[ROLE] == 4
    gw.close()


def test_batch_settings_parse_and_stay_out_of_hashes_and_keys(tmp_path):
    from tests.support.factories import base_config

    cfg = base_config("http://127.0.0.1:9/v1", tmp_path / "home")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(cfg))
    cfg["models"]["benutil_judge"].update(batch=True, batch_size=50, batch_poll_s=0.5)
    batched = tmp_path / "batched.yaml"
    batched.write_text(yaml.safe_dump(cfg))
    a, b = load_config(plain), load_config(batched)
    sa, sb = a.role_spec("benutil_judge"), b.role_spec("benutil_judge")
    assert (sa.batch, sa.batch_size, sa.batch_poll_s) == (False, 1000, 30.0)
    assert (sb.batch, sb.batch_size, sb.batch_poll_s) == (True, 50, 0.5)
    assert a.config_hash() == b.config_hash()
    assert sa.generation_params() == sb.generation_params()
    msgs = [{"role": "user", "content": "hi"}]
    assert Gateway.chat_key(sa, msgs, Verdict) == Gateway.chat_key(sb, msgs, Verdict)


def test_a_refused_submit_sends_the_lines_live(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.reject = True
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server)))
    assert all(r.ok and r.batch_id is None for r in got)
    assert llm_server.counts["POST /v1/batches"] == 1 and llm_server.counts[ROLE] == 4
    assert wh.query("SELECT * FROM llm_batches") == []  # nothing was submitted, nothing to resume
    gw.close()


def test_failed_polls_are_polled_again(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.poll_errors = 1  # max_retries=1: one failed poll is tolerated
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server)))
    assert all(r.ok and r.batch_id == "batch-0002" for r in got)
    # poll 1: HTTP 500; poll 2: in_progress; poll 3: completed.
    assert llm_server.counts["GET /v1/batches"] == 3 and llm_server.counts[ROLE] == 0
    gw.close()


def test_cached_tokens_are_read_from_openai_and_anthropic_usage():
    from tasks.gateway.transport import _cached_tokens

    assert _cached_tokens({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}) == 4
    assert _cached_tokens({"input_tokens": 10, "cache_read_input_tokens": 9}) == 9  # Anthropic's
    assert _cached_tokens({"prompt_tokens": 10}) == 0 and _cached_tokens(None) == 0


def test_unreadable_results_send_the_lines_live_and_keep_the_batch(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.lose_results = True
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server)))
    assert all(r.ok and r.batch_id is None for r in got)
    assert llm_server.counts[ROLE] == 4  # each line once, live
    # Not consumed: a later run that still misses one of its answers would read it again.
    assert wh.query("SELECT status, consumed FROM llm_batches") == [{"status": "completed",
                                                                     "consumed": False}]
    gw.close()
