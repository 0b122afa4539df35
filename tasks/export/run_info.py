"""What an export says about the run: its row, its config with no key in it, the models per
role, the project's version, the cache's share and the billed against the planned cost.

A config names keys only by their environment variable (``api_key_env``), never their value;
an export leaves even those names out, and a URL's user and password, and the paths of the
machine that ran it (``home``, ``cache_dir``, ``dataset.path`` kept as its file name only).
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import PurePath

from tasks.bench import default_benchmark, load_spec

PROJECT = "carryonbench"
# Fields of a config that name a secret or the machine: left out of every exported copy.
SECRET_FIELDS = ("api_key_env",)
MACHINE_FIELDS = ("home", "cache_dir")
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


class ExportError(Exception):
    """An export or import that cannot be done: one line naming the run, file or field."""


def spec_name(config: dict):
    """The benchmark a stored config ran (its spec's name; a spec that no longer loads: the
    name it was given)."""
    name = config.get("benchmark") or default_benchmark()
    try:
        return load_spec(name).name
    except Exception:  # noqa: BLE001 - an old run of a spec that moved: keep its given name
        return name


def clean_config(config: dict) -> dict:
    """The config without key variable names, URL credentials or the machine's paths."""
    def walk(v, key=None):
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items()
                    if k not in SECRET_FIELDS and k not in MACHINE_FIELDS}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and key == "api_base":
            return _USERINFO.sub(r"\1", v)
        return v

    out = walk(config)
    ds = out.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("path"), str):
        ds["path"] = PurePath(ds["path"]).name
    return out


def clean_run_row(row: dict) -> dict:
    """A ``runs`` row as exported: its config cleaned, the machine (host, pid, config path) out."""
    out = dict(row)
    try:
        out["config_json"] = json.dumps(clean_config(json.loads(row.get("config_json") or "{}")),
                                        sort_keys=True)
    except ValueError:
        out["config_json"] = "{}"
    out.update(host=None, pid=None,
               config_path=PurePath(row["config_path"]).name if row.get("config_path") else None)
    return out


def project_version() -> str:
    try:
        return metadata.version(PROJECT)
    except metadata.PackageNotFoundError:
        return "unknown"


def models_by_role(config: dict) -> dict[str, list[dict]]:
    """role -> [{name, model, provider}] as the run's config resolved them (an entry without a
    model takes the defaults' model, as the run did)."""
    defaults = (config.get("models") or {}).get("defaults") or {}
    out: dict[str, list[dict]] = {}
    for role, value in (config.get("models") or {}).items():
        if role == "defaults" or value is None:
            continue
        for e in value if isinstance(value, list) else [value]:
            if not isinstance(e, dict):
                continue
            model = e.get("model") or defaults.get("model")
            if model:
                out.setdefault(role, []).append(
                    {"name": e.get("name") or model, "model": model,
                     "provider": model.split("/", 1)[0] if "/" in model else "openai"})
    return out


def without_nulls(v):
    """A config as a person reads it: the unset (null) settings left out."""
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v]
    return v


def usage(con, run_ids: list[str]) -> dict:
    """Requests, cache hits, tokens and billed cost of the benchmark's runs (llm_calls; a model
    litellm's price map does not price is billed 0 there, so the sum is a lower bound)."""
    if not run_ids:
        return {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "cost_usd": 0.0, "by_model": []}
    ids = ", ".join("'" + r.replace("'", "''") + "'" for r in run_ids)
    rows = con.execute(
        f"SELECT role, model, count(*), count(*) FILTER (WHERE cache_hit), "
        f"coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), "
        f"coalesce(sum(cost_usd) FILTER (WHERE NOT cache_hit), 0) "
        f"FROM llm_calls WHERE run_id IN ({ids}) GROUP BY ALL ORDER BY role, model").fetchall()
    by_model = [dict(zip(("role", "model", "calls", "cache_hits", "prompt_tokens",
                          "completion_tokens", "cost_usd"), r)) for r in rows]
    total = {k: sum(r[k] for r in by_model) for k in
             ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")}
    total["by_model"] = by_model
    return total


def planned_cost(config: dict) -> tuple[float | None, str]:
    """``carryon plan``'s estimate for the config (USD, as submitted) and a note; None with the
    reason when it cannot be computed here (a dataset file that is not on this machine)."""
    try:
        from tasks.config import Config
        from tasks.engine.plan import make_plan

        rows, _ = make_plan(Config.model_validate(config), key_warnings=False)
    except Exception as e:  # noqa: BLE001 - the plan is a courtesy: say why it is missing
        # Its message is not shown: it names files of the machine that ran it.
        return None, f"no plan: {type(e).__name__} computing it here (e.g. the dataset file is " \
                     "not on this machine)"
    costs = [r.get("batch_usd") if r.get("submit") == "batch" else r.get("cost_usd")
             for r in rows]
    if not costs or any(c is None for c in costs):
        return None, "some role of the plan is unpriced"
    return float(sum(costs)), "carryon plan's estimate for this config"
