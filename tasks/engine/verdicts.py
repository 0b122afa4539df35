"""The verdicts stage: the spec's judges over stored episodes (re-judging never regenerates).

Each judge (tasks/judges/<name>.py, protocol in tasks/judges/base.py) writes under its own
*verdict set*: id = hash of (kind, the judge's model and generation settings, the hash of its
templates and rule version). A plain rerun reuses the set and replaces its rows for the
episodes it judges; another judge model or template makes a new set and leaves the old rows
alone (the views read each kind's latest set).

Identical requests are sent once per batch (the gateway's cache does the same across
batches and runs). A failed call is stored as unscored rows (value NULL, reason
``<error_kind>: <message>``) for every measure of the judge, never as a zero. An optional
judge whose role is not configured is skipped (and said so in the summary).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import prompts
from tasks.config import ConfigError
from tasks.engine.items import stored_items
from tasks.judges.base import SpecKind, TurnView, verdict_sample_key  # noqa: F401 (re-export)
from tasks.judges.protocol import keep_first, run_calls, set_hash
from tasks.judges.votes import pairwise_agreement


def spec_judges(cfg) -> tuple[list, list[str]]:
    """The spec's judges that run, each with its model (None: a judge that needs none) or its
    list of models when several vote, and the names skipped."""
    out, skipped = [], []
    for name, judge in cfg.spec.judge_objects():
        model = None
        if judge.role:
            specs = cfg.role_specs(judge.role)
            if not specs:
                if judge.optional:
                    skipped.append(name)
                    continue
                raise ConfigError(f"{cfg.source_path or 'config'}: models.{judge.role}: needed "
                                  f"by judge {name} but not configured")
            model = specs[0] if len(specs) == 1 else specs
        out.append((judge, model))
    return out, skipped


def _models(model) -> list:
    return [] if model is None else model if isinstance(model, list) else [model]


def prompt_version(judge) -> str:
    return set_hash([prompts.template_version(*judge.templates) if judge.templates else "",
                  judge.extra_version, list(judge.measures)])


def _ident(model) -> dict:
    return {"model": model.model, "params": model.generation_params(),
            "structured": model.structured}


def verdict_set_id(judge, model) -> str:
    """One judge model: as it always was; several voting models: the list of them, in order."""
    models = _models(model)
    ident = (None if not models else _ident(models[0]) if len(models) == 1
             else [_ident(m) for m in models])
    return f"{judge.kind}-" + set_hash({"kind": judge.kind, "judge": ident,
                                      "prompt": prompt_version(judge)})


def set_rows(ctx, judges: list) -> list[dict]:
    """The verdict sets of the run's judges (a set keeps its first creation: views order sets
    by it)."""
    now = dt.datetime.now(dt.timezone.utc)
    rows = [{"judgment_set_id": verdict_set_id(j, m), "benchmark": ctx.config.spec.name,
             "kind": j.kind, "judge": ", ".join(x.model for x in _models(m)) or None,
             "prompt_version": prompt_version(j), "created": now, "run_id": ctx.run_id}
            for j, m in judges]
    return keep_first(ctx.warehouse, "verdict_sets", rows)


def load_turn_views(wh, benchmark: str, episode_ids: list[str]) -> list[TurnView]:
    """Every assistant turn of the given episodes, as judges see it."""
    eps = {r["episode_id"]: r for r in wh.query(
        "SELECT episode_id, item_id, condition FROM episodes WHERE list_contains(?, episode_id)",
        [episode_ids])}
    items = stored_items(wh, benchmark, (e["item_id"] for e in eps.values()))
    turns = wh.query("SELECT * FROM episode_turns WHERE list_contains(?, episode_id) "
                     "ORDER BY episode_id, position", [episode_ids])
    by_ep: dict[str, list[dict]] = {}
    for t in turns:
        by_ep.setdefault(t["episode_id"], []).append(t)
    out = []
    for eid, ts in by_ep.items():
        ep = eps[eid]
        last = max((t["position"] for t in ts if t["role"] == "assistant"), default=None)
        asides: list = []
        for i, t in enumerate(ts):
            if t["role"] != "assistant":
                continue
            asides.append(t.get("aside"))
            history = tuple({"role": h["role"], "content": h["content"]} for h in ts[:i])
            out.append(TurnView(item=items[ep["item_id"]], condition=ep["condition"],
                                episode_id=eid, position=t["position"],
                                model_turn=t["model_turn"], prompt=ts[0]["content"],
                                response=t["content"], history=history,
                                is_last=t["position"] == last, blocked=bool(t["blocked"]),
                                act=t["act"], asides=tuple(asides)))
    return out


async def judge_batch(ctx, judges: list, episode_ids: list[str]) -> dict:
    """Run every judge over the batch's assistant turns; write all rows in one transaction
    (each set's earlier rows for these episodes are replaced). Returns counts."""
    views = load_turn_views(ctx.warehouse, ctx.config.spec.name, episode_ids)
    kinds = [SpecKind(j, _models(m), verdict_set_id(j, m)) for j, m in judges]
    pending: list[tuple] = []  # (kind, turn, the turn's request keys)
    for kind in kinds:
        for t in views:
            if t.response is None or not kind.judge.wants(t):
                continue
            pending.append((kind, t, kind.add(kind.requests(t))))
    await run_calls(ctx.gateway, kinds)
    for kind, t, keys in pending:
        kind.turn_rows(t, keys)
    results = [r for kind in kinds for r in kind.all_results()]
    unscored = Counter()
    for kind in kinds:
        unscored.update(kind.unscored)
    rows = [r for kind in kinds for r in kind.rows]
    votes = [r for kind in kinds for r in kind.vote_rows]
    # This batch's earlier rows of these sets are replaced (an episode replayed with fewer
    # turns must not keep verdicts of turns it no longer has).
    where = ("list_contains(?, judgment_set_id) AND list_contains(?, episode_id)",
             [[k.set_id for k in kinds], episode_ids])
    ctx.warehouse.write_many([("verdicts", rows, where), ("verdict_votes", votes, where)])
    return {"episodes": len(episode_ids), "turns": len(views), "verdicts": len(rows),
            "calls": len(results), "failed_calls": sum(not r.ok for r in results),
            "revisions": sum(len(k.revisions) for k in kinds), "unscored": dict(unscored),
            "errors": [f"{r.error_kind}: {r.error}" for r in results if not r.ok]}


def agreement_rows(wh, judges: list) -> list[dict]:
    """Pairwise agreement of each voting panel (a judge with several models), per measure
    (a unit's measures pooled under their measure's name: Ben-Util's ``fulfilled``) and per
    derived label the judge names (``agreement``), from ``verdict_votes``."""
    out = []
    for judge, model in judges:
        if len(_models(model)) < 2:
            continue
        set_id = verdict_set_id(judge, model)
        labels: dict[str, dict[str, dict]] = {}
        for r in wh.query("SELECT episode_id, position, measure, judge, value, label "
                          "FROM verdict_votes WHERE judgment_set_id = ?", [set_id]):
            name, _, unit = r["measure"].partition(":")
            value = r["value"] if r["value"] is not None else r["label"]
            unit_key = (r["episode_id"], r["position"], unit)
            labels.setdefault(name, {}).setdefault(r["judge"], {})[unit_key] = value
            for derived, (of, rule) in judge.agreement.items():
                if of == name:
                    labels.setdefault(derived, {}).setdefault(r["judge"], {})[unit_key] = (
                        None if value is None else rule(value))
        for measure, lab in sorted(labels.items()):
            out += [{"judgment_set_id": set_id, "measure": measure, **row}
                    for row in pairwise_agreement(lab)]
    return out


def merge(parts: list[dict]) -> dict:
    out = {"episodes": 0, "turns": 0, "verdicts": 0, "calls": 0, "failed_calls": 0,
           "revisions": 0}
    unscored: Counter = Counter()
    for p in parts:
        for k in out:
            out[k] += p[k]
        unscored.update(p["unscored"])
    out["unscored"] = dict(sorted(unscored.items()))
    return out
