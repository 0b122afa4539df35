"""The cost section of the report: what the calls cost as billed, beside the plan's estimate.

``load(wh, run_id, config)`` reads ``llm_calls`` (one row per call hash per run; a cache hit
costs nothing) and recomputes ``carryon plan`` for the run's config; ``stats(extra)`` gives
one ``Stat`` (key ``cost``): per role and model, the requests actually sent (every run of
this warehouse, and this run), how many went through a provider batch, the prompt tokens the
provider served from its prompt cache, and the cost litellm reported (batch lines at the
batch price), beside the plan's live, batch and cached estimates for the role. The plan is
for the whole config (a ``--limit`` run covers part of it) and its tokens are rough; litellm
reports 0 for a model it does not price, and the plan leaves its cost blank.
"""

from __future__ import annotations

import pandas as pd

from tasks.report.analyses import Stat

TITLE = "Cost: as billed and as planned"


def load(wh, run_id: str | None) -> dict:
    import json

    rows = wh.query("SELECT config_json FROM runs WHERE run_id = ?", [run_id]) if run_id else []
    config = json.loads(rows[0]["config_json"] or "{}") if rows else {}
    actual = wh.df(
        "SELECT role, model, count(*) AS requests, "
        "count(*) FILTER (WHERE run_id = ?) AS requests_this_run, count(batch_id) AS batched, "
        "sum(prompt_tokens) AS prompt_tokens, sum(coalesce(cached_tokens, 0)) AS cached_tokens, "
        "sum(cost_usd) AS cost_usd, sum(cost_usd) FILTER (WHERE run_id = ?) AS cost_this_run "
        "FROM llm_calls WHERE NOT cache_hit GROUP BY role, model ORDER BY role, model",
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
            "cache. plan_*: `carryon plan`'s estimate for the role over the whole config "
            "(rough tokens; blank = unpriced).")
    df = actual.copy()
    for col in ("requests", "requests_this_run", "batched", "prompt_tokens", "cached_tokens"):
        df[col] = df[col].fillna(0).astype("int64")  # counts, not measurements
    if isinstance(plan, str):
        note += f" The plan could not be computed here ({plan})."
    else:
        p = plan.set_index("role")
        for col, src in (("plan_calls", "calls"), ("plan_live_usd", "cost_usd"),
                         ("plan_batch_usd", "batch_usd"), ("plan_cached_usd", "cached_usd")):
            df[col] = df["role"].map(p[src]) if src in p else None
    return [Stat(TITLE, df, note, key="cost")]
