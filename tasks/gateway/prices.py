"""What a model's tokens cost: live, through a provider batch, and as cached prompt input.

Rates come, field by field, from a model entry's ``price:`` (USD per million tokens,
``batch_discount`` the fraction a batch takes off the live price) where set; else from the
project's own dated table (tasks/gateway/price_table.py: the shipped configs' models that
litellm leaves unpriced or prices at 0, each with its source); else from litellm's local
price map (``input_cost_per_token``, ``output_cost_per_token``,
``cache_read_input_token_cost``). litellm's 0 in and 0 out is no price (claude-sonnet-4 in
1.110.2): such a model is unpriced, as is one nobody prices, and every cost built on it is
None, never $0. Prices shape the bill, not the answers: never in a cache key or the config
hash.

A batch costs ``1 - batch_discount`` of live, 0.5 by default (OpenAI's, Anthropic's and
Gemini's batch discount). Prompt tokens read from the provider's cache inside a batch are
billed by each provider's own rule (``CACHED_IN_BATCH``): Anthropic's and OpenAI's
discounts stack (a cache read in a batch is half the cached rate), Gemini bills them at the
live cached rate (docs/costs.md gives the pages).

Importing litellm costs seconds (8 s on a loaded 2-core machine), and a run whose calls all go
to gateway workers, or all hit the cache, never imports it in the run's process: only its
report's plan columns would. So the plan reads litellm's rates from the price map litellm
ships, as a file (tasks/gateway/price_map.py: where that is sure to give litellm's answer),
else through a small memo file in the cache folder (``model_rates.json``), keyed by litellm's
version and the model string. Both are exact only while litellm reads its local price map
(``LITELLM_LOCAL_MODEL_COST_MAP``, which the gateway sets to True unless the user set it): a
remote map can change between runs, so then every lookup asks litellm.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tasks.gateway import price_map
from tasks.gateway.batch_wire import batch_route, entry_batch_route
from tasks.gateway.price_table import TABLE
from tasks.gateway.transport import _cached_tokens, _litellm
from tasks.model_entry import ModelSpec

DEFAULT_BATCH_DISCOUNT = 0.5

# How a provider bills prompt tokens read from its prompt cache inside a batch: "stack" (the
# batch discount applies to the cached rate too) or "live" (the live cached rate). Providers
# not named stack, as OpenAI's and Anthropic's do; only those with a batch path here
# (tasks/gateway/batch_wire.py) ever bill a batch line.
CACHED_IN_BATCH = {"gemini": "live"}


def provider(model: str) -> str:
    """The provider part of a litellm model string (``openai`` when it has none)."""
    return model.split("/", 1)[0] if "/" in model else "openai"


@dataclass(frozen=True)
class Rates:
    input: float | None  # USD per prompt token
    output: float | None  # USD per completion token
    cached_input: float | None  # USD per prompt token read from the provider's prompt cache
    batch_discount: float = DEFAULT_BATCH_DISCOUNT
    # The fraction a batch takes off cached prompt tokens (CACHED_IN_BATCH).
    cached_batch_discount: float = DEFAULT_BATCH_DISCOUNT
    # Where the input and output rates came from: "price:" (the entry), "table"
    # (price_table.py), "litellm"; and why there are none, when there are none.
    source: str = "litellm"
    unpriced_why: str | None = None

    @property
    def priced(self) -> bool:
        return self.input is not None and self.output is not None


_RATE_KEYS = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost")
MEMO_NAME = "model_rates.json"


@functools.lru_cache(maxsize=256)
def _litellm_rates(model: str) -> tuple:
    # Once per model and process: the local price map does not change while a process runs,
    # and a live call's cost asks for its model's rates.
    try:
        info = dict(_litellm().get_model_info(model) or {})
    except Exception:  # unpriced (local, custom or unknown) model
        info = {}
    return tuple((k, info.get(k)) for k in _RATE_KEYS if info.get(k) is not None)


def _litellm_info(model: str) -> dict:
    return dict(_litellm_rates(model))


@functools.lru_cache(maxsize=1)
def _litellm_version() -> str:
    from importlib.metadata import version

    return version("litellm")


def _local_price_map() -> bool:
    # Unset means local: tasks/gateway/transport.py sets it to True before importing litellm.
    return os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True").lower() == "true"


def _memo_info(model: str, memo: Path) -> dict:
    """litellm's rates of ``model`` through the memo file (see the module docstring)."""
    key = f"litellm {_litellm_version()} {model}"
    try:
        book = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        book = {}  # missing, or a torn/edited file: rebuilt from litellm
    if not isinstance(book, dict):
        book = {}
    if isinstance(book.get(key), dict):
        return book[key]
    info = _litellm_info(model)
    book[key] = info
    try:  # atomic: a reader sees the old book or the new one, never half of it
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps(book, sort_keys=True), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache folder: the next lookup asks litellm again
    return info


def _base(spec: ModelSpec, memo: Path | None) -> tuple[dict, str, str | None]:
    """The rates under an entry's ``price:``: (per-token rates, their source, why none)."""
    listed = TABLE.get(spec.model)
    if listed is not None:
        rates = {"input_cost_per_token": listed.input_per_mtok / 1e6,
                 "output_cost_per_token": listed.output_per_mtok / 1e6}
        if listed.cached_input_per_mtok is not None:
            rates["cache_read_input_token_cost"] = listed.cached_input_per_mtok / 1e6
        return rates, "table", None
    # litellm's bundled map read as a file where that gives litellm's answer (price_map.py),
    # else litellm itself, through the memo where one is kept.
    info = price_map.lookup(spec.model) if _local_price_map() else None
    if info is None:
        info = (_memo_info(spec.model, memo) if memo is not None and _local_price_map()
                else _litellm_info(spec.model))
    if not info.get("input_cost_per_token") and not info.get("output_cost_per_token"):
        # Missing, or 0 and 0: litellm's 0 says it has no price, not that the model is free.
        why = ("litellm prices it at 0 in and 0 out (no source says it is free)" if info
               else "litellm has no price for it")
        return {}, "litellm", why
    return info, "litellm", None


def rates(spec: ModelSpec, memo: Path | None = None) -> Rates:
    """A model's rates; ``memo``: the memo file to read litellm's through (None: ask litellm)."""
    p = spec.price
    if p and p.input_per_mtok is not None and p.output_per_mtok is not None \
            and p.cached_input_per_mtok is not None:
        info, source, why = {}, "price:", None  # the entry prices every field: nothing to look up
    else:
        info, source, why = _base(spec, memo)

    def pick(override_mtok, litellm_key):
        if override_mtok is not None:
            return override_mtok / 1e6
        return info.get(litellm_key)

    inp = pick(p.input_per_mtok if p else None, "input_cost_per_token")
    out = pick(p.output_per_mtok if p else None, "output_cost_per_token")
    if p and (p.input_per_mtok is not None or p.output_per_mtok is not None):
        source = "price:"
    discount = p.batch_discount if p and p.batch_discount is not None else DEFAULT_BATCH_DISCOUNT
    stacks = CACHED_IN_BATCH.get(provider(spec.model), "stack") == "stack"
    return Rates(
        input=inp, output=out,
        cached_input=pick(p.cached_input_per_mtok if p else None, "cache_read_input_token_cost"),
        batch_discount=discount, cached_batch_discount=discount if stacks else 0.0,
        source=source,
        unpriced_why=None if inp is not None and out is not None else (
            why or "its price: gives no " + ("input" if inp is None else "output") + " rate"),
    )


def costs(spec: ModelSpec, prompt_tokens: float, completion_tokens: float,
          cached_share: float | None = 1.0, memo: Path | None = None) -> dict:
    """``{"live", "batch", "cached"}`` in USD for these tokens: live rates; the batch price;
    and with ``cached_share`` of the prompt tokens read from the provider's prompt cache
    (1.0, the default: every one, the best case; the plan passes what the prompt layout
    allows, tasks/judges/prompt_layout.py; None: not known, no cached cost). Completions are live.
    ``memo``: as for ``rates``."""
    r = rates(spec, memo)
    if not r.priced:
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
    price (cached tokens by the provider's rule, ``CACHED_IN_BATCH``). None when the rates
    are not known."""
    r = rates(spec)
    if not r.priced:
        return None
    cached = min(cached_tokens, prompt_tokens) if r.cached_input is not None else 0
    fresh = (prompt_tokens - cached) * r.input + completion_tokens * r.output
    reused = cached * (r.cached_input or 0.0)
    if batch:
        return fresh * (1 - r.batch_discount) + reused * (1 - r.cached_batch_discount)
    return fresh + reused


def answer_cost(spec: ModelSpec, usage, litellm_cost: float) -> float:
    """What one live answer cost: litellm's own response cost for a model only litellm's map
    prices (it knows the map's tiers), else the entry's ``price:`` or the table's rates;
    0 where nobody prices the model (the plan names it)."""
    if spec.price is None and spec.model not in TABLE:
        return litellm_cost
    return billed(spec, getattr(usage, "prompt_tokens", 0) or 0,
                  getattr(usage, "completion_tokens", 0) or 0, _cached_tokens(usage)) or 0.0


def plan_row(role: str, specs: list[ModelSpec], calls: int, in_tokens: int, out_tokens: int,
             share=lambda spec: 0.0, memo: Path | None = None) -> dict:
    """One row of ``carryon plan``: a role's calls and tokens, priced live, through a batch and
    with ``share(spec)`` of its prompt tokens from the provider's prompt cache. The calls are
    spread evenly over the role's models (several targets, or voting judges).

    ``batch_usd`` is what this version would bill with ``batch: true``: the batch price where
    the model's provider has a batch path here (tasks/gateway/batch_wire.py), the live price
    where it does not (``batch_notes`` says which and why). ``submit`` says how the role's calls
    go as configured: ``batch``, ``live`` or ``mixed`` (some of its models each way).

    The costs are the priced models' sum (None when none of them is priced); ``unpriced``
    counts the models left out of it, and ``per_model`` (not a column: ``by_model`` and the
    headline read it) holds each model's share, its rates' source or why it has none."""
    per_model = calls / len(specs)
    models = []
    for s in specs:
        r = rates(s, memo)
        c = costs(s, per_model * in_tokens, per_model * out_tokens, share(s), memo=memo)
        models.append({
            "model": s.model, "role": role, "where": s.where, "calls": per_model,
            "prompt_tokens": per_model * in_tokens, "completion_tokens": per_model * out_tokens,
            "submit": "batch" if s.batch and batch_route(s.model)[0] else "live",
            "cost_usd": c["live"], "batch_usd": c["batch"] if batch_route(s.model)[0] else c["live"],
            "cached_usd": c["cached"], "priced_by": r.source if r.priced else None,
            "unpriced_why": r.unpriced_why})
    priced = [m for m in models if m["cost_usd"] is not None]

    def total(key):
        vals = [m[key] for m in priced]
        return None if not priced or any(v is None for v in vals) else round(sum(vals), 2)

    modes = {m["submit"] for m in models}
    return {"role": role, "models": ", ".join(sorted({s.model for s in specs})), "calls": calls,
            "prompt_tokens": calls * in_tokens, "completion_tokens": calls * out_tokens,
            "submit": modes.pop() if len(modes) == 1 else "mixed",
            "unpriced": f"{len(models) - len(priced)} of {len(models)}" if len(priced) < len(models)
            else "",
            "cost_usd": total("cost_usd"), "batch_usd": total("batch_usd"),
            "cached_usd": total("cached_usd"), "per_model": models}


def by_model(rows: list[dict]) -> list[dict]:
    """``carryon plan --by model``: the plan's rows regrouped by model string (its roles, calls,
    tokens and costs summed over them), priced models first by cost; an unpriced model's
    costs are None and ``priced_by`` says why."""
    out: dict[str, dict] = {}
    for row in rows:
        for m in row.get("per_model", []):
            o = out.setdefault(m["model"], {
                "model": m["model"], "roles": [], "calls": 0.0, "prompt_tokens": 0.0,
                "completion_tokens": 0.0, "submit": set(), "cost_usd": 0.0, "batch_usd": 0.0,
                "cached_usd": 0.0, "priced_by": m["priced_by"] or f"unpriced: {m['unpriced_why']}"})
            o["roles"].append(m["role"])
            o["submit"].add(m["submit"])
            for k in ("calls", "prompt_tokens", "completion_tokens"):
                o[k] += m[k]
            for k in ("cost_usd", "batch_usd", "cached_usd"):
                o[k] = None if o[k] is None or m[k] is None else o[k] + m[k]
    for o in out.values():
        o["roles"] = ", ".join(dict.fromkeys(o["roles"]))
        o["submit"] = o["submit"].pop() if len(o["submit"]) == 1 else "mixed"
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            o[k] = round(o[k])
        for k in ("cost_usd", "batch_usd", "cached_usd"):
            o[k] = None if o[k] is None else round(o[k], 2)
    return sorted(out.values(), key=lambda o: (o["cost_usd"] is None, -(o["cost_usd"] or 0),
                                                o["model"]))


def batch_notes(specs: dict[str, list[ModelSpec]]) -> list[str]:
    """The plan's lines on batch mode: which models have no batch path in this version (priced
    live in ``batch_usd``), and which of them say ``batch: true`` yet are called live, and why.
    ``specs`` maps each role of the plan to its resolved entries (the plan resolves them from
    the config: the gateway takes entries, never the config)."""
    no_path: dict[str, list[str]] = {}
    fallback: list[str] = []
    headers: dict[str, list[str]] = {}
    for role, entries in specs.items():
        for s in entries:
            route, why = batch_route(s.model)
            if route:
                # An entry that asks for batches: can its requests travel in one? (A header
                # its provider takes only per request sends it live; this asks litellm, so
                # only for the entries that say batch: true.)
                if s.batch:
                    entry_route, entry_why = entry_batch_route(s)
                    if entry_route is None:
                        headers.setdefault(entry_why, []).append(f"{role} {s.model}")
                continue
            no_path.setdefault(why, []).append(f"{role} {s.model}")
            if s.batch:
                fallback.append(f"{role} {s.model}")
    out = [f"batch_usd is the live price for {', '.join(sorted(set(w)))}: {why}."
           for why, w in no_path.items()]
    if fallback:
        out.append("batch: true, but called live (no batch path here): "
                   + ", ".join(sorted(set(fallback))) + ".")
    out += [f"batch: true, but called live (its requests cannot travel in a batch): "
            f"{', '.join(sorted(set(w)))}: {why}." for why, w in headers.items()]
    return out


def cost_lines(rows: list[dict], cached: str) -> list[str]:
    """The plan's headline and its price lines: the priced models' total live and through
    batches, and ``cached`` (what the cached column means for this plan); "lower bound" and
    the unpriced models by name when any model is unpriced; the models priced at $0 and
    those priced from the project's table, with their sources."""
    models = [m for r in rows for m in r.get("per_model", [])]
    unpriced = {m["model"]: m["unpriced_why"] for m in models if m["cost_usd"] is None}
    live = sum(m["cost_usd"] for m in models if m["cost_usd"] is not None)
    batch = sum(m["batch_usd"] for m in models if m["batch_usd"] is not None)
    head = (f"LOWER BOUND: ${live:,.2f}; ${batch:,.2f} with batch: true on every model, "
            f"leaving out {len(unpriced)} unpriced model(s): " + ", ".join(sorted(unpriced))
            if unpriced else
            f"estimated cost: ${live:,.2f}; ${batch:,.2f} with batch: true on every model")
    out = [head + " (batch_usd: the batch price where this version has the provider's batch "
           "path, live elsewhere); " + cached]
    roles: dict[str, list[str]] = {}
    for m in models:
        roles.setdefault(m["model"], []).append(m["role"])
    for model, why in sorted(unpriced.items()):
        out.append(f"unpriced: {model} ({', '.join(dict.fromkeys(roles[model]))}): {why}; give "
                   "its entry a price: (USD per million tokens; 0 only if nobody bills it).")
    seen = set()
    for m in models:
        if m["model"] in seen or m["priced_by"] is None:
            continue
        seen.add(m["model"])
        if m["priced_by"] == "table":
            listed = TABLE[m["model"]]
            out.append(f"priced from the project's table (tasks/gateway/price_table.py): "
                       f"{m['model']}: {listed.source}, read {listed.read}.")
        elif m["cost_usd"] == 0 and m["calls"]:
            out.append(f"priced at $0 by its entry's price: {m['model']} "
                       f"({', '.join(dict.fromkeys(roles[m['model']]))}).")
    return out
