"""A model call's outcome, ``CallResult``: what the gateway (client.py) and the provider batch
path (batch.py) both return. A leaf, so that batch.py needs not import client.py, which imports
the batch path (client.py -> batching.py -> batch.py)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel


@dataclass
class CallResult:
    call_hash: str
    content: str | None = None
    parsed: BaseModel | None = None
    error: str | None = None
    # None on success; else one of: context_exceeded, invalid_output, empty_output,
    # api_error (not retryable), retries_exhausted, content_blocked (the provider refused to
    # produce the answer: finish reason content_filter or a safety-block error; not retried),
    # reasoning_exhausted (no answer because the token budget went to reasoning).
    error_kind: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of completion_tokens, those spent on reasoning (usage.completion_tokens_details), where
    # the provider reports them.
    reasoning_tokens: int = 0
    # Of prompt_tokens, those the provider served from its prompt cache (billed cheaper).
    cached_tokens: int = 0
    finish_reason: str | None = None
    cost_usd: float = 0.0
    latency_s: float = 0.0
    attempts: int = 0
    # True when the call failed because the server could not be reached at all (connection
    # refused or reset), as opposed to an answer that was an error.
    connect_failed: bool = False
    batch_id: str | None = None  # the provider batch that answered it (tasks/gateway/batch.py)
    vectors: list | None = None  # embeddings (tasks/gateway/embed.py): one per input text

    @property
    def ok(self) -> bool:
        return self.error is None
