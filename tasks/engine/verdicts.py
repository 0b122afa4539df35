"""The verdicts stage: the spec's judges over stored episodes (re-judging never regenerates).

Each judge (tasks/judges/<name>.py, protocol in tasks/core/judges.py) writes under its own
*verdict set*. Its id is made by the spec's ``verdict_keys`` recipe (``VerdictKeys``): the
engine's own (``verdict_sets``, ``VerdictSets`` below: hash of the kind, the judge's model and
generation settings, the hash of its templates and rule version and, for a judge that reads
versioned hidden data of the items, a hash over the run's item versions), or one a benchmark
registers for its older homes (CarryOnBench's ``judgment_sets``,
tasks/benchmarks/carryon/keys.py), which also says how a sampled judge's calls are keyed.

A plain rerun reuses the set and replaces its rows for the episodes it judges; another judge
model, template or checklist makes a new set and leaves the old rows alone (the views read
each kind's latest set).

Items are read as the spec's prepare stages leave them (``prepare_items``: CarryOnBench's
checklists stage adds each query's current checklist); an episode whose item a prepare stage
left out is counted, not judged. Batches hold whole items, so the episodes of an item that
share their first responses are judged once in a batch (the gateway's cache does the same
across batches and runs). A failed call is stored as unscored rows (value NULL, reason
``<error_kind>: <message>``) for every measure of the judge, never as a zero. An optional
judge whose role is not configured is skipped (and said so in the summary).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

from pydantic import BaseModel

from tasks.config_error import ConfigError
from tasks.core import registry
from tasks.core.items import prepare_items, stored_items
from tasks.core.judges import (
    TurnView, VerdictKeys, prompt_version_of, set_hash, verdict_sample_key,
)
from tasks.core.votes import pairwise_agreement
from tasks.core.keys import keys_of
from tasks.engine.episode import episode_key, run_work, stored_episode_ids
from tasks.engine.judge_calls import BatchJudge, keep_first, run_calls


def spec_judges(cfg) -> tuple[list, list[str]]:
    """The spec's judges that run, each with its model (None: a judge that needs none) or its
    list of models when several vote, and the names skipped."""
    out, skipped = [], []
    for name, judge in cfg.spec.judge_objects():
        judge = with_config_args(cfg, name, judge)
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


def with_config_args(cfg, name: str, judge):
    """The judge with the arguments the config's ``judging:`` section sets: an argument whose
    field names a key of that section (``json_schema_extra={"config": key}``) takes the
    config's value where the config turns it from its default (the section a config written
    for CarryOnBench has always had: Ben-Util's quote choices, safety's history)."""
    args = judge.args
    if not isinstance(args, BaseModel):
        return judge
    section = cfg.judging
    set_keys = {k for k, f in type(section).model_fields.items()
                if getattr(section, k) != f.default}
    over = {field: getattr(section, key) for field, info in type(args).model_fields.items()
            if (key := (info.json_schema_extra or {}).get("config")) in set_keys}
    if not over:
        return judge
    return registry.build("judge", name, {**args.model_dump(exclude_defaults=True), **over})


def _models(model) -> list:
    return [] if model is None else model if isinstance(model, list) else [model]


def _ident(model) -> dict:
    return {"model": model.model, "params": model.generation_params(),
            "structured": model.structured}


def items_version(judge, items) -> str | None:
    """A hash over the versions of the items' hidden data the judge reads (None: it reads
    none, or no item has one)."""
    versions = {i.item_id: v for i in items if (v := judge.item_version(i)) is not None}
    return set_hash(sorted(versions.items())) if versions else None


class VerdictSets(VerdictKeys):
    """The engine's recipe: a set id hashes (kind, the judge's model and generation settings,
    its templates and rule version, and, for a judge that reads versioned hidden data of the
    items, the hash over the run's item versions); a sampled judge's calls are keyed by
    their request."""

    def set_id(self, judge, models: list, items_version: str | None) -> tuple[str, str]:
        prompt_version = prompt_version_of(judge)
        ident = (None if not models else _ident(models[0])
                 if len(models) == 1 else [_ident(m) for m in models])
        doc = {"kind": judge.kind, "judge": ident, "prompt": prompt_version}
        if items_version is not None:  # only then: every older set keeps its id
            doc["items"] = items_version
        return f"{judge.kind}-" + set_hash(doc), prompt_version

    def sample_key(self, model, messages: list[dict]) -> str | None:
        return verdict_sample_key(model, messages)


def recipe_of(spec) -> VerdictKeys:
    """The spec's verdict-key recipe: the engine's (``verdict_sets``), or the one it names."""
    if spec.verdict_keys == "verdict_sets":
        return VerdictSets()
    return spec.component("verdict_keys", spec.verdict_keys)


class JudgeSet:
    """One judge of the run with its models, and its set id and prompt version under the
    spec's recipe (see the module docstring)."""

    def __init__(self, judge, model, recipe: VerdictKeys, items) -> None:
        self.judge, self.model, self.models = judge, model, _models(model)
        self.items_version = items_version(judge, items)
        self.set_id, self.prompt_version = recipe.set_id(judge, self.models, self.items_version)

    def set_row(self, ctx, now) -> dict:
        args = self.judge.changed_args()
        return {"judgment_set_id": self.set_id, "benchmark": ctx.config.spec.name,
                "kind": self.judge.kind,
                "judge": ", ".join(m.model for m in self.models) or None,
                "prompt_version": self.prompt_version, "created": now, "run_id": ctx.run_id,
                "judges": json.dumps([m.model for m in self.models]) if self.models else None,
                "item_version": self.items_version,
                "args": json.dumps(args, sort_keys=True) if args else None}


def judge_sets(ctx, judges: list, items) -> list[JudgeSet]:
    """The run's judges as sets, over the run's judged ``items``."""
    recipe = recipe_of(ctx.config.spec)
    return [JudgeSet(j, m, recipe, items) for j, m in judges]


def set_rows(ctx, sets: list[JudgeSet]) -> list[dict]:
    """The verdict sets of the run's judges (a set keeps its first creation: views order sets
    by it)."""
    now = dt.datetime.now(dt.timezone.utc)
    return keep_first(ctx.warehouse, "verdict_sets", [s.set_row(ctx, now) for s in sets])


def verdict_set_id(judge, model) -> str:
    """A judge's set id under the engine's recipe, for a judge that reads no item versions."""
    return JudgeSet(judge, model, VerdictSets(), []).set_id


def batch_kinds(ctx, judges: list, set_ids: list[str]) -> list[BatchJudge]:
    """The run's judges for one batch, under the set ids the flow made (they hash the whole
    run's item versions, which a batch does not see)."""
    key = recipe_of(ctx.config.spec).sample_key
    return [BatchJudge(j, _models(m), sid, key) for (j, m), sid in zip(judges, set_ids)]


def judged_episodes(ctx) -> tuple[list[tuple[str, str]], list]:
    """The run's episodes that are stored (played by this or an earlier run), as (episode id,
    item id) in work order, and the run's items as its prepare stages left them: what the
    verdicts stage judges."""
    spec = ctx.config.spec
    items, work, _, _ = run_work(ctx)
    keys = keys_of(spec, ctx.config)
    ids = [(episode_key(keys, spec.name, t.name, item.item_id, c.name, plan), item.item_id)
           for item, c, t, plan in work]
    stored = stored_episode_ids(ctx.warehouse, [i for i, _ in ids])
    return [(e, i) for e, i in ids if e in stored], items


def load_turn_views(ctx, episode_ids: list[str]) -> tuple[list[TurnView], dict[str, str]]:
    """Every assistant turn of the given episodes, as judges see it, and the episodes whose
    item a prepare stage left out (episode id -> why): those are not judged."""
    wh, benchmark = ctx.warehouse, ctx.config.spec.name
    eps = {r["episode_id"]: r for r in wh.query(
        "SELECT episode_id, item_id, condition FROM episodes WHERE list_contains(?, episode_id)",
        [episode_ids])}
    stored = stored_items(wh, benchmark, (e["item_id"] for e in eps.values()))
    prepared, left = prepare_items(ctx, list(stored.values()))
    items = {i.item_id: i for i in prepared}
    not_judged = {eid: left.get(e["item_id"], "item not stored")
                  for eid, e in eps.items() if e["item_id"] not in items}
    turns = wh.query("SELECT * FROM episode_turns WHERE list_contains(?, episode_id) "
                     "ORDER BY episode_id, position", [episode_ids])
    by_ep: dict[str, list[dict]] = {}
    for t in turns:
        if t["episode_id"] not in not_judged:
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
                                act=t["act"], asides=tuple(asides),
                                history_blocked=tuple(bool(h["blocked"]) for h in ts[:i])))
    return out, not_judged


async def judge_batch(ctx, judges: list, episode_ids: list[str], set_ids: list[str]) -> dict:
    """Run every judge over the batch's assistant turns; write all rows in one transaction
    (each set's earlier rows for these episodes are replaced). Returns counts."""
    views, not_judged = load_turn_views(ctx, episode_ids)
    kinds = batch_kinds(ctx, judges, set_ids)
    pending: list[tuple] = []  # (kind, turn, the turn's request keys)
    for kind in kinds:
        for t in views:
            # A failed turn has nothing to judge; a blocked one is a refusal, judged by the
            # judge's own rule without a call.
            if (t.response is None and not t.blocked) or not kind.judge.wants(t):
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
    return {"episodes": len(episode_ids) - len(not_judged), "turns": len(views),
            "verdicts": len(rows), "calls": len(results),
            "failed_calls": sum(not r.ok for r in results),
            "revisions": sum(len(k.revisions) for k in kinds),
            "blocked_turns": sum(t.blocked for t in views), "unscored": dict(unscored),
            "not_judged": dict(Counter(not_judged.values())),
            "errors": [f"{r.error_kind}: {r.error}" for r in results if not r.ok]}


def agreement_rows(wh, sets: list[JudgeSet]) -> list[dict]:
    """Pairwise agreement of each voting panel (a judge with several models), per measure
    (a unit's measures pooled under their measure's name: Ben-Util's ``fulfilled``) and per
    derived label the judge names (``agreement``), from ``verdict_votes``."""
    out = []
    for js in sets:
        if len(js.models) < 2:
            continue
        labels: dict[str, dict[str, dict]] = {}
        for r in wh.query("SELECT episode_id, position, measure, judge, value, label "
                          "FROM verdict_votes WHERE judgment_set_id = ?", [js.set_id]):
            name, _, unit = r["measure"].partition(":")
            value = r["value"] if r["value"] is not None else r["label"]
            unit_key = (r["episode_id"], r["position"], unit)
            labels.setdefault(name, {}).setdefault(r["judge"], {})[unit_key] = value
            for derived, (of, rule) in js.judge.agreement.items():
                if of == name:
                    labels.setdefault(derived, {}).setdefault(r["judge"], {})[unit_key] = (
                        None if value is None else rule(value))
        for measure, lab in sorted(labels.items()):
            out += [{"judgment_set_id": js.set_id, "measure": measure, **row}
                    for row in pairwise_agreement(lab)]
    return out


def merge(parts: list[dict]) -> dict:
    out = {"episodes": 0, "turns": 0, "verdicts": 0, "calls": 0, "failed_calls": 0,
           "revisions": 0, "blocked_turns": 0}
    unscored: Counter = Counter()
    not_judged: Counter = Counter()
    for p in parts:
        for k in out:
            out[k] += p[k]
        unscored.update(p["unscored"])
        not_judged.update(p["not_judged"])
    out["unscored"] = dict(sorted(unscored.items()))
    if not_judged:  # episodes whose item a prepare stage left out, by why
        out["episodes_not_judged"] = dict(not_judged.most_common())
    return out
