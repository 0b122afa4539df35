"""Prices this project lists itself: the models of the shipped configs (configs/*.yaml) that
litellm 1.110.2 leaves unpriced or prices at 0, each with the page it was read from and when.

A model entry's own ``price:`` still wins, field by field; a model listed here is not looked
up in litellm's map at all (litellm's row for it is missing or wrong). A price of 0 only
where the source says nobody bills the calls. Models of the shipped configs that no source
read here prices stay out: the plan names them as unpriced (docs/costs.md lists them).

USD per million tokens. ``read`` is the day the source was read; prices change, and a
listed price older than the run is the first thing to check against the provider's page.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Listed:
    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None  # None: the source gives no cached rate
    source: str
    read: str  # YYYY-MM-DD


ANTHROPIC_PRICING = "Anthropic, Pricing (platform.claude.com/docs/en/about-claude/pricing)"
LOCAL_MODEL = ("this project's embedded local model (docs/local-model.md): llama.cpp on this "
               "machine, started by `carryon local-model`; no provider bills it")

TABLE: dict[str, Listed] = {
    # litellm 1.110.2 prices this dated id at 0 in and 0 out.
    "anthropic/claude-sonnet-4-20250514": Listed(
        3.0, 15.0, 0.30, f"{ANTHROPIC_PRICING}: Claude Sonnet 4, $3 / MTok base input, "
        "$0.30 / MTok cache hits, $15 / MTok output", "2026-12-07"),
    # litellm 1.110.2 no longer maps it; its price map of 2025-09-01 did.
    "together_ai/meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8": Listed(
        0.27, 0.85, None, "litellm's price map (model_prices_and_context_window.json) as of "
        "2025-09-01, before the model left it, as mirrored in AgentOps-AI/tokencost "
        "tokencost/model_prices.json at commit e7f7c19; Together's own page "
        "(together.ai/pricing) could not be read here", "2026-12-07"),
    "openai/local-smollm2": Listed(0.0, 0.0, 0.0, LOCAL_MODEL, "2026-12-07"),
    "openai/local-smollm2-embed": Listed(0.0, 0.0, 0.0, LOCAL_MODEL, "2026-12-07"),
}
