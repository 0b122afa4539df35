"""Tables of the platform: runs and the provenance of every LLM call."""

from __future__ import annotations

import datetime as dt

from sqlmodel import Field, SQLModel


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    run_id: str = Field(primary_key=True)
    config_path: str | None = None
    config_hash: str
    config_json: str  # the validated config; never secrets (keys live in the environment)
    git_rev: str | None = None
    packages: str | None = None  # JSON {name: version} of the packages that shape results
    seed: int
    stages: str
    started: dt.datetime
    finished: dt.datetime | None = None
    status: str  # running | succeeded | failed | interrupted (its process died; see error)
    error: str | None = None
    requests: int | None = None  # HTTP requests sent to providers (retries included)
    cache_hits: int | None = None
    pid: int | None = None  # the process that ran it, to tell a dead 'running' row (see tasks/engine/run.py)
    host: str | None = None  # socket.gethostname() of that process


class LLMCall(SQLModel, table=True):
    """One row per distinct call (cache key) per run: the provenance DESIGN §3 asks for."""

    __tablename__ = "llm_calls"
    run_id: str = Field(primary_key=True)
    call_hash: str = Field(primary_key=True)
    role: str
    model: str
    cache_hit: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    attempts: int = 0  # requests sent for this call (0 on a cache hit; >1 means retries)
    error: str | None = None
    # Of completion_tokens, those spent on reasoning, where the provider reports them.
    reasoning_tokens: int | None = None
    # Of prompt_tokens, those the provider served from its prompt cache (NULL: written before
    # they were recorded).
    cached_tokens: int | None = None
    # The provider batch that answered the call (tasks/gateway/batch.py); NULL: a live call.
    batch_id: str | None = None


class LLMBatch(SQLModel, table=True):
    """A provider batch the gateway submitted: enough to resume polling it after the process
    died instead of paying for its lines again (tasks/gateway/batch.py)."""

    __tablename__ = "llm_batches"
    batch_id: str = Field(primary_key=True)  # the provider's id
    run_id: str  # the run that submitted it
    role: str
    model: str
    api_base: str | None = None
    input_file_id: str  # "" where the requests travel in the create call (Anthropic, Gemini)
    # JSON {custom_id: cache key}: which answer each line is
    lines: str
    n_lines: int
    status: str  # the provider's last status (validating, in_progress, completed, expired, ...)
    # True once its results went through the gateway (cached, recorded, failures retried live)
    consumed: bool = False
    # Where the results are read: OpenAI's output/error file ids, Anthropic's results_url,
    # Gemini's responsesFile (NULL: inline in the batch itself)
    output_file_id: str | None = None
    error_file_id: str | None = None
    submitted: dt.datetime
    finished: dt.datetime | None = None
    # The client id the batch was tagged with (OpenAI metadata, Gemini displayName, the prefix
    # of Anthropic custom ids): how a create that failed or timed out is found again. A row of
    # status "submitting" is an intent: a create sent whose batch id is not known yet.
    client_id: str | None = None


class StageMemo(SQLModel, table=True):
    """A stage that ran whole (no failed call), keyed by a fingerprint of all its inputs: the
    project's source, the resolved config, the run's queries, the response cache's generation
    and the tables of the earlier stages (tasks/engine/stage_memo.py). A rerun that meets the same
    fingerprint, and finds the stage's own tables as this row left them, skips the stage: a
    replay from the cache would write exactly those rows again."""

    __tablename__ = "stage_memos"
    fingerprint: str = Field(primary_key=True)
    stage: str
    outputs: str  # JSON {table: [rows, sum of row hashes]} of the stage's tables after it ran
    summary: str  # JSON: the stage's summary, returned again when it is skipped
    run_id: str
    created: dt.datetime
