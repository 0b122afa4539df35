"""Prompt layouts and provider prompt caching: how much of a request repeats a prefix.

Providers discount prompt tokens that repeat a recent request's prefix (automatic on OpenAI
and Gemini, explicit on Anthropic), but only from a minimum prefix length. The judges are
laid out for it: everything a request shares with its siblings comes first. Ben-Util's ~18
requests per response share the instructions, the query and the response and differ only in
the checklist item, which comes last (then one fixed line). The layout is measured here by
rendering requests that differ only where they should (tests/judges/test_prompt_layout.py asserts
it for every judge), and the plan uses it to estimate the cached share of prompt tokens.

The plan assumes a prefix is cached only where the gateway's request earns it as billed:

- OpenAI (and Azure) cache every prompt prefix of 1,024 tokens or more by themselves
  (OpenAI's prompt-caching guide) and report ``prompt_tokens_details.cached_tokens``;
- Gemini 2.5 and newer cache implicitly, from a minimum prefix per model (the Gemini API's
  caching page, last updated 2026-10-13: 2,048 tokens for Gemini 2.5 Flash and Pro, 4,096 for
  Gemini 3.x), and report ``usageMetadata.cachedContentTokenCount``;
- Anthropic caches only a prefix the request marks with ``cache_control`` (its prompt-caching
  page), from a minimum per model (1,024 tokens for Claude Sonnet 4 and 4.5, Opus 4 and 4.1,
  Sonnet 3.7; 2,048 for the Haiku 3.x models, and for Sonnet 4.6, whose documented 1,024 was
  observed to be 2,048 (anthropic-sdk-python issue #1194); 4,096 for Haiku 4.5 and Opus 4.5
  and 4.6; a model not listed here is assumed 4,096), writes a prefix at 1.25 times the
  input price and reads it at 0.1 times (docs/costs.md names the pages). Ben-Util's per-item requests name their shared prefix
  (``Request.cache_prefix``) and the gateway marks it for Anthropic models
  (tasks/gateway/transport.py ``mark_cache_prefix``; not in the cache key, and not on provider
  batch lines); the first request of a response goes alone and the others wait for it
  (tasks/engine/judge_calls.py), so each prefix is written once and read by the rest. The plan
  counts the write premium (``ANTHROPIC_WRITE``). Bedrock's cache points are not sent
  (``NOT_SENT``).

A provider not listed gets no estimate (None): the plan assumes no provider cache there.
Whatever the plan assumed, ``llm_calls.cached_tokens`` holds what the provider reported and
the recorded cost bills those tokens at the cached rate (tasks/gateway/prices.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from prompts import CHARS_PER_TOKEN

CACHE_MIN_TOKENS = {"openai": 1024, "azure": 1024, "gemini": 4096, "vertex_ai": 4096,
                    "anthropic": 4096}
# Gemini models with a lower floor than the provider's default above (prefix of the model id).
GEMINI_MIN_TOKENS = {"gemini-2.5": 2048}
# Anthropic models with a lower floor than the 4,096 assumed for any other (prefix of the id).
ANTHROPIC_MIN_TOKENS = {"claude-sonnet-4-6": 2048, "claude-3-5-haiku": 2048,
                        "claude-3-haiku": 2048, "claude-sonnet-4": 1024, "claude-opus-4-1": 1024,
                        "claude-opus-4-2025": 1024, "claude-3-7-sonnet": 1024}
# Anthropic's prices of a cache write and a cache read, as multiples of the input price (its
# prompt-caching page; the 5-minute cache).
ANTHROPIC_WRITE, ANTHROPIC_READ = 1.25, 0.1
# Providers that cache only prefixes the request marks, where the gateway sends none: why.
NOT_SENT = {"bedrock": "Bedrock caches only prefixes marked with a cache point, which the gateway "
                       "does not send"}
# Rough lengths the plan assumes for a query and a checklist item (CASE-Bench's queries and
# the decomposer's yes/no questions are a sentence each).
QUERY_TOKENS = 30
ITEM_TOKENS = 20


def provider(model: str) -> str:
    """litellm's provider prefix of a model string ("openai/gpt-4o" -> "openai")."""
    return model.split("/", 1)[0] if "/" in model else "openai"


def cache_min_tokens(model: str) -> int | None:
    """The shortest prefix the model's provider caches by itself; None: no estimate (a local
    model, a provider not listed, or one that caches only marked prefixes: ``NOT_SENT``)."""
    if model.startswith("openai/local-"):
        return None  # the embedded local model has no provider cache
    p = provider(model)
    name = model.split("/", 1)[-1]
    floors = {"gemini": GEMINI_MIN_TOKENS, "vertex_ai": GEMINI_MIN_TOKENS,
              "anthropic": ANTHROPIC_MIN_TOKENS}.get(p)
    if floors is not None:
        # The longest matching prefix ("claude-sonnet-4-6" before "claude-sonnet-4").
        for pre in sorted(floors, key=len, reverse=True):
            if name.startswith(pre):
                return floors[pre]
    return CACHE_MIN_TOKENS.get(p)


def common_head(a: str, b: str) -> int:
    """Characters two prompts share from the start."""
    return len(os.path.commonprefix([a, b]))


def common_tail(a: str, b: str) -> int:
    return len(os.path.commonprefix([a[::-1], b[::-1]]))


@dataclass(frozen=True)
class BenUtilLayout:
    instructions_chars: int  # the fixed text before the query
    suffix_chars: int  # the fixed text after the item

    def cached_share(self, model: str, query_tokens: float, response_tokens: float,
                     item_tokens: float, items: float) -> float | None:
        """The share of a response's Ben-Util prompt tokens a provider can serve from its
        prompt cache: the first of its ``items`` requests pays in full, the others read the
        shared prefix (instructions + query + response) when it reaches the minimum."""
        if provider(model) in NOT_SENT:
            return 0.0  # nothing marked, nothing read: priced live
        floor = cache_min_tokens(model)
        if floor is None:
            return None
        if items <= 1:
            return 0.0
        prefix = self.instructions_chars / CHARS_PER_TOKEN + query_tokens + response_tokens
        if prefix < floor:
            return 0.0
        per_request = prefix + item_tokens + self.suffix_chars / CHARS_PER_TOKEN
        reads = (items - 1) * prefix / (items * per_request)
        if provider(model) != "anthropic":
            return reads
        # Anthropic bills the one write per response at 1.25 times the input price. As a share
        # priced at the read rate (what the plan's cached column takes): reads r, write w cost
        # r*0.1 + w*1.25 + (1-r-w) of the input price, which is s*0.1 + (1-s) for
        # s = r - 0.25 * w / (1 - 0.1).
        write = prefix / (items * per_request)
        return reads - (ANTHROPIC_WRITE - 1) * write / (1 - ANTHROPIC_READ)


def benutil_layout() -> BenUtilLayout:
    """Measured from the template: two requests of one response differ only in the item."""
    from tasks.judges.prompts import benutil_messages

    query, response = "Q", "R"
    a = benutil_messages(query, response, "Alpha?")[0]["content"]
    b = benutil_messages(query, response, "Beta?")[0]["content"]
    head = common_head(a, b)
    # The item sits in its own fenced block (its token differs per item): what follows the
    # block's END line is the fixed suffix.
    suffix = len(a) - (a.index(">>>", a.rindex("<<<END ITEM ")) + 3)
    assert a[-suffix:] == b[-suffix:], "the text after the item must be the same"
    instructions = a.index("\n" + query + "\n") + 1  # up to the query itself
    assert head > instructions, "the two requests must share the instructions"
    return BenUtilLayout(instructions_chars=instructions, suffix_chars=suffix)
