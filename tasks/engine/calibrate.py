"""``carryon calibrate``: how far two settings of one judge agree, measured on a sample of the
stored responses before the cheaper (or newer) setting is trusted (issue 56).

A *setting* is a judge as a config runs it: its arguments (the spec's, then the config's
``judging:`` section), its model entries and the templates it renders. The first setting is the
config's; the second is another config's (``--against``: another model, another benchmark
folder whose ``prompts/`` replaces a template), the first with some arguments changed
(``--set mode=per_response``), or, for Ben-Util with neither, the other mode (per item <->
per response). Both judge the same sample through the one judge loop (``run_calls``, with the
gateway's cache: a setting whose calls were made before costs nothing), and nothing of theirs
is written to ``verdicts``: the views keep reading the run's own sets.

The sample: completed episodes of the benchmark whose item is prepared (CarryOnBench: a query
with a checklist), drawn whole (Table 2's cells are conversation-level), stratified by target
and condition: each stratum's episodes in a seeded order, taken round-robin across strata until
the sample holds ``n`` judged responses. The same seed and warehouse give the same sample.

What it reports (tasks/engine/calibration_stats.py): per measure (Ben-Util: ``fulfilled``, its
items pooled; safety: ``score``) and per label a judge derives (safety: ``harmful``), over the
units both settings scored: agreement, disagreement, Cohen's kappa with a bootstrap interval
clustered by item (a CarryOnBench query); the units only one setting scored; where the
settings disagree most, by position in the item's units (Ben-Util: checklist position),
response length, condition and target; and, where the benchmark's report section brings one
(CarryOnBench's ``paper``: ``calibration=``), every Table 2 cell under each setting with its
shift and interval. Each run of it is a row per measure of ``judge_calibrations``; the report
prints the latest calibration of the set it reads beside its numbers.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import prompts
from tasks.core import registry
from tasks.core.items import prepare_items, stored_items
from tasks.core.judges import set_hash
from tasks.core.registry import ComponentError
from tasks.engine import calibration_stats as cs
from tasks.engine.judge_calls import BatchJudge, run_calls
from tasks.engine.verdicts import JudgeSet, load_turn_views, recipe_of, with_config_args

TABLE = "judge_calibrations"


class CalibrationError(Exception):
    """A calibration that cannot be made as asked (one line: the option or data at fault)."""


@dataclass
class Setting:
    """One judge as one config runs it."""

    label: str  # "a" (the config's) or "b" (the second)
    name: str  # the judge's name in the spec
    judge: object
    models: list
    prompts_dir: Path | None
    source: str  # where it comes from: the config file, and the arguments set
    judge_set: JudgeSet | None = field(default=None, repr=False)

    def identity(self) -> dict:
        js = self.judge_set
        return {"judge": self.name, "kind": self.judge.kind, "source": self.source,
                "models": [m.model for m in self.models],
                "entries": [m.name for m in self.models], "args": self.judge.changed_args(),
                "prompt_version": js.prompt_version if js else None,
                "set_id": js.set_id if js else None}

    def describe(self) -> str:
        args = self.judge.changed_args()
        return (f"{self.name} with {', '.join(m.model for m in self.models) or 'no model'}"
                + (f", {json.dumps(args, sort_keys=True)}" if args else ", default arguments")
                + f" ({self.source})")


def judge_of(cfg, name: str, where: str):
    """The spec's judge ``name`` with the config's ``judging:`` arguments, and its models."""
    for n, judge in cfg.spec.judge_objects():
        if n == name:
            judge = with_config_args(cfg, n, judge)
            models = cfg.role_specs(judge.role) if judge.role else []
            if judge.role and not models:
                raise CalibrationError(f"{where}: models.{judge.role}: needed by judge {name} "
                                       "but not configured")
            return judge, models
    names = [n for n, _ in cfg.spec.judge_objects()]
    raise CalibrationError(f"--judge: {name!r} is not a judge of {cfg.spec.name} "
                           f"({where} names {', '.join(names) or 'none'})")


def parse_sets(pairs: list[str]) -> dict:
    """``--set ARG=VALUE`` options as the judge's arguments (each value read as YAML)."""
    import yaml

    out = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not key.strip():
            raise CalibrationError(f"--set: {p!r} is not ARG=VALUE")
        out[key.strip()] = yaml.safe_load(value)
    return out


def settings(cfg, name: str, against=None, sets: dict | None = None) -> tuple[Setting, Setting]:
    """The two settings: the config's judge, and the second (module docstring)."""
    where = str(cfg.source_path or "config")
    judge, models = judge_of(cfg, name, where)
    a = Setting("a", name, judge, models, cfg.spec.prompts_dir, where)
    if against is not None:
        b_where = str(against.source_path or "--against")
        b_judge, b_models = judge_of(against, name, b_where)
        b_dir, b_source = against.spec.prompts_dir, b_where
    else:
        b_judge, b_models, b_dir, b_source = judge, models, cfg.spec.prompts_dir, where
    if sets is None and against is None:
        if judge.kind != "benutil":
            raise CalibrationError(f"judge {name}: name the second setting (--against CONFIG, "
                                   "or --set ARG=VALUE)")
        other = "per_response" if getattr(judge.args, "mode", "per_item") == "per_item" \
            else "per_item"
        sets = {"mode": other}
    if sets:
        args = getattr(b_judge, "args", None)
        base = args.model_dump(exclude_defaults=True) if args is not None else {}
        try:
            b_judge = registry.build("judge", name, {**base, **sets})
        except ComponentError as e:
            raise CalibrationError(f"--set: {e}") from None
        b_source += " with " + ", ".join(f"{k}={v}" for k, v in sets.items())
    b = Setting("b", name, b_judge, b_models, b_dir, b_source)
    return a, b


def draw(ctx, n: int, seed: int) -> tuple[list[str], dict[str, dict]]:
    """The sample's episode ids (module docstring) and, per episode, its item, target and
    condition."""
    wh, bench = ctx.warehouse, ctx.config.spec.name
    eps = wh.query(
        "SELECT e.episode_id, e.item_id, e.target, e.condition, count(t.position) AS responses "
        "FROM episodes e JOIN episode_turns t USING (episode_id) "
        "WHERE e.benchmark = ? AND e.status = 'completed' AND t.role = 'assistant' "
        "AND t.content IS NOT NULL GROUP BY ALL ORDER BY e.episode_id", [bench])
    stored = stored_items(wh, bench, {e["item_id"] for e in eps})
    prepared, _ = prepare_items(ctx, list(stored.values()))
    kept = {i.item_id for i in prepared}
    eps = [e for e in eps if e["item_id"] in kept]
    if not eps:
        raise CalibrationError(f"{ctx.config.home_path}: no completed {bench} episodes with a "
                               "prepared item "
                               "to judge (run `carryon run` first)")
    strata: dict[tuple, list[dict]] = defaultdict(list)
    for e in eps:
        strata[(e["target"], e["condition"])].append(e)
    rng = random.Random(seed)
    for key in sorted(strata):
        rng.shuffle(strata[key])
    order = [strata[k] for k in sorted(strata)]
    picked, total, i = [], 0, 0
    while total < n and any(i < len(s) for s in order):
        for s in order:
            if i < len(s) and total < n:
                picked.append(s[i])
                total += s[i]["responses"]
        i += 1
    return [e["episode_id"] for e in picked], {e["episode_id"]: e for e in picked}


def name_set(ctx, setting: Setting, views) -> None:
    """The set the setting's verdicts of the sample would form (its id, prompt version)."""
    items = list({t.item.item_id: t.item for t in views}.values())
    model = setting.models[0] if len(setting.models) == 1 else (setting.models or None)
    with prompts.benchmark_prompts(setting.prompts_dir):  # its templates' version
        setting.judge_set = JudgeSet(setting.judge, model, recipe_of(ctx.config.spec), items)


async def judge_sample(ctx, setting: Setting, views) -> tuple[list[dict], dict]:
    """The setting's verdict rows for the sample's turns (nothing written) and what its calls
    did."""
    recipe = recipe_of(ctx.config.spec)
    kind = BatchJudge(setting.judge, setting.models, setting.judge_set.set_id, recipe.sample_key)
    # The setting's own templates first (another benchmark folder's prompts/), for its first
    # requests and its re-asks alike.
    with prompts.benchmark_prompts(setting.prompts_dir):
        pending = [(t, kind.add(kind.requests(t))) for t in views
                   if (t.response is not None or t.blocked) and setting.judge.wants(t)]
        await run_calls(ctx.gateway, [kind])
        for t, keys in pending:
            kind.turn_rows(t, keys)
    results = kind.all_results()
    return kind.rows, {"calls": len(results), "failed_calls": sum(not r.ok for r in results),
                       "revisions": len(kind.revisions),
                       "errors": sorted({f"{r.error_kind}: {r.error}" for r in results
                                         if not r.ok})[:3]}


def _label(row: dict):
    return row["value"] if row["value"] is not None else row["label"]


def units(judge, rows_a: list[dict], rows_b: list[dict], meta: dict, views) -> dict[str, list]:
    """Per measure (a unit's measure under its name: ``fulfilled``) and derived label: one dict
    per unit with both labels (None: unscored) and what the breakdowns group by."""
    text = {(t.episode_id, t.position): t.response or "" for t in views}
    b = {(r["episode_id"], r["position"], r["measure"]): r for r in rows_b}
    position: dict[tuple, int] = {}
    out: dict[str, list] = defaultdict(list)
    for r in rows_a:
        key = (r["episode_id"], r["position"], r["measure"])
        turn = key[:2]
        position[turn] = position.get(turn, 0) + 1
        other = b.get(key)
        name, _, unit = r["measure"].partition(":")
        ep = meta[r["episode_id"]]
        base = {"cluster": ep["item_id"], "target": ep["target"], "condition": ep["condition"],
                "position": position[turn], "unit": unit or None,
                "length": cs.length_bin(len(text.get(turn, "").split()))}
        la, lb = _label(r), None if other is None else _label(other)
        out[name].append({**base, "a": la, "b": lb})
        for derived, (of, rule) in getattr(judge, "agreement", {}).items():
            if of == name:
                out[derived].append({**base, "a": None if la is None else rule(la),
                                     "b": None if lb is None else rule(lb)})
    return out


def measure_stats(us: list[dict], n_boot: int, seed: int, level: float) -> dict:
    both = [u for u in us if u["a"] is not None and u["b"] is not None]
    stats = cs.kappa_ci([(u["cluster"], u["a"], u["b"]) for u in both], n_boot, seed, level)
    scored = [{**u, "agree": u["a"] == u["b"]} for u in both]
    return {**stats, "n_units": len(us),
            "n_unscored_a": sum(u["a"] is None for u in us),
            "n_unscored_b": sum(u["b"] is None for u in us),
            "by": {by: cs.breakdown(scored, by)
                   for by in ("position", "length", "condition", "target")}}


def cells_hook(spec):
    """A report section's ``calibration=`` (Table 2 of the sample under each setting), or None."""
    for name in spec.report:
        fn = registry.lookup("section", name).meta.get("calibration")
        if fn is not None:
            return fn
    return None


async def calibrate(ctx, name: str, n: int, seed: int = cs.SEED, against=None,
                    sets: dict | None = None, n_boot: int = cs.N_BOOT,
                    level: float = cs.LEVEL) -> dict:
    """Judge a sample both ways and measure the agreement (module docstring); the result is
    stored in ``judge_calibrations`` and returned."""
    if n < 1:
        raise CalibrationError(f"--sample: {n}: at least one response")
    a, b = settings(ctx.config, name, against, sets)
    episode_ids, meta = draw(ctx, n, seed)
    views, _ = load_turn_views(ctx, episode_ids)
    for s in (a, b):
        name_set(ctx, s, views)
    if a.identity() | {"source": ""} == b.identity() | {"source": ""}:
        raise CalibrationError(f"the two settings of {name} are the same (models, arguments "
                               "and prompt version): nothing to calibrate")
    try:
        rows_a, done_a = await judge_sample(ctx, a, views)
        rows_b, done_b = await judge_sample(ctx, b, views)
    finally:
        ctx.flush_calls()  # what was spent is recorded (llm_calls), whatever happens next
    for s, done in ((a, done_a), (b, done_b)):
        if done["calls"] and done["calls"] == done["failed_calls"]:
            raise CalibrationError(f"setting {s.label} ({s.describe()}): every one of its "
                                   f"{done['calls']} calls failed: {'; '.join(done['errors'])}")
    per = units(a.judge, rows_a, rows_b, meta, views)
    measures = {m: measure_stats(us, n_boot, seed, level) for m, us in per.items()}
    if not any(m["n"] for m in measures.values()):
        raise CalibrationError("no unit was scored by both settings: no agreement to measure")
    hook = cells_hook(ctx.config.spec)
    cells = hook(ctx.warehouse, a.judge.kind, episode_ids, rows_a, rows_b, n_boot, seed,
                 level) if hook else []
    sample = {"responses": len(views), "episodes": len(episode_ids),
              "items": len({meta[e]["item_id"] for e in episode_ids}), "seed": seed,
              "asked": n}
    cid = set_hash({"benchmark": ctx.config.spec.name, "a": a.identity(), "b": b.identity(),
                    "sample": sample, "episodes": episode_ids})
    out = {"calibration_id": cid, "benchmark": ctx.config.spec.name, "kind": a.judge.kind,
           "a": a, "b": b, "sample": sample, "measures": measures, "cells": cells,
           "calls": {"a": done_a, "b": done_b},
           "n_boot": n_boot, "level": level}
    store(ctx.warehouse, out)
    return out


def store(wh, result: dict) -> int:
    """One row per measure in ``judge_calibrations`` (a calibration made again replaces its
    rows)."""
    a, b, sample = result["a"], result["b"], result["sample"]
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rows = [{"calibration_id": result["calibration_id"], "measure": m,
             "benchmark": result["benchmark"], "kind": result["kind"], "created": now,
             "setting_a": json.dumps(a.identity(), sort_keys=True),
             "setting_b": json.dumps(b.identity(), sort_keys=True),
             "prompt_version_a": a.judge_set.prompt_version,
             "prompt_version_b": b.judge_set.prompt_version,
             "judges_a": json.dumps([x.model for x in a.models]),
             "judges_b": json.dumps([x.model for x in b.models]),
             "mode_a": getattr(getattr(a.judge, "args", None), "mode", None),
             "mode_b": getattr(getattr(b.judge, "args", None), "mode", None),
             "seed": sample["seed"], "n_boot": result["n_boot"], "level": result["level"],
             "sample_responses": sample["responses"], "sample_episodes": sample["episodes"],
             "sample_items": sample["items"], "n": s["n"], "n_clusters": s["n_clusters"],
             "n_unscored_a": s["n_unscored_a"], "n_unscored_b": s["n_unscored_b"],
             "share": s["share"], "disagree": s["disagree"], "kappa": s["kappa"],
             "kappa_lo": s["ci_lo"], "kappa_hi": s["ci_hi"],
             "details": json.dumps({"by": s["by"], "cells": result["cells"]}, default=_num)}
            for m, s in result["measures"].items()]
    wh.write_many([(TABLE, rows, ("calibration_id = ?", [result["calibration_id"]]))])
    return len(rows)


def _num(x):
    # numpy numbers in the details (the cells come from pandas)
    return x.item() if hasattr(x, "item") else str(x)
