"""What a model's tokens cost: live, through a provider batch, and as cached prompt input.

Rates come from a model entry's ``price:`` (USD per million tokens, ``batch_discount`` the
fraction a batch takes off the live price) where set, else from litellm's local price map
(``input_cost_per_token``, ``output_cost_per_token``, ``cache_read_input_token_cost``). A
batch costs ``1 - batch_discount`` of live, 0.5 by default (OpenAI's, Anthropic's and
Gemini's batch discount). A rate nobody knows is None, and so is every cost built on it.
Prices shape the bill, not the answers: never in a cache key or the config hash.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.config import ModelSpec
from tasks.gateway.transport import _litellm

DEFAULT_BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class Rates:
    input: float | None  # USD per prompt token
    output: float | None  # USD per completion token
    cached_input: float | None  # USD per prompt token read from the provider's prompt cache
    batch_discount: float = DEFAULT_BATCH_DISCOUNT


def _litellm_info(model: str) -> dict:
    try:
        return dict(_litellm().get_model_info(model) or {})
    except Exception:  # unpriced (local, custom or unknown) model
        return {}


def rates(spec: ModelSpec) -> Rates:
    info = _litellm_info(spec.model)
    p = spec.price

    def pick(override_mtok, litellm_key):
        if override_mtok is not None:
            return override_mtok / 1e6
        return info.get(litellm_key)

    return Rates(
        input=pick(p.input_per_mtok if p else None, "input_cost_per_token"),
        output=pick(p.output_per_mtok if p else None, "output_cost_per_token"),
        cached_input=pick(p.cached_input_per_mtok if p else None, "cache_read_input_token_cost"),
        batch_discount=p.batch_discount if p and p.batch_discount is not None else DEFAULT_BATCH_DISCOUNT,
    )


def costs(spec: ModelSpec, prompt_tokens: float, completion_tokens: float,
          cached_share: float | None = 1.0) -> dict:
    """``{"live", "batch", "cached"}`` in USD for these tokens: live rates; the batch price;
    and with ``cached_share`` of the prompt tokens read from the provider's prompt cache
    (1.0, the default: every one, the best case; the plan passes what the prompt layout
    allows, tasks/prompt_layout.py; None: not known, no cached cost). Completions are live."""
    r = rates(spec)
    if r.input is None or r.output is None:
        return {"live": None, "batch": None, "cached": None}
    live = prompt_tokens * r.input + completion_tokens * r.output
    if cached_share is None or (cached_share > 0 and r.cached_input is None):
        cached = None
    else:
        cached = (prompt_tokens * (cached_share * (r.cached_input or 0.0)
                                   + (1 - cached_share) * r.input)
                  + completion_tokens * r.output)
    return {"live": live, "batch": live * (1 - r.batch_discount), "cached": cached}


def billed(spec: ModelSpec, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
           batch: bool = False) -> float | None:
    """What one answered call costs at these rates: the prompt tokens the provider served
    from its cache at the cached rate (where one is known), through a batch at the batch
    price. None when the rates are not known."""
    r = rates(spec)
    if r.input is None or r.output is None:
        return None
    cached = min(cached_tokens, prompt_tokens) if r.cached_input is not None else 0
    cost = ((prompt_tokens - cached) * r.input + cached * (r.cached_input or 0.0)
            + completion_tokens * r.output)
    return cost * (1 - r.batch_discount) if batch else cost
