"""Embeddings through the gateway: cached by content hash like chat calls, bounded by the same
per-model limits, recorded in ``llm_calls``, failures returned as data.

``await embed(ctx.gateway, spec, role, texts)`` -> a ``CallResult`` whose ``vectors`` holds
one vector per text (``content`` is the same list as JSON, which is what the cache stores).
The key holds the model, the normalised api_base, the texts and a format tag: generation
parameters (temperature, max_tokens) do not shape an embedding and are left out. A rerun of
the same texts sends nothing; an error is never cached. For studies that measure drift in
embedding space (e.g. an intent that moves over a conversation). A server that answers one
vector per token (llama.cpp without a pooling layer) is mean-pooled here (``pooled``).
"""

from __future__ import annotations

import asyncio
import json
import time

from tasks.gateway.client import CallResult, Gateway
from tasks.gateway.budget import bound
from tasks.gateway.keys import cache_key
from tasks.gateway.prices import answer_cost
from tasks.gateway.transport import _litellm, _retry_after
from tasks.model_entry import ModelSpec, api_key_for
from tasks.ops import interrupt

EMBEDDING_FORMAT = "embedding-v1"


def embed_key(spec: ModelSpec, texts: list[str]) -> str:
    return cache_key(model=spec.model, api_base=spec.api_base, messages=None,
                     prompt=json.dumps(texts, ensure_ascii=False),
                     params={"format": EMBEDDING_FORMAT}, schema=None, structured=None,
                     sample_key=None)


async def embed(gw: Gateway, spec: ModelSpec, role: str, texts: list[str]) -> CallResult:
    if not texts or not all(isinstance(t, str) and t for t in texts):
        raise ValueError("embed: texts must be a non-empty list of non-empty strings")
    gw.servers.check(spec)
    key = embed_key(spec, texts)
    return await gw._dedup(key, lambda: _run(gw, key, spec, role, texts))


async def _run(gw: Gateway, key: str, spec: ModelSpec, role: str, texts: list[str]) -> CallResult:
    st = gw._stat(role)
    hit = gw.cache.get(key)
    if hit is not None:
        r = CallResult(call_hash=key, content=hit["content"], cached=True,
                       prompt_tokens=hit.get("prompt_tokens", 0), cost_usd=hit.get("cost_usd", 0.0))
        r.vectors = json.loads(hit["content"])
        st.hits += 1
        gw._record(role, spec, r)
        return r
    r = await _request(gw, key, spec, role, texts)
    st.requests += r.attempts
    st.retries += max(0, r.attempts - 1)
    if r.ok:
        gw.cache.set(key, {"content": r.content, "prompt_tokens": r.prompt_tokens,
                           "cost_usd": r.cost_usd, "role": role, "model": spec.model}, role)
    else:
        st.failures += 1
    gw._record(role, spec, r)
    gw.servers.note(spec, r)  # may raise ServerUnavailable
    return r


async def _request(gw: Gateway, key: str, spec: ModelSpec, role: str, texts: list[str]) -> CallResult:
    litellm = _litellm()
    r = CallResult(call_hash=key)
    kwargs = {"model": spec.model, "input": texts, "api_base": spec.api_base,
              "timeout": spec.timeout_s, "max_retries": 0,
              "extra_headers": {"x-carryon-role": role}}
    api_key = api_key_for(spec) or ("none" if spec.api_base else None)
    if api_key:
        kwargs["api_key"] = api_key
    lim = gw._limit(spec)
    failures = 0
    started = time.perf_counter()
    while True:
        r.attempts += 1
        # The budget (tasks/gateway/budget.py) before the try: a stop is not an API error.
        held = await gw.hold_budget(bound(spec, sum(map(len, texts)))) if gw.budget else 0.0
        try:
            await interrupt.checkpoint()  # nothing new is sent after Ctrl-C
            async with lim.slot():
                with interrupt.sending():
                    resp = await litellm.aembedding(**kwargs)
        except (litellm.RateLimitError, litellm.InternalServerError,
                litellm.ServiceUnavailableError, litellm.APIConnectionError,
                litellm.Timeout, litellm.BadGatewayError) as e:
            failures += 1
            _settle(gw, held, 0.0)
            if failures > spec.max_retries:
                r.connect_failed = (isinstance(e, litellm.APIConnectionError)
                                    or "connection error" in str(e).lower())
                return gw._fail(r, started, api_key, "retries_exhausted", e)
            await asyncio.sleep(gw._backoff(failures, _retry_after(e)))
            continue
        except Exception as e:  # bad request, auth, unknown model
            _settle(gw, held, 0.0)
            return gw._fail(r, started, api_key, "api_error", e)
        break
    usage = getattr(resp, "usage", None)
    cost = answer_cost(spec, usage, float(
        (getattr(resp, "_hidden_params", None) or {}).get("response_cost") or 0.0))
    _settle(gw, held, cost)  # answered: billed, whatever the vectors are worth
    data = sorted(getattr(resp, "data", None) or [], key=lambda d: _get(d, "index") or 0)
    vectors = [pooled(_get(d, "embedding")) for d in data]
    if len(vectors) != len(texts) or not all(vectors):
        return gw._fail(r, started, api_key, "invalid_output",
                        f"expected {len(texts)} embeddings, got {len(vectors)} usable")
    r.prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
    r.cost_usd = cost
    r.vectors = vectors
    r.content = json.dumps(r.vectors)
    r.latency_s = time.perf_counter() - started
    return r


def _settle(gw: Gateway, held: float, billed: float) -> None:
    if gw.budget is not None:
        gw.budget.settle(held, billed)


def pooled(v) -> list[float] | None:
    """One text's vector: a flat list of numbers as it is; a list of equal-length per-token
    vectors (what llama.cpp's server returns for a model without a pooling layer, such as
    the local chat model) as their mean; anything else None (an invalid output)."""
    if not isinstance(v, list) or not v:
        return None
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return [float(x) for x in v]
    if all(isinstance(t, list) and t and len(t) == len(v[0]) for t in v):
        rows = [pooled(t) for t in v]
        if all(rows):
            return [sum(col) / len(rows) for col in zip(*rows)]
    return None


def _get(obj, name: str):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
