"""The cost section of the report: what the calls cost as billed, beside the plan's estimate.

``load(wh, run_id, config)`` reads ``llm_calls`` (one row per call hash per run; a cache hit
costs nothing) and recomputes ``carryon plan`` for the run's config; ``stats(extra)`` gives
one ``Stat`` (key ``cost``): per role (its models listed), the requests actually sent (every
run of this warehouse, and this run), how many went through a provider batch, their prompt
and completion tokens, the prompt tokens the provider served from its prompt cache, and the
cost as billed (batch lines at the batch price, cache reads at the cached rate), beside the
plan's calls, tokens and cost for the role as this version submits it (``plan_usd``: the batch
price where the plan's ``submit`` is batch, live where it is live, blank where mixed), its
live, batch and cached estimates, and the gap in calls and tokens (``calls_gap``,
``tokens_gap``: billed over planned, minus one). The plan is for the whole config (a
``--limit`` run covers part of it); its tokens per call are the home's recorded calls' once
there are any (tasks/benchmarks/carryon/plan.py); litellm reports 0 for a model it does not
price, and the plan leaves its cost blank.
"""

from __future__ import annotations

import pandas as pd

from tasks.benchmarks.carryon.report.analyses import Stat

TITLE = "Cost: as billed and as planned"


def load(wh, run_id: str | None) -> dict:
    import json

    rows = wh.query("SELECT config_json FROM runs WHERE run_id = ?", [run_id]) if run_id else []
    config = json.loads(rows[0]["config_json"] or "{}") if rows else {}
    actual = wh.df(
        "SELECT role, string_agg(DISTINCT model, ', ' ORDER BY model) AS models, "
        "count(*) AS requests, "
        "count(*) FILTER (WHERE run_id = ?) AS requests_this_run, count(batch_id) AS batched, "
        "sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, "
        "sum(coalesce(cached_tokens, 0)) AS cached_tokens, "
        "sum(cost_usd) AS cost_usd, sum(cost_usd) FILTER (WHERE run_id = ?) AS cost_this_run "
        "FROM llm_calls WHERE NOT cache_hit GROUP BY role ORDER BY role",
        [run_id, run_id])
    return {"actual": actual, "plan": _plan(config)}


def _plan(config: dict) -> pd.DataFrame | str:
    """The plan's rows for the run's config, or why there are none."""
    from tasks.config import Config
    from tasks.engine.plan import make_plan

    try:
        rows, _ = make_plan(Config.model_validate(config), key_warnings=False)
    except Exception as e:  # noqa: BLE001 - a config or dataset no longer readable here
        return " ".join(f"{type(e).__name__}: {e}".split())[:200]
    return pd.DataFrame(rows)


def stats(extra: dict) -> list[Stat]:
    actual, plan = extra["actual"], extra["plan"]
    if actual.empty:
        return [Stat(TITLE, None, "Not computed: no model request is recorded.", key="cost")]
    note = ("Requests and cost: calls actually sent (cache hits cost nothing), in every run of "
            "this warehouse and in this run; batched: answered by a provider batch (priced at "
            "the batch rate); cached_tokens: prompt tokens the provider served from its prompt "
            "cache (billed at the cached rate). plan_*: `carryon plan`'s estimate for the role "
            "over the whole config; plan_usd: as this version submits it (batch or live); "
            "calls_gap, tokens_gap: billed over planned, minus one (blank = unpriced or no plan).")
    df = actual.copy()
    for col in ("requests", "requests_this_run", "batched", "prompt_tokens", "completion_tokens",
                "cached_tokens"):
        df[col] = df[col].fillna(0).astype("int64")  # counts, not measurements
    if isinstance(plan, str):
        note += f" The plan could not be computed here ({plan})."
        return [Stat(TITLE, df, note, key="cost")]
    p = plan.set_index("role")
    as_submitted = {r: (row["batch_usd"] if row.get("submit") == "batch" else
                        row["cost_usd"] if row.get("submit") == "live" else None)
                    for r, row in p.iterrows()}
    for col, src in (("plan_calls", "calls"), ("plan_prompt_tokens", "prompt_tokens"),
                     ("plan_completion_tokens", "completion_tokens"), ("plan_submit", "submit"),
                     ("plan_live_usd", "cost_usd"), ("plan_batch_usd", "batch_usd"),
                     ("plan_cached_usd", "cached_usd")):
        df[col] = df["role"].map(p[src]) if src in p else None
    df["plan_usd"] = df["role"].map(as_submitted)
    tokens = df["prompt_tokens"] + df["completion_tokens"]
    planned = df["plan_prompt_tokens"] + df["plan_completion_tokens"]
    df["calls_gap"] = (df["requests"] / df["plan_calls"] - 1).round(4)
    df["tokens_gap"] = (tokens / planned - 1).round(4)
    return [Stat(TITLE, df, note, key="cost")]
