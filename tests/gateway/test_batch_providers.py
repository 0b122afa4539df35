"""The batch path (tasks/gateway/batch.py) through each provider's batch API on the loopback
server: OpenAI's (tests/support/llm_batch.py), Anthropic's Message Batches and the Gemini API's batch
mode (tests/support/llm_providers.py). For each: the live answers and cache entries, request lines
that are the live request, nothing paid twice after a kill, and the faults (an expired batch,
a cancelled one, failed lines, a refused submit, a failed poll, results in another order, lost
results) retried live once."""

from __future__ import annotations

import asyncio
import json

import pytest

from tasks.gateway.batch import BatchClient
from tasks.gateway.batch_wire import WIRES, Limits, batch_route
from tests.support.batch import (  # noqa: F401  (home: a fixture)
    PROVIDERS, ROLE, Verdict, calls_for, creates, die_when, gateway, home, run_batch, run_live,
)
from tests.support.batch import provider_spec as spec_for


# OpenAI's wire is also covered by tests/gateway/test_batch_api.py (same answers, faults): here it runs
# only the checks that file lacks (results in another order, caps, polls that keep failing).
every = pytest.mark.parametrize("provider", list(PROVIDERS))
native = pytest.mark.parametrize("provider", ["anthropic", "gemini"])


@native
def test_batch_gives_the_live_answers_and_sends_the_live_request(llm_server, home, provider):
    tmp, wh = home
    calls = calls_for(spec_for(llm_server, provider))
    gb = gateway(tmp, "cache-batch")
    got = run_batch(gb, wh, calls)
    assert creates(llm_server, provider) == 1
    assert llm_server.counts["batch_lines"] == 4 and llm_server.counts[ROLE] == 0
    lv = gateway(tmp, "cache-live")
    want = run_live(lv, calls)
    assert llm_server.counts[ROLE] == 4
    assert all(r.ok for r in got) and [r.content for r in got] == [r.content for r in want]
    assert got[0].parsed is not None and got[0].parsed == want[0].parsed
    assert [r.call_hash for r in got] == [r.call_hash for r in want]  # one cache for both
    for r in got:
        b, w = gb.cache.get(r.call_hash), lv.cache.get(r.call_hash)
        assert (b["content"], b["prompt_tokens"], b["completion_tokens"]) == \
            (w["content"], w["prompt_tokens"], w["completion_tokens"])
    # Each request line is the body the live call sent.
    sent = llm_server.providers.submitted[0]
    lines = ([x["params"] for x in sent["requests"]] if provider == "anthropic" else
             [x["request"] for x in sent["batch"]["inputConfig"]["requests"]["requests"]])
    live = [q["body"] for q in llm_server.requests]
    assert sorted(json.dumps(x, sort_keys=True) for x in lines) == \
        sorted(json.dumps(x, sort_keys=True) for x in live)
    assert {r["batch_id"] is not None for r in gb.drain_records()} == {True}
    gb.close(), lv.close()


@native
def test_rerun_sends_nothing_and_a_kill_resumes_without_resubmitting(llm_server, home, provider):
    tmp, wh = home
    calls = calls_for(spec_for(llm_server, provider))
    llm_server.batch_faults.delay_polls = 10_000  # the first process never sees it end

    g1 = gateway(tmp)
    asyncio.run(die_when(g1, wh, calls, lambda: wh.query(
        "SELECT 1 FROM llm_batches WHERE status <> 'submitting'")))
    g1.close()
    (row,) = wh.query("SELECT batch_id, consumed FROM llm_batches")
    llm_server.providers.batches[row["batch_id"]]["faults"].delay_polls = 1
    g2 = gateway(tmp, run_id="run-2")
    got = run_batch(g2, wh, calls)
    assert all(r.ok and r.batch_id == row["batch_id"] for r in got)
    assert creates(llm_server, provider) == 1 and llm_server.counts["batch_lines"] == 4
    assert llm_server.counts[ROLE] == 0
    g2.close()
    llm_server.reset()
    g3 = gateway(tmp, run_id="run-3")
    assert all(r.cached for r in run_batch(g3, wh, calls))
    assert llm_server.counts["total"] == 0
    g3.close()


@native
@pytest.mark.parametrize("outcome, answered, fail_lines, in_batch", [
    ("expired", 1, set(), 1),
    ("completed", None, {1, 3}, 2),
    ("cancelled", 0, set(), 0),
])
def test_unanswered_lines_are_retried_live_once(llm_server, home, provider, outcome, answered,
                                                fail_lines, in_batch):
    tmp, wh = home
    f = llm_server.batch_faults
    f.outcome, f.answered, f.fail_lines = outcome, answered, fail_lines
    if provider == "gemini" and outcome == "expired":
        in_batch = 0  # an expired Gemini batch has no results; its answered line is lost
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok for r in got)
    assert llm_server.counts[ROLE] == 4 - min(in_batch, 4)  # each missing line once, live
    (row,) = wh.query("SELECT status, consumed FROM llm_batches")
    assert row == {"status": outcome, "consumed": True}
    rows = gw.drain_records()
    assert {r["attempts"] for r in rows} == {1}
    assert sum(r["batch_id"] is not None for r in rows) == in_batch
    gw.close()


@native
def test_a_refused_submit_sends_the_lines_live(llm_server, home, provider):
    tmp, wh = home
    llm_server.batch_faults.reject = True
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is None for r in got)
    assert creates(llm_server, provider) == 1 and llm_server.counts[ROLE] == 4
    assert wh.query("SELECT * FROM llm_batches") == []
    gw.close()


@native
def test_a_failed_poll_is_polled_again(llm_server, home, provider):
    tmp, wh = home
    llm_server.batch_faults.poll_errors = 1  # max_retries=1: one failed poll is tolerated
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is not None for r in got)
    assert llm_server.counts[PROVIDERS[provider][3]] >= 3 and llm_server.counts[ROLE] == 0
    gw.close()


@every
def test_polls_that_keep_failing_never_send_a_running_batchs_lines_live(llm_server, home, provider):
    # Transient poll errors (5xx) beyond max_retries: the batch may still run and bill, so it
    # is polled until it ends and its answers are used; nothing goes live.
    tmp, wh = home
    llm_server.batch_faults.poll_errors = 3  # more than max_retries=1 in a row
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is not None for r in got) and llm_server.counts[ROLE] == 0
    assert wh.query("SELECT consumed FROM llm_batches") == [{"consumed": True}]
    gw.close()


@every
def test_a_batch_that_cannot_be_polled_stops_the_run_and_is_polled_by_the_rerun(llm_server, home,
                                                                                provider):
    # A permanent poll error (the provider says 404 for a batch it accepted): its lines are not
    # sent live while it may still run; the row stays for a rerun, which reads its answers.
    from tasks.gateway.batch import BatchUnreachable

    tmp, wh = home
    llm_server.batch_faults.poll_not_found = 2  # two in a row: past max_retries=1
    gw = gateway(tmp)
    with pytest.raises(BatchUnreachable, match="cannot be polled"):
        run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert llm_server.counts[ROLE] == 0
    assert wh.query("SELECT consumed FROM llm_batches") == [{"consumed": False}]
    gw.close()
    g2 = gateway(tmp, run_id="run-2")
    got = run_batch(g2, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is not None for r in got) and llm_server.counts[ROLE] == 0
    assert creates(llm_server, provider) == 1
    g2.close()


@every
def test_results_in_another_order_go_to_their_own_calls(llm_server, home, provider):
    tmp, wh = home
    calls = calls_for(spec_for(llm_server, provider))
    want = run_live(gateway(tmp, "cache-live"), calls)
    llm_server.batch_faults.shuffle = True
    got = run_batch(gateway(tmp, "cache-batch"), wh, calls)
    assert [r.content for r in got] == [r.content for r in want]
    assert all(r.batch_id is not None for r in got)


@native
def test_lost_results_send_the_lines_live_and_keep_the_batch(llm_server, home, provider):
    tmp, wh = home
    llm_server.batch_faults.lose_results = True  # a 404 on the results (Anthropic: past 29 days)
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is None for r in got) and llm_server.counts[ROLE] == 4
    assert wh.query("SELECT status, consumed FROM llm_batches") == [{"status": "completed",
                                                                     "consumed": False}]
    gw.close()


@every
@pytest.mark.parametrize("errors, live", [(1, 0), (99, 4)])
def test_results_that_fail_to_download_are_read_again_then_sent_live(llm_server, home, provider,
                                                                     errors, live):
    # A transient error reading an ended batch's results: read again (each poll succeeds in
    # between, which must not reset the count); past max_retries=1 its lines go live.
    tmp, wh = home
    llm_server.batch_faults.results_errors = errors
    llm_server.batch_faults.as_file = provider == "gemini"
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok for r in got) and llm_server.counts[ROLE] == live
    assert wh.query("SELECT consumed FROM llm_batches") == [{"consumed": not live}]
    gw.close()


def test_gemini_results_from_a_responses_file(llm_server, home):
    tmp, wh = home
    llm_server.batch_faults.as_file = True
    llm_server.batch_faults.fail_lines = {2}
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, "gemini")))
    assert all(r.ok for r in got)
    assert llm_server.counts["GET /download/v1beta/files"] == 1 and llm_server.counts[ROLE] == 1
    gw.close()


@native
def test_provider_cached_tokens_are_recorded_and_billed_at_the_batch_price(llm_server, home, provider):
    from tasks.config import PriceEntry
    from tasks.gateway.prices import billed

    tmp, wh = home
    llm_server.batch_faults.cached_tokens = 3
    spec = spec_for(llm_server, provider, price=PriceEntry(
        input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5))
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec, n=2))
    for r in got:
        assert r.cached_tokens == 3 and r.prompt_tokens > 3
        assert r.cost_usd == pytest.approx(billed(spec, r.prompt_tokens, r.completion_tokens, 3,
                                                  batch=True))
        # Half the fresh tokens' live price; the cached ones at half the cached rate where the
        # discounts stack (Anthropic), at the live cached rate on Gemini (docs/costs.md).
        fresh = ((r.prompt_tokens - 3) * 2.0 + r.completion_tokens * 8.0) / 1e6
        reused = 3 * 0.5 / 1e6 * (0.5 if provider == "anthropic" else 1.0)
        assert r.cost_usd == pytest.approx(0.5 * fresh + reused)
    gw.close()


@every
def test_a_stage_over_the_providers_caps_is_split(llm_server, home, provider, monkeypatch):
    tmp, wh = home
    wire = WIRES[provider]
    one = len(json.dumps(wire.line("cob0123456789abcdef-0", wire.request(*gateway(tmp, "k")._request_kwargs(
        spec_for(llm_server, provider), ROLE, [{"role": "user", "content": "question 0"}], Verdict)))))
    # room for two lines by bytes (and at most three by count): 4 lines -> 2 batches
    monkeypatch.setattr(wire, "limits", Limits(lines=3, bytes=2 * one + 40))
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok and r.batch_id is not None for r in got)
    assert creates(llm_server, provider) == 2 and llm_server.counts[ROLE] == 0
    assert sorted(r["n_lines"] for r in wh.query("SELECT n_lines FROM llm_batches")) == [2, 2]
    gw.close()


def test_batch_routes_say_which_providers_have_a_batch_path():
    assert batch_route("openai/gpt-4o")[0] == "openai" and batch_route("gpt-4o")[0] == "openai"
    assert batch_route("anthropic/claude-sonnet-4")[0] == "anthropic"
    assert batch_route("gemini/gemini-2.5-flash")[0] == "gemini"
    route, why = batch_route("vertex_ai/gemini-2.5-flash")
    assert route is None and "Cloud Storage" in why
    assert batch_route("together_ai/x/y")[0] is None


@native
def test_the_key_travels_in_a_header_and_nowhere_else(llm_server, home, provider, monkeypatch,
                                                      caplog):
    tmp, wh = home
    secret = "sk-test-SECRET-4242"
    monkeypatch.setenv("CARRYON_TEST_KEY", secret)
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider, api_key_env="CARRYON_TEST_KEY")))
    assert all(r.ok and r.batch_id for r in got)
    assert llm_server.providers.keys_seen == {secret}
    rows = wh.query("SELECT * FROM llm_batches") + gw.drain_records()
    assert secret not in json.dumps(rows, default=str) and secret not in caplog.text
    gw.close()


@native
def test_an_unreadable_answer_sends_only_its_line_live(llm_server, home, provider, monkeypatch):
    tmp, wh = home
    wire, real = WIRES[provider], WIRES[provider].answer
    seen = []

    def answer(kwargs, messages, raw):  # the second answer read cannot be parsed
        seen.append(1)
        if len(seen) == 2:
            raise ValueError("garbled")
        return real(kwargs, messages, raw)

    monkeypatch.setattr(wire, "answer", answer)
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec_for(llm_server, provider)))
    assert all(r.ok for r in got) and llm_server.counts[ROLE] == 1
    assert wh.query("SELECT consumed FROM llm_batches") == [{"consumed": True}]
    gw.close()


def test_a_line_the_adapter_cannot_build_goes_live_and_fails_as_data(llm_server, home):
    # Anthropic's adapter refuses a parameter it does not support (drop_params is off): the
    # line is not submitted, it is called live, where it fails the same way, recorded.
    tmp, wh = home
    spec = spec_for(llm_server, "anthropic", seed=7)
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls_for(spec, n=2))
    assert all(not r.ok and r.error_kind for r in got)
    assert creates(llm_server, "anthropic") == 0
    gw.close()
