"""``carryon plan`` for CarryOnBench (its intents stage's ``plan``, the run's work): calls per
role, tokens and cost of its intents, simulation and judging, before anything is spent (the
checklists stage plans its own roles: tasks/stages/checklists/plan.py).

Call counts are exact where the pipeline's shape fixes them (intents, simulation with and
without prefix sharing, safety) and estimates where they depend on model answers (Ben-Util
judgments use the mean size of the checklists already in the warehouse, else the paper's
mean of 18 items). Tokens per call are estimates, stated as such: the simulation's
and the judges' are measured from their templates and the prefix tree (tasks/engine/plan_tokens.py and
``judge_prompt`` below), assuming answers use half their max_tokens; the checklist roles' are the role table's; where
this home already recorded calls of a role (a pilot run with ``--limit``), their mean tokens
per call replace the estimate;
costs come from a model entry's ``price:``, the project's price table or litellm's local price
map, model by model: a role's cost is its priced models' sum, and the headline names the
models nobody prices (a lower bound then). Each role is priced three ways (tasks/gateway/prices.py): live
(``cost_usd``), through a provider batch (``batch_usd``, 50% of live unless ``price:
batch_discount`` says otherwise) and with the provider's prompt cache where the prompt
layout allows it (``cached_usd``: Ben-Util's requests of one response share a prefix,
tasks/judges/prompt_layout.py, read at litellm's ``cache_read_input_token_cost``; the other roles
are priced live there).
"""

from __future__ import annotations

import functools

from tasks.config import Config
from tasks.gateway.prices import MEMO_NAME, plan_row
from prompts import CHARS_PER_TOKEN
from tasks.judges.prompt_layout import (
    ITEM_TOKENS, NOT_SENT, QUERY_TOKENS, benutil_layout, cache_min_tokens, provider,
)
from tasks.engine.plan_tokens import MESSAGE_TOKENS, recorded_tokens, text_tokens
from tasks.stages.checklists import mean_stored_questions
from tasks.core import registry
from tasks.benchmarks.carryon import plan_benutil
from tasks.benchmarks.carryon.queries import select_queries
from tasks.benchmarks.carryon.simulate_plan import plan_calls, simulation_prompts

def _base_tokens(role: str) -> tuple[int, int | None]:
    """Rough tokens per call (prompt, completion) of a role, before the answers' own lengths
    (its ``Role``'s)."""
    return registry.role(role).tokens


@functools.lru_cache(maxsize=1)
def judge_bases() -> dict[str, float]:
    """Tokens of each of CarryOnBench's two judges' prompts with one-character fields."""
    from tasks.judges.prompts import benutil_messages, safety_messages

    def size(msgs):
        return sum(text_tokens(m["content"]) + MESSAGE_TOKENS for m in msgs)

    return {"benutil_judge": size(benutil_messages("Q", "R", "I?")),
            "safety_judge": size(safety_messages("Q", "R"))}


def judge_prompt(role: str, query: float, response: float, item: float,
                 history: float = 0.0) -> float:
    base = judge_bases()[role]
    return base + query + response + (item if role == "benutil_judge" else history)


def mean_query_tokens(queries) -> float | None:
    texts = [getattr(q, "query", None) for q in queries]
    texts = [t for t in texts if t]
    return sum(map(text_tokens, texts)) / len(texts) if texts else None


def _cache_share(role: str, spec, target_out: int, mean_items: float) -> float | None:
    """The share of a role's prompt tokens a provider prompt cache can serve, as the prompt
    layout allows (tasks/judges/prompt_layout.py): Ben-Util's requests of one response share their
    prefix; no other role's shared prefix is estimated (0: priced live)."""
    if role != "benutil_judge":
        return 0.0
    return benutil_layout().cached_share(spec.model, QUERY_TOKENS, target_out, ITEM_TOKENS,
                                         mean_items)


def _cache_notes(cfg: Config, target_out: int, mean_items: float) -> list[str]:
    out = []
    layout = benutil_layout()
    prefix = round(layout.instructions_chars / CHARS_PER_TOKEN + QUERY_TOKENS + target_out)
    for s in cfg.role_specs("benutil_judge"):
        floor = cache_min_tokens(s.model)
        share = _cache_share("benutil_judge", s, target_out, mean_items)
        if provider(s.model) in NOT_SENT:
            why = NOT_SENT[provider(s.model)] + ", so cached_usd = cost_usd"
        elif floor is None:
            why = "its provider's prompt cache is not known here: no cached price"
        elif share and provider(s.model) == "anthropic":
            why = (f"the gateway marks it (cache_control) and sends each response's first "
                   f"request alone: one write at 1.25x, then the later {mean_items - 1:.0f} "
                   f"of ~{mean_items:.0f} requests read it at 0.1x (an effective {share:.0%} "
                   "of the prompt tokens at the read rate)")
        elif share:
            why = (f"{share:.0%} of its prompt tokens can be cache reads (the later "
                   f"{mean_items - 1:.0f} of ~{mean_items:.0f} requests per response)")
        else:
            why = (f"below the provider's {floor:,}-token minimum: no prompt caching, so "
                   "cached_usd = cost_usd (longer responses would pass it)")
        out.append(f"prompt caching, benutil_judge {s.model}: a response's requests share a "
                   f"prefix of about {prefix:,} tokens (instructions, query, a response of "
                   f"~{target_out} tokens); {why}.")
    out.append("prompt caching of the other roles is not estimated (cached_usd = cost_usd).")
    return out


def carryon_plan(cfg: Config, limit: int | None = None) -> tuple[list[dict], list[str]]:
    """CarryOnBench's plan (its intents stage's, the run's work): intents, simulation and
    judging; the checklists stage plans its own roles (tasks/stages/checklists/plan.py)."""
    queries = select_queries(cfg, limit)
    q = len(queries)
    sim = plan_calls(cfg, q, [x.query_id for x in queries])
    mean_items, items_note = mean_stored_questions(cfg)
    responses = sim["roles"]["targets"]["planned"]  # distinct responses to judge
    target_out = max((s.max_tokens for s in cfg.role_specs("targets")), default=512) // 2

    calls = {
        "intent_rewriter": q,
        "targets": sim["roles"]["targets"]["planned"],
        "user_simulator": sim["roles"]["user_simulator"]["planned"],
        # First tries only; resamples are an upper bound in the notes.
        "move_checker": sim["roles"].get("move_checker", {}).get("planned", 0),
        "benutil_judge": plan_benutil.calls(cfg.judging.benutil_mode, responses, mean_items,
                                            len(cfg.role_specs("benutil_judge"))),
        "safety_judge": responses * len(cfg.role_specs("safety_judge")),
    }
    extra_prompt = {"targets": 2 * target_out, "user_simulator": 2 * target_out,
                    "move_checker": 2 * target_out,
                    "benutil_judge": target_out, "safety_judge": target_out}
    memo = cfg.cache_path / MEMO_NAME  # litellm's rates without importing it (prices.py)
    measured = _measured_prompts(cfg, queries, target_out)
    recorded = recorded_tokens(cfg)
    # Ben-Util's tokens per call in each mode (plan_benutil.py); the configured one's row.
    q_tokens = mean_query_tokens(queries) or QUERY_TOKENS
    per_mode = {m: plan_benutil.tokens(m, measured["benutil_judge"],
                                       _base_tokens("benutil_judge")[1], q_tokens, target_out,
                                       ITEM_TOKENS, mean_items) for m in plan_benutil.MODES}
    mode = cfg.judging.benutil_mode
    if mode != plan_benutil.PER_ITEM:  # the recorded calls are taken to be per-item ones
        recorded.pop("benutil_judge", None)
    rows = []
    for role, n in calls.items():
        specs = cfg.role_specs(role)
        if not specs:
            continue
        base_in, base_out = _base_tokens(role)
        out_tokens = base_out if base_out is not None else target_out
        in_tokens = round(measured[role]) if role in measured else base_in + extra_prompt.get(role, 0)
        if role == "benutil_judge":
            in_tokens, out_tokens = per_mode[mode]
        if role in recorded:  # what this home's recorded calls of the role used, per call
            in_tokens, out_tokens = round(recorded[role][1]), round(recorded[role][2])
        # These roles' calls are spread over their models; the other roles use one model,
        # priced for all n calls.
        spread = role in ("benutil_judge", "safety_judge", "targets")
        n_priced = n if spread else n * len(specs)
        share = (lambda s, r=role: _cache_share(r, s, target_out, mean_items))
        if role == "benutil_judge" and mode == plan_benutil.PER_RESPONSE:
            share = (lambda s: 0.0)  # one request per response: no prefix repeats
        if recorded.get(role, (0, 0, 0, None))[3] is not None:
            # What the providers reported for this home's calls of the role, not the layout's.
            share = (lambda s, x=recorded[role][3]: x)
        row = plan_row(role, specs, n_priced, in_tokens, out_tokens, share, memo)
        rows.append({**row, "calls": n, "prompt_tokens": n * in_tokens,
                     "completion_tokens": n * out_tokens})
    notes = [
        f"{q} queries, {sim['conversations']} conversations (oracle included).",
        f"prefix sharing saves {sim['saved_by_sharing']} simulation calls "
        f"({sim['roles']['targets']['without_sharing'] + sim['roles']['user_simulator']['without_sharing']} "
        f"without sharing → {sim['roles']['targets']['with_sharing'] + sim['roles']['user_simulator']['with_sharing']} with).",
        f"Ben-Util judgments assume {mean_items:.1f} items per checklist ({items_note}).",
        *([f"tokens per call from the calls recorded in this home (llm_calls) for "
           + ", ".join(f"{r} ({recorded[r][0]})" for r in sorted(recorded) if r in calls)
           + "; the template estimate for the others; cached_usd reads the share of their "
           "prompt tokens the providers reported cached (llm_calls.cached_tokens)."]
          if recorded else []),
        "simulation and judging assume every query keeps its checklist (only checklisted "
        "queries are simulated): upper bounds; tokens are rough per-role estimates.",
        *_cache_notes(cfg, target_out, mean_items),
        *_mode_notes(cfg, rows, responses, mean_items, per_mode, target_out, memo),
    ]
    if sim.get("move_check_resamples"):
        rs = sim["move_check_resamples"]
        notes.insert(4, f"move checker: one check per simulated user turn; resampling failing "
                        f"turns (max_resamples={rs['max_resamples']}) adds at most "
                        f"{rs['extra_calls_upper_bound']} simulator and checker calls.")
    return rows, notes


def _mode_notes(cfg: Config, rows: list[dict], responses: int, mean_items: float, per_mode,
                target_out: int, memo) -> list[str]:
    """Both Ben-Util modes' calls and costs (plan_benutil.py), beside the table's row."""
    row = next((r for r in rows if r["role"] == "benutil_judge"), None)
    if row is None:
        return []
    other = plan_benutil.other_mode(cfg.judging.benutil_mode)
    both = plan_benutil.mode_rows(cfg, responses, mean_items, row, per_mode[other],
                                  lambda s: _cache_share("benutil_judge", s, target_out,
                                                         mean_items), memo)
    return plan_benutil.mode_notes(cfg, both, _base_tokens("benutil_judge")[1])


def _measured_prompts(cfg: Config, queries, target_out: int) -> dict[str, float]:
    """Prompt tokens per call of the simulation and judge roles, from the templates and the
    prefix tree (tasks/engine/plan_tokens.py); the other roles keep the role table's estimates."""
    q = mean_query_tokens(queries) or QUERY_TOKENS
    user_in, user_out = _base_tokens("user_simulator")
    sim = simulation_prompts(cfg, [x.query_id for x in queries], q, target_out, user_out, user_in)
    history = sim["history"] if cfg.judging.safety_sees_history else 0.0
    return {"targets": sim["targets"], "user_simulator": sim["user_simulator"],
            "benutil_judge": judge_prompt("benutil_judge", q, target_out, ITEM_TOKENS),
            "safety_judge": judge_prompt("safety_judge", q, target_out, 0, history)}
