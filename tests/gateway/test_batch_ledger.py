"""Never pay twice: against the strict fakes (tests/support/llm_batch.py, llm_providers.py),
each awkward case leaves the fake's ledger of billed lines equal to a clean run's (every
request billed once, whether its batch or a live retry answered it), and the recorded cost
(``llm_calls.cost_usd``) equals the fake's bill at the entries' ``price:`` rates.

The awkward cases: a batch reported ended before its results are attached, a results download
that redirects to another origin, a create that times out after the provider accepted it (in
the same run, and after the process died with the create out), a create refused for a queue
or enqueued-token limit, a cancelled batch with partial results, and, for Anthropic (whose
batches echo nothing of the caller's until they end), another batch of the same size made
by someone else while the create was out."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from tasks.config import PriceEntry
from tasks.gateway.batch import BatchCall, BatchClient
from tests.support.batch import (  # noqa: F401  (home: a fixture)
    PROVIDERS, ROLE, Verdict, calls_for, creates, die_when, gateway, home, provider_spec, run_batch,
)

RATES = {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3,
         "batch_discount": 0.5}
every = pytest.mark.parametrize("provider", list(PROVIDERS))


def priced(server, provider, **over):
    """The provider's judge entry with ``price:`` set, and the fake told the same rates."""
    spec = provider_spec(server, provider, price=PriceEntry(**RATES), **over)
    server.prices[spec.model.split("/", 1)[1]] = dict(RATES)
    return spec


def billed_keys(server, exclude=()) -> Counter:
    return Counter(e["key"] for e in server.ledger if e["batch_id"] not in exclude)


def clean_run(server, tmp, provider, n=5) -> Counter:
    """The ledger of a run without faults (its own home, its own cache); then the server's
    counts and ledger start again."""
    from warehouse import Warehouse

    wh = Warehouse(tmp / "clean" / "warehouse.duckdb").init()
    got = run_batch(gateway(tmp / "clean"), wh, calls_for(priced(server, provider), n=n))
    assert all(r.ok and r.batch_id for r in got)
    ledger = billed_keys(server)
    assert set(ledger.values()) == {1} and len(ledger) == n - 1  # 4 distinct requests
    server.reset()
    return ledger


def recorded_cost(gw) -> float:
    return sum(r["cost_usd"] for r in gw.drain_records())


def assert_paid_once(server, gw, clean: Counter, exclude=()):
    assert billed_keys(server, exclude) == clean
    bill = sum(e["cost"] for e in server.ledger if e["batch_id"] not in exclude)
    assert bill > 0 and recorded_cost(gw) == pytest.approx(bill, rel=1e-9)


def faulty_run(server, home, provider, faults: dict, **over):
    """A clean run's ledger, then the same calls (its own cache) with ``faults`` set on the
    server's batch faults and ``over`` on the entry: ``(gateway, results, clean ledger)``."""
    tmp, wh = home
    clean = clean_run(server, tmp, provider)
    for name, value in faults.items():
        setattr(server.batch_faults, name, value)
    gw = gateway(tmp)
    return gw, run_batch(gw, wh, calls_for(priced(server, provider, **over))), clean


def answered_in_batches(server, got) -> bool:
    return all(r.ok and r.batch_id for r in got) and server.counts[ROLE] == 0


@every
def test_a_batch_reported_ended_before_its_results_are_attached_is_polled_until_they_are(
        llm_server, home, provider):
    # Three polls say it ended with nothing to read yet.
    gw, got, clean = faulty_run(llm_server, home, provider, {"results_late": 3})
    assert answered_in_batches(llm_server, got)
    assert llm_server.counts[PROVIDERS[provider][3]] >= 5  # 1 running + ended + 3 late
    assert_paid_once(llm_server, gw, clean)
    gw.close()


@every
def test_a_results_download_that_redirects_is_followed_without_the_key(llm_server, home,
                                                                       provider, monkeypatch):
    monkeypatch.setenv("CARRYON_TEST_KEY", "sk-test-REDIRECT-99")
    gw, got, clean = faulty_run(llm_server, home, provider,
                                {"redirect": True, "as_file": provider == "gemini"},
                                api_key_env="CARRYON_TEST_KEY")  # Gemini: a responses file
    assert answered_in_batches(llm_server, got)
    assert llm_server.counts["GET /_redirected"] >= 1
    assert llm_server.redirect_keys == set()  # the key stayed with its origin
    assert_paid_once(llm_server, gw, clean)
    gw.close()


@every
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_a_create_that_times_out_after_it_was_accepted_is_found_not_paid_again(
        llm_server, home, provider):
    gw, got, clean = faulty_run(llm_server, home, provider,
                                {"create_timeouts": 1, "create_delay_s": 2.0}, timeout_s=0.5)
    assert answered_in_batches(llm_server, got)
    assert creates(llm_server, provider) == 1  # found by its tag, never submitted again
    (row,) = home[1].query("SELECT status, consumed, client_id FROM llm_batches")
    assert row["consumed"] and row["client_id"].startswith("cob")
    assert_paid_once(llm_server, gw, clean)
    gw.close()


@every
def test_a_process_killed_with_its_create_out_looks_the_batch_up_on_the_rerun(llm_server, home,
                                                                             provider):
    tmp, wh = home
    clean = clean_run(llm_server, tmp, provider)
    f = llm_server.batch_faults
    f.create_timeouts, f.create_delay_s = 1, 3.0  # the process dies long before
    calls = calls_for(priced(llm_server, provider))
    batches = llm_server.batch.batches if provider == "openai" else llm_server.providers.batches
    before = len(batches)  # the clean run's
    g1 = gateway(tmp)  # killed once the provider has accepted it, its answer not back
    asyncio.run(die_when(g1, wh, calls, lambda: len(batches) > before))
    g1.close()
    assert wh.query("SELECT status FROM llm_batches") == [{"status": "submitting"}]  # the intent
    g2 = gateway(tmp, run_id="run-2")
    got = run_batch(g2, wh, calls)
    assert answered_in_batches(llm_server, got) and creates(llm_server, provider) == 1
    assert wh.query("SELECT status, consumed FROM llm_batches") == [{"status": "completed",
                                                                     "consumed": True}]
    assert_paid_once(llm_server, g2, clean)
    g2.close()


@every
@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_a_create_refused_for_a_queue_limit_waits_and_is_submitted_again(llm_server, home,
                                                                        provider):
    gw, got, clean = faulty_run(llm_server, home, provider, {"queue_full": 2})
    assert answered_in_batches(llm_server, got) and creates(llm_server, provider) == 3
    # OpenAI accepts the create and fails the batch at validation (token_limit_exceeded):
    # those rows stay, consumed, with nothing billed; the others refuse the create itself.
    rows = home[1].query("SELECT status FROM llm_batches ORDER BY submitted")
    assert [r["status"] for r in rows] == (["failed", "failed", "completed"]
                                           if provider == "openai" else ["completed"])
    assert_paid_once(llm_server, gw, clean)
    gw.close()


@every
def test_a_cancelled_batch_with_partial_results_sends_only_the_rest_live(llm_server, home,
                                                                        provider):
    gw, got, clean = faulty_run(llm_server, home, provider, {"outcome": "cancelled", "answered": 2})
    assert all(r.ok for r in got)
    in_batch = sum(e["mode"] == "batch" for e in llm_server.ledger)
    assert in_batch == 2 and llm_server.counts[ROLE] == 2  # the two unanswered, once each, live
    assert_paid_once(llm_server, gw, clean)
    gw.close()


def test_anthropic_tells_its_batch_from_another_of_the_same_size_by_the_results(llm_server, home):
    # Anthropic echoes nothing of the caller's until a batch ends: after an unanswered create,
    # every batch made since with as many requests is a candidate. Someone else's (made while
    # ours was out) is polled too, read, found not ours by its custom ids, and dropped.
    tmp, wh = home
    clean = clean_run(llm_server, tmp, "anthropic")
    f = llm_server.batch_faults
    f.create_timeouts, f.create_delay_s = 1, 2.0
    spec = priced(llm_server, "anthropic", timeout_s=0.5)
    other = {"requests": [{"custom_id": f"other-{i}", "params": {
        "model": "claude-sonnet-4-20250514", "max_tokens": 16,
        "messages": [{"role": "user", "content": f"someone else's {i}"}]}} for i in range(4)]}

    async def go():
        before = len(llm_server.providers.batches)  # the clean run's
        task = asyncio.create_task(BatchClient(gw, wh).run(calls_for(spec)))
        while len(llm_server.providers.batches) == before:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient() as client:  # another process's batch of 4
            r = await client.post(f"{llm_server.anthropic_base}/v1/messages/batches", json=other,
                                  headers={"x-api-key": "other"})
            assert r.status_code == 200
        return await task, r.json()["id"]

    gw = gateway(tmp)
    got, foreign = asyncio.run(go())
    assert all(r.ok and r.batch_id and r.batch_id != foreign for r in got)
    assert llm_server.counts[ROLE] == 0 and creates(llm_server, "anthropic") == 2
    assert [r["batch_id"] for r in wh.query("SELECT batch_id FROM llm_batches")] == \
        [got[0].batch_id]  # the foreign candidate and the intent are gone
    assert_paid_once(llm_server, gw, clean, exclude=(foreign,))
    gw.close()


@pytest.mark.parametrize("model, over", [
    ("openai/gpt-5.2", {"reasoning_effort": "none"}),
    ("openai/gpt-5-mini", {"reasoning_effort": "minimal", "temperature": 1.0}),
    ("anthropic/claude-sonnet-4-5", {}),
    ("anthropic/claude-haiku-4-5", {}),
    ("gemini/gemini-3-flash-preview", {"reasoning_effort": "minimal", "temperature": 1.0}),
])
def test_the_strict_fakes_answer_every_line_of_the_paper_models_in_the_batch(llm_server, home,
                                                                            model, over):
    # The lines the old wires sent (max_tokens to gpt-5.x, output_format without its beta)
    # were refused inside the batch and paid for again live; now every line is answered there.
    tmp, wh = home
    provider = model.split("/")[0]
    base = {"openai": llm_server.api_base, "anthropic": llm_server.anthropic_base,
            "gemini": llm_server.gemini_base}[provider]
    spec = provider_spec(llm_server, provider, model=model, api_base=base, max_tokens=256, **over)
    calls = [BatchCall(spec, ROLE, [{"role": "user", "content": f"q{i}"}], schema=Verdict)
             for i in range(3)]
    gw = gateway(tmp)
    got = run_batch(gw, wh, calls)
    assert all(r.ok and r.batch_id and r.parsed is not None for r in got), [r.error for r in got]
    assert llm_server.counts[ROLE] == 0 and llm_server.counts["refused"] == 0
    gw.close()
