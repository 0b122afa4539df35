"""What one provider answer is worth: the single judging step of every chat answer, whether it
came from a live request (``Gateway._request``) or from a line of a provider batch
(``tasks/gateway/batch.py``). Usage and cost are added to the ``CallResult``; the answer is
then accepted (content, parsed), turned into a failure kind, or sent back for a re-ask.

Pure functions over a ``CallResult`` (duck-typed, so this module does not import client.py).
"""

from __future__ import annotations

import time

from tasks.gateway.junk import junk_reason
from tasks.gateway.transport import (_cached_tokens, _reasoning_tokens, error_text,
                                     parse_structured)


def fail(r, started: float, api_key: str | None, kind: str, e):
    """Mark ``r`` failed with ``kind`` and a one-line reason (an API key never leaks into it)."""
    r.error_kind = kind
    r.error = error_text(e)
    if api_key and len(api_key) > 4:  # a provider echoing the key must not leak it
        r.error = r.error.replace(api_key, "***")
    r.latency_s = time.perf_counter() - started
    return r


def add_usage(r, resp, cost: float | None = None) -> int:
    """Add the answer's tokens and cost to ``r``; return its reasoning tokens. ``cost`` replaces
    litellm's own response cost (a batch line has none: the batch client prices it)."""
    usage = getattr(resp, "usage", None)
    r.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
    r.completion_tokens += getattr(usage, "completion_tokens", 0) or 0
    r.cached_tokens += _cached_tokens(usage)
    if cost is None:
        cost = float((getattr(resp, "_hidden_params", None) or {}).get("response_cost") or 0.0)
    r.cost_usd += cost
    reasoning = _reasoning_tokens(usage)
    r.reasoning_tokens += reasoning
    r.finish_reason = getattr(resp.choices[0], "finish_reason", None)
    return reasoning


def judge(r, resp, content, *, spec, messages, convo, prompt, schema, started, api_key,
          reasks: int, max_reasks: int, cost: float | None = None):
    """Judge one answer (its usage added first): ``(r, None)`` when the call is decided, ok or
    failed; ``(None, convo)`` to ask again with ``convo`` (an invalid structured answer, or
    junk free text from a sampled model)."""
    if cost is None:
        # The entry's own prices, or the project's table, win over litellm's map for a live
        # call too (one bill: tasks/gateway/prices.py).
        from tasks.gateway.prices import answer_cost

        cost = answer_cost(spec, getattr(resp, "usage", None), float(
            (getattr(resp, "_hidden_params", None) or {}).get("response_cost") or 0.0))
    reasoning = add_usage(r, resp, cost)
    empty = not content or not content.strip()
    if r.finish_reason == "content_filter":
        return fail(r, started, api_key, "content_blocked",
                    "the provider stopped the answer (finish_reason content_filter)"
                    + ("" if empty else f"; partial output: {content[:100]!r}")), None
    if empty and (reasoning > 0 or r.finish_reason == "length"):
        return fail(r, started, api_key, "reasoning_exhausted",
                    f"no answer: {reasoning} reasoning tokens, finish_reason "
                    f"{r.finish_reason}, max_tokens {spec.max_tokens}"), None
    if empty:
        return fail(r, started, api_key, "empty_output", "the model returned no text"), None
    if schema is None:
        junk = junk_reason(content, None, convo, prompt)
        if junk is None:
            r.content = content
            r.latency_s = time.perf_counter() - started
            return r, None
        # Free text: ask the same request again (only a sampled model can answer
        # differently; a greedy one would repeat itself), then record the failure.
        if spec.temperature and reasks < max_reasks:
            return None, convo
        return fail(r, started, api_key, "invalid_output",
                    f"not an answer: {junk}; last output: {content[:200]!r}"), None
    parsed, err = parse_structured(content, schema)
    if parsed is not None:
        junk = junk_reason(content, parsed, messages, None)
        if junk is None:
            r.content, r.parsed = content, parsed
            r.latency_s = time.perf_counter() - started
            return r, None
        err = f"not an answer: {junk}"
    if reasks >= max_reasks or convo is None:
        return fail(r, started, api_key, "invalid_output",
                    f"{err}; last output: {content[:200]!r}"), None
    # Re-ask with the invalid answer and the reason; the cache key stays the original
    # request's, so a valid answer is stored under it.
    return None, list(messages) + [
        {"role": "assistant", "content": content},
        {"role": "user", "content": f"That answer is not valid ({err}). Reply again with "
                                    "only a JSON object that matches the schema."},
    ]
