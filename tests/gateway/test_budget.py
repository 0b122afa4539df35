"""The spending cap in the gateway (tasks/gateway/budget.py): spent plus held never passes
``budget_usd``; a request or a batch that could pass it is not sent and the run stops as
Ctrl-C does (tasks/ops/interrupt.py ``stop``); the line says what was spent and what is left.

Against the loopback server, with every entry priced at $1 per million prompt tokens and $2
per million completion tokens, so a bound and a bill can be worked by hand: the server counts
one prompt token per 4 characters of the request's messages (JSON), 64 completion tokens at
most (the test entry's max_tokens).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tasks.config import PriceEntry
from tasks.gateway.batch import BatchClient
from tasks.gateway.budget import CHARS_PER_TOKEN_BOUND, Budget, bound, prompt_chars
from tasks.gateway.client import BUDGET_EXIT_CODE
from tasks.ops import interrupt
from tests.support import batch as bsup
from tests.support.gateway import gateway, msgs, spec_for  # noqa: F401 (fixture)
from tests.support.interrupt import fresh_interrupt  # noqa: F401 (fixture)

PRICE = PriceEntry(input_per_mtok=1.0, output_per_mtok=2.0, cached_input_per_mtok=0.5)


@pytest.fixture(autouse=True)
def _fresh(fresh_interrupt):
    yield


def test_budget_holds_settles_and_says_what_is_left():
    b = Budget(10.0, spent_before=4.0)
    assert b.hold(5.0) and b.held == 5.0
    assert not b.hold(1.5) and b.stopped  # 4 + 5 + 1.5 > 10: refused, nothing held
    assert b.held == 5.0
    b.settle(5.0, 3.25)  # the request cost less than its bound
    assert (b.held, b.spent_run, b.spent) == (0.0, 3.25, 7.25)
    assert not b.hold(0.01)  # once stopped, nothing more goes out...
    assert b.hold(2.0, force=True) and b.held == 2.0  # ...but money already committed is held
    line = b.line()
    assert "\n" not in line and line.startswith("budget_usd $10.00: ")
    assert "spent $7.25 (this home's earlier runs $4.00, this run $3.25), $2.75 left" in line


def test_a_requests_bound_is_its_prompt_at_3_characters_a_token_and_its_whole_max_tokens(
        llm_server):
    s = spec_for(llm_server, price=PRICE, max_tokens=100)
    chars = prompt_chars({}, msgs("x" * 296), None)
    assert chars == 296 + 4 * CHARS_PER_TOKEN_BOUND  # 308: 102.67 tokens at $1/M, 100 at $2/M
    assert bound(s, chars) == pytest.approx((308 / 3 * 1 + 100 * 2) / 1e6)
    assert bound(s, chars, batch=True) == pytest.approx(0.5 * bound(s, chars))


def test_live_calls_stop_before_the_cap_and_in_flight_ones_are_accounted(llm_server, gateway):
    # One at a time: each request is let go only if what was spent plus its bound fits.
    s = spec_for(llm_server, price=PRICE, max_tokens=64, max_concurrency=1)
    one = bound(s, prompt_chars({}, msgs("question 00"), None))
    gateway.budget = Budget(3 * one)

    async def go():
        return await asyncio.gather(*(gateway.chat(s, "targets", msgs(f"question {i:02d}"))
                                      for i in range(20)), return_exceptions=True)

    got = asyncio.run(go())
    stopped = [g for g in got if isinstance(g, interrupt.Interrupted)]
    answered = [g for g in got if not isinstance(g, BaseException) and g.ok]
    assert stopped and all(e.code == BUDGET_EXIT_CODE for e in stopped)
    # An answer costs less than its bound (fewer than 64 completion tokens), so more than 3
    # went out, and none was sent past the cap.
    assert 3 < len(answered) == llm_server.counts["targets"] < 20
    b = gateway.budget
    assert b.held == pytest.approx(0.0)
    # What was spent is what the answers cost (worked from the server's token counts)...
    bills = [(max(1, len(json.dumps(q["body"]["messages"])) // 4) * 1.0
              + r.completion_tokens * 2.0) / 1e6
             for q, r in zip(llm_server.requests, answered)]
    assert b.spent_run == pytest.approx(sum(r.cost_usd for r in answered)) == pytest.approx(
        sum(bills))
    # ...within the cap, and the next request's bound would have passed it.
    assert b.spent_run <= b.cap_usd < b.spent_run + one
    assert str(stopped[0]) == b.line()


def test_no_cap_no_stop_and_a_rerun_with_a_larger_cap_pays_nothing_twice(llm_server, gateway):
    s = spec_for(llm_server, price=PRICE, max_tokens=64)
    calls = [msgs(f"q{i}") for i in range(4)]

    async def go():
        return await asyncio.gather(*(gateway.chat(s, "targets", m) for m in calls),
                                    return_exceptions=True)

    gateway.budget = Budget(2.5 * bound(s, prompt_chars({}, calls[0], None)))
    first = asyncio.run(go())
    paid = llm_server.counts["targets"]
    assert 0 < paid < 4 and any(isinstance(g, interrupt.Interrupted) for g in first)
    interrupt.reset()  # the next run
    gateway.budget = Budget(1.0, spent_before=gateway.budget.spent)
    second = asyncio.run(go())
    assert all(r.ok for r in second)
    assert llm_server.counts["targets"] == 4  # the answers paid for came from the cache


def test_a_batch_that_could_pass_the_cap_is_not_submitted(llm_server, tmp_path):
    wh = bsup.Warehouse(tmp_path / "warehouse.duckdb").init()
    gw = bsup.gateway(tmp_path)
    s = bsup.spec_for(llm_server, price=PRICE)
    calls = bsup.calls_for(s, n=5)  # 4 distinct lines
    gw.budget = Budget(1e-9)
    with pytest.raises(interrupt.Interrupted):
        bsup.run_batch(gw, wh, calls)
    assert llm_server.counts["POST /v1/batches"] == 0 and llm_server.counts["total"] == 0
    assert wh.query("SELECT count(*) AS n FROM llm_batches")[0]["n"] == 0
    gw.close()


def test_a_batch_is_held_until_read_then_its_lines_bills_count(llm_server, tmp_path):
    wh = bsup.Warehouse(tmp_path / "warehouse.duckdb").init()
    gw = bsup.gateway(tmp_path)
    s = bsup.spec_for(llm_server, price=PRICE)
    gw.budget = Budget(1.0)
    client = BatchClient(gw, wh)
    seen = []
    real = client._poll_one

    async def poll_one(st, row):
        seen.append(gw.budget.held)  # submitted, not yet read: its bound is held
        return await real(st, row)

    client._poll_one = poll_one
    got = asyncio.run(client.run(bsup.calls_for(s, n=5)))
    assert all(r.ok for r in got) and llm_server.counts["batch_lines"] == 4
    assert seen[0] > 0 and gw.budget.held == pytest.approx(0.0)
    # Spent: the 4 lines' bills (at the batch price), each once.
    lines = {r.call_hash: r.cost_usd for r in got}
    assert gw.budget.spent_run == pytest.approx(sum(lines.values())) and len(lines) == 4
    gw.close()
