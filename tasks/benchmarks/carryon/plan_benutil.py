"""``carryon plan``'s two Ben-Util modes, side by side (issue 56).

The paper's per-item mode asks one call per (response, checklist item): about 18 per response.
The per-response mode (``judging.benutil_mode: per_response``, tasks/judges/benutil_response.py)
asks one per response, with the whole checklist in its prompt and every item's verdict in its
answer. The plan's table prices the configured mode (its ``benutil_judge`` row); the notes give
both modes' calls, tokens and costs (live, batch, with the provider's prompt cache), so the
choice is made on numbers. Re-asks (evidence that fails its check) depend on the answers and
are counted in neither.

Tokens per call: the per-item prompt is measured from its template (tasks/benchmarks/carryon/
plan.py ``judge_prompt``); the per-response prompt is its template rendered with one-character
fields, plus the query, the response and every item's line; its answer is every item's
per-item answer plus the entry's id and braces. Prompt caching: per item, a response's requests
share their prefix (tasks/judges/prompt_layout.py); per response there is one request, so
nothing repeats and the cached price is the live one.
"""

from __future__ import annotations

import functools

from prompts import CHARS_PER_TOKEN
from tasks.engine.plan_tokens import MESSAGE_TOKENS, text_tokens
from tasks.gateway.prices import plan_row
from tasks.judges.benutil_response import (  # noqa: F401  (MODES: plan.py reads it here)
    MODES, PER_ITEM, PER_RESPONSE, response_messages,
)

# A checklist line's own tokens beside its question ("12: " and the line break).
ITEM_LINE_TOKENS = 2
# An entry of the per-response answer beside what a per-item answer holds: its id and braces.
ENTRY_TOKENS = 6
ANSWER_WRAPPER_TOKENS = 4  # {"items": [ ... ]}


@functools.lru_cache(maxsize=1)
def response_base() -> float:
    """The per-response prompt with one-character fields and one item, less that item."""
    msgs = response_messages("Q", "R", [("1", "I")])
    return sum(text_tokens(m["content"]) + MESSAGE_TOKENS for m in msgs) - 1 / CHARS_PER_TOKEN


def other_mode(mode: str) -> str:
    return PER_RESPONSE if mode == PER_ITEM else PER_ITEM


def calls(mode: str, responses: int, mean_items: float, n_models: int) -> int:
    """Ben-Util calls (first asks) for ``responses`` judged responses, per voting model."""
    per_response = 1 if mode == PER_RESPONSE else mean_items
    return round(responses * per_response) * n_models


def tokens(mode: str, per_item_prompt: float, per_item_answer: int, query: float,
           response: float, item: float, mean_items: float) -> tuple[int, int]:
    """(prompt, completion) tokens per call of ``mode``; ``per_item_prompt`` is the per-item
    mode's measured prompt, ``per_item_answer`` its answer."""
    if mode == PER_ITEM:
        return round(per_item_prompt), per_item_answer
    prompt = response_base() + query + response + mean_items * (item + ITEM_LINE_TOKENS)
    answer = mean_items * (per_item_answer + ENTRY_TOKENS) + ANSWER_WRAPPER_TOKENS
    return round(prompt), round(answer)


def answer_tokens_needed(max_items: int, per_item_answer: int) -> int:
    """The completion tokens a per-response answer needs for the longest checklist."""
    return max_items * (per_item_answer + ENTRY_TOKENS) + ANSWER_WRAPPER_TOKENS


def mode_rows(cfg, responses: int, mean_items: float, configured: dict, other_tokens, share,
              memo) -> dict[str, dict]:
    """Both modes' plan rows: the configured mode's is the table's ``benutil_judge`` row
    (``configured``); the other's priced here from ``other_tokens`` (prompt, completion)."""
    specs = cfg.role_specs("benutil_judge")
    mode = cfg.judging.benutil_mode
    other = other_mode(mode)
    n = calls(other, responses, mean_items, len(specs))
    p, c = other_tokens
    row = plan_row("benutil_judge", specs, n, p, c,
                   share if other == PER_ITEM else (lambda s: 0.0), memo)
    return {mode: configured, other: {**row, "prompt_tokens": n * p, "completion_tokens": n * c}}


def _usd(x) -> str:
    return "unpriced" if x is None else f"${x:,.2f}"


def mode_notes(cfg, rows: dict[str, dict], per_item_answer: int) -> list[str]:
    """The plan's lines on the two modes, and a warning where the configured per-response
    answers cannot fit in the judge's max_tokens."""
    mode = cfg.judging.benutil_mode
    out = [f"Ben-Util modes (judging.benutil_mode; this config: {mode}; the table's "
           "benutil_judge row is this mode):"]
    base = rows[PER_ITEM]["calls"]
    for name, label in ((PER_ITEM, "per_item, the paper's: one call per response and item"),
                        (PER_RESPONSE, "per_response: one call per response, its whole "
                                       "checklist")):
        r = rows[name]
        share = f" ({r['calls'] / base:.1%} of per_item's)" if name == PER_RESPONSE and base else ""
        out.append(f"  {label}: {r['calls']:,} calls{share}, {r['prompt_tokens']:,} prompt and "
                   f"{r['completion_tokens']:,} completion tokens; {_usd(r['cost_usd'])} live, "
                   f"{_usd(r['batch_usd'])} batch, {_usd(r['cached_usd'])} with prompt caching.")
    out.append("  per_response is not the paper's method: measure its agreement with "
               "`carryon calibrate --judge benutil` before trusting its numbers "
               "(docs/fidelity.md).")
    if mode == PER_RESPONSE:
        need = answer_tokens_needed(cfg.checklists.max_items, per_item_answer)
        short = [s for s in cfg.role_specs("benutil_judge") if s.max_tokens < need]
        for s in short:
            out.append(f"warning: {s.where} ({s.model}): max_tokens {s.max_tokens} cannot hold a "
                       f"per-response answer for a checklist of {cfg.checklists.max_items} items "
                       f"(about {need} tokens); set max_tokens to at least {need}, or its "
                       "answers are cut off (invalid_output, unscored)")
    return out
