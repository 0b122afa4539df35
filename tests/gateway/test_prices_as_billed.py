"""Prices as the providers bill them (tasks/gateway/prices.py, price_table.py), worked by hand:
cached prompt tokens inside a batch by each provider's rule, the project's dated table where
litellm 1.110.2 has no price or 0, and litellm's 0 read as no price, never as free.

Rates (USD per million tokens) from litellm 1.110.2's local map: gemini-2.5-flash 0.30 in,
2.50 out, 0.03 cached; claude-haiku-4-5 1.00 / 5.00 / 0.10; gpt-4o-mini 0.15 / 0.60 / 0.075.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from tasks.config import PriceEntry
from tasks.gateway.price_table import TABLE
from tasks.gateway.prices import answer_cost, billed, costs, rates
from tests.support.batch import _Server, spec_for


def _spec(model, **over):
    return spec_for(_Server, model=model, **over)


# 1,000 prompt tokens of which 400 from the provider's cache, 100 completion tokens.
@pytest.mark.parametrize("model, live, batch", [
    # Gemini: the batch halves fresh input and output, not the cached tokens (billed at the
    # live cached rate): (600 * 0.30 + 100 * 2.50) / 2 + 400 * 0.03 = 215 + 12 = 227 (per 1e6).
    ("gemini/gemini-2.5-flash", 600 * 0.30 + 400 * 0.03 + 100 * 2.50, 215 + 12),
    # Anthropic: the discounts stack: (600 * 1 + 400 * 0.1 + 100 * 5) / 2 = 570.
    ("anthropic/claude-haiku-4-5", 600 * 1.0 + 400 * 0.10 + 100 * 5.0, 570),
    # OpenAI: they stack too: (600 * 0.15 + 400 * 0.075 + 100 * 0.60) / 2 = 90.
    ("openai/gpt-4o-mini", 600 * 0.15 + 400 * 0.075 + 100 * 0.60, 90),
])
def test_cached_tokens_in_a_batch_by_each_providers_rule(model, live, batch):
    s = _spec(model)
    assert billed(s, 1000, 100, 400) == pytest.approx(live / 1e6)
    assert billed(s, 1000, 100, 400, batch=True) == pytest.approx(batch / 1e6)
    # Without cached tokens every provider's batch is half of live.
    assert billed(s, 1000, 100, batch=True) == pytest.approx(0.5 * billed(s, 1000, 100))


def test_an_entrys_batch_discount_is_gemini_s_for_fresh_tokens_only():
    s = _spec("gemini/gemini-2.5-flash", price=PriceEntry(batch_discount=0.4))
    # (600 * 0.30 + 100 * 2.50) * 0.6 + 400 * 0.03 = 258 + 12
    assert billed(s, 1000, 100, 400, batch=True) == pytest.approx(270 / 1e6)


def test_sonnet_4_is_priced_by_the_table_not_litellm_s_zero():
    s = _spec("anthropic/claude-sonnet-4-20250514")
    r = rates(s)
    assert (r.input, r.output, r.cached_input) == pytest.approx((3e-6, 15e-6, 0.3e-6))
    assert r.source == "table" and r.priced
    listed = TABLE["anthropic/claude-sonnet-4-20250514"]
    assert listed.read == "2026-12-07" and "platform.claude.com" in listed.source
    # 1M in, 1M out: $18 live, $9 in a batch.
    assert costs(s, 1e6, 1e6, cached_share=0) == pytest.approx(
        {"live": 18.0, "batch": 9.0, "cached": 18.0})
    # An entry's price: still wins, field by field (the table keeps the fields it does not set).
    over = replace(s, price=PriceEntry(output_per_mtok=10.0))
    assert (rates(over).input, rates(over).output, rates(over).cached_input) == pytest.approx(
        (3e-6, 10e-6, 0.3e-6))
    assert rates(over).source == "price:"


def test_litellm_zero_is_no_price_and_unknown_models_say_why():
    # litellm 1.110.2 maps this id to 0 and 0: without the table it would bill $0 a line.
    zero = _spec("anthropic/claude-sonnet-4-20250514")
    from tasks.gateway import prices

    saved = prices.TABLE
    prices.TABLE = {}
    try:
        r = rates(zero)
        assert not r.priced and r.input is None and "prices it at 0" in r.unpriced_why
        assert billed(zero, 10, 10) is None and costs(zero, 10, 10)["live"] is None
    finally:
        prices.TABLE = saved
    unknown = rates(_spec("together_ai/allenai/Olmo-3-7B-Instruct"))
    assert not unknown.priced and unknown.unpriced_why == "litellm has no price for it"
    # Free only where a source says so: the embedded local model, listed at 0.
    local = rates(_spec("openai/local-smollm2"))
    assert local.priced and (local.input, local.output) == (0.0, 0.0) and local.source == "table"
    # A price: of 0 and 0 is the user's word that the calls are free.
    free = rates(_spec("text-completion-openai/allenai/wildguard",
                       price=PriceEntry(input_per_mtok=0.0, output_per_mtok=0.0)))
    assert free.priced and free.source == "price:"


def test_a_live_answer_costs_the_tables_price_where_litellm_has_none():
    usage = SimpleNamespace(prompt_tokens=1000, completion_tokens=100,
                            prompt_tokens_details={"cached_tokens": 400})
    # Sonnet 4: litellm said 0; the table's rates: 600 * 3 + 400 * 0.3 + 100 * 15 = 3420.
    assert answer_cost(_spec("anthropic/claude-sonnet-4-20250514"), usage, 0.0) == \
        pytest.approx(3420 / 1e6)
    # A model only litellm prices: litellm's own response cost, as it was.
    assert answer_cost(_spec("openai/gpt-4o-mini"), usage, 0.123) == 0.123
    # Unpriced: 0 in the row (the plan names the model), never an exception.
    assert answer_cost(_spec("openai/test-judge", price=PriceEntry(input_per_mtok=1.0)),
                       usage, 0.0) == 0.0
