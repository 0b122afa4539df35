"""What the gateway takes, on the ground floor: a model entry of the config, as the user writes
it (``ModelEntry``, unset fields from ``models.defaults``) and fully resolved (``ModelSpec``,
what the gateway needs for a call); the gateway's own settings (``GatewayConfig``, the
config's ``gateway:`` section); and ``api_key_for``, an entry's key read from the environment
at call time. ``generation_params`` is what shapes an answer (the cache key); batch and price
settings shape only the bill and are in no key or hash.

This module imports nothing of the project: the gateway (tasks/gateway/) stands on it and
never imports the config that builds these values (tasks/config.py resolves the entries and
re-exports every name here; tests/test_import_graph.py keeps the gateway off the floors
above it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Seeds are stored as BIGINT and sent to providers as 64-bit integers.
INT64_MAX = 2**63 - 1


class _Strict(BaseModel):
    # strict: YAML already gives typed values, so `limit: true` or `seed: "3"` is a mistake to
    # report, not something to coerce (lax mode would read true as 1). No inf/nan anywhere.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class PriceEntry(_Strict):
    """A model's prices where litellm's price map has none or is out of date (USD per million
    tokens); ``batch_discount`` is the fraction a provider batch takes off (default 0.5)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
    input_per_mtok: float | None = Field(None, ge=0)
    output_per_mtok: float | None = Field(None, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0)
    batch_discount: float | None = Field(None, ge=0, le=1)


class ModelEntry(_Strict):
    """One model as the user writes it; unset fields come from ``models.defaults``."""

    name: str | None = None
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, gt=0, le=10_000_000)
    seed: int | None = Field(None, ge=-INT64_MAX - 1, le=INT64_MAX)
    stop: list[str] | None = None
    max_concurrency: int | None = Field(None, gt=0, le=100_000)
    rpm: float | None = Field(None, gt=0)
    timeout_s: float | None = Field(None, gt=0, le=86_400)
    max_retries: int | None = Field(None, ge=0, le=100)
    # How structured output is asked for: json_schema (OpenAI style), json_object with the
    # schema attached (llama.cpp, vLLM), or prompt (schema in the prompt, for providers with
    # neither). The answer is validated against the pydantic model in every case.
    structured: Literal["json_schema", "json_object", "prompt"] | None = None
    # Only for the wildguard role: "wildguard" = WildGuard's own text-completion format,
    # "chat" = any chat model asked the same three questions.
    mode: Literal["wildguard", "chat"] | None = None
    # Reasoning models: litellm's reasoning_effort, and/or a thinking budget in tokens (sent
    # as thinking={"type": "enabled", "budget_tokens": N}, for providers that take one; 0 asks
    # Gemini 2.5 for no thinking). Both shape the output, so both are part of the cache key,
    # but only when set. max_tokens must hold the budget plus the answer (`carryon plan` warns
    # when it cannot).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    thinking_budget: int | None = Field(None, ge=0, le=10_000_000)
    # The longest a free-text string of a structured answer may be, in characters: every
    # string field of the schema sent gets this maxLength (enum and const fields excepted).
    # A server that decodes to the schema (llama.cpp, vLLM: structured json_object) then has
    # to close the string, so a small model caught repeating itself inside a "reason" still
    # gives valid JSON instead of running to max_tokens. It changes the schema, so it is part
    # of the cache key, but only when set.
    max_string_chars: int | None = Field(None, gt=0, le=1_000_000)
    # Groups targets in the report's per-family figure (e.g. "Qwen", "Llama"); the entry's
    # name when unset. Report grouping only: not sent to the model, not in the cache key.
    family: str | None = None
    # Targets: the row of the paper's Table 2 this target stands for (a name in
    # tasks/benchmarks/carryon/paper.yaml, any case), read by the report's "Beside the paper"
    # section. A label only: not sent, in no cache key and not in the config hash.
    paper_name: str | None = None
    # Provider batch API (tasks/gateway/batch.py): send this model's calls as batches of at
    # most batch_size lines, polled every batch_poll_s seconds. How the bill is paid, not what
    # the answer is: never in generation_params, a cache key or the config hash.
    batch: bool | None = None
    batch_size: int | None = Field(None, gt=0, le=50_000)
    batch_poll_s: float | None = Field(None, gt=0, le=86_400)
    # Prices for `carryon plan` and batch costs (tasks/gateway/prices.py); not in any hash.
    price: PriceEntry | None = None


# Entry fields that change how calls are paid for, or only label the entry for the report
# (paper_name), not their answers: left out of the config hash (and so of run ids), whether
# set or not.
UNHASHED_ENTRY_FIELDS = ("batch", "batch_size", "batch_poll_s", "price", "paper_name")


@dataclass(frozen=True)
class ModelSpec:
    """A fully resolved model entry: what the gateway needs for a call."""

    name: str
    model: str
    api_base: str | None
    api_key_env: str | None
    temperature: float
    top_p: float | None
    max_tokens: int
    seed: int | None
    stop: tuple[str, ...] | None
    max_concurrency: int
    rpm: float | None
    timeout_s: float
    max_retries: int
    structured: str
    mode: str
    where: str  # the config path of the entry, for error messages ("models.targets[0]")
    reasoning_effort: str | None = None
    thinking_budget: int | None = None
    max_string_chars: int | None = None  # caps the schema's strings (request_schema)
    family: str | None = None  # report grouping only: never in generation_params / the cache key
    # the provider batch API (never in generation_params / the cache key / the config hash)
    batch: bool = False
    batch_size: int = 1000
    batch_poll_s: float = 30.0
    price: PriceEntry | None = None  # prices only (tasks/gateway/prices.py): in no hash or key

    def generation_params(self) -> dict:
        """Every parameter that determines the output (part of the cache key). The reasoning
        controls appear only when set, so an entry without them keeps the keys (and judgment
        set ids) it had before they existed."""
        out = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop": list(self.stop) if self.stop else None,
        }
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.thinking_budget is not None:
            out["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return out


def api_key_for(spec: ModelSpec) -> str | None:
    """The API key of a model entry, read from the environment at call time.

    CARRYON_API_KEY, when set, is the key of every entry (one switch for one server). The
    entry holds only the variable's *name* (``api_key_env``): the key itself is read here, at
    the moment a request is built, so it never reaches the cache key, the warehouse, Prefect
    parameters or logs. It sits beside the entry, not in tasks/model_env.py (the pre-flight
    checks, which read the whole config), so the gateway can call it without the config."""
    if os.environ.get("CARRYON_API_KEY"):
        return os.environ["CARRYON_API_KEY"]
    return os.environ.get(spec.api_key_env) if spec.api_key_env else None


# Gateway settings that change how requests travel, never what they return: left out of the
# config hash, so a config keeps its hash (and its run ids' prefix) whatever they are.
UNHASHED_GATEWAY_FIELDS = ("workers", "shared_limits")


class GatewayConfig(_Strict):
    """The config's ``gateway:`` section: how the gateway retries, backs off, spreads its
    requests over processes and shares provider limits."""

    max_parse_retries: int = Field(2, ge=0, le=20)
    backoff_base_s: float = Field(0.5, gt=0, le=3600)
    backoff_max_s: float = Field(30.0, gt=0, le=3600)
    # A model server that refuses connections for this many calls in a row (each after all
    # its retries) is down: the run stops with one line instead of dropping every query.
    max_connection_failures: int = Field(3, ge=1, le=10_000)
    # Processes that send the requests (tasks/gateway/workers.py): "auto" is one per core, 0
    # sends every request from the run's own process. CARRYON_GATEWAY_WORKERS overrides it.
    workers: int | Literal["auto"] = "auto"
    # Provider limits (max_concurrency, rpm) drawn from one budget per model on the Prefect
    # server (tasks/gateway/shared_limits.py), so every shard and worker of a deployment
    # shares them. "auto": when the run is one shard of several and talks to a long-lived
    # Prefect server (PREFECT_API_URL, not this process's temporary server); "on"; "off".
    shared_limits: Literal["auto", "on", "off"] = "auto"
