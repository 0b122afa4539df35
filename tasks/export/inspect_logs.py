"""``carryon export --format inspect``: one Inspect AI eval log per benchmark and target,
written with inspect_ai's own log API (``write_eval_log``), so ``inspect view`` opens it.

Each completed episode is a sample: its turns as messages (the simulated user's as user
messages), its condition, item and termination as metadata, and its judges' verdicts as
scores: one score per (judge kind, target turn), whose value maps each measure to the
warehouse's value (None: unscored, never a zero) and whose explanation holds the judges'
reasons. The log's header holds the run's models, its config without key names and its token
usage per model and per role. inspect_ai is the optional ``[inspect]`` extra.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path

from tasks.export import tables as tb
from tasks.export.hf import new_folder, prepare, publish
from tasks.export.provenance import provenance
from tasks.export.run_info import (ExportError, clean_config, models_by_role, project_version,
                                   usage)

WITHHELD_TEXT = "[left out: this input's licence does not allow redistribution]"


@dataclass
class Logs:
    logs: dict = field(default_factory=dict)      # file name -> samples
    withheld: list = field(default_factory=list)


def _inspect():
    try:
        from inspect_ai import log as ilog
        from inspect_ai import model as imodel
        from inspect_ai import scorer as iscorer
    except ImportError:
        raise ExportError("--format inspect needs inspect_ai: pip install "
                          "'carryonbench[inspect]'") from None
    return ilog, imodel, iscorer


def log_name(benchmark: str, target: str) -> str:
    return f"{benchmark}_{re.sub(r'[^A-Za-z0-9._-]+', '-', target)}.json"


def _iso(ts) -> str:
    return ts.astimezone(timezone.utc).isoformat() if ts is not None else ""


def write_logs(wh, spec, out: Path, run_id: str | None = None, partial: bool = False,
               include_restricted: bool = False) -> Logs:
    ilog, _, _ = _inspect()
    prov = provenance(spec)
    with wh.connect(read_only=True) as con:
        p = prepare(con, spec, prov, run_id, partial, include_restricted)
        cat = tb.catalogue(con)
        episodes = _rows(con, tb.relation(cat["episodes"], spec.name, p.run_ids, p.withheld)
                         + "", "status = 'completed'")
        turns = _group(_rows(con, tb.relation(cat["episode_turns"], spec.name, p.run_ids,
                                              p.withheld)), "episode_id")
        verdicts = _group(_rows(con, (
            "SELECT v.*, s.kind AS set_kind FROM (" + tb.relation(
                cat["verdicts"], spec.name, p.run_ids, p.withheld) + ") v "
            "JOIN verdict_sets s USING (judgment_set_id)")), "episode_id")
        items = {r["item_id"]: r for r in _rows(con, "SELECT item_id, meta FROM bench_items "
                                                f"WHERE benchmark = {tb.lit(spec.name)}")}
        config = json.loads(p.run["config_json"] or "{}")
        roles = models_by_role(config)
        use = usage(con, p.run_ids)
        result = Logs(withheld=p.withheld_names)
        tmp = new_folder(out)
        try:
            by_target: dict[str, list] = {}
            for e in episodes:
                by_target.setdefault(e["target"], []).append(e)
            for target, eps in sorted(by_target.items()):
                # Rows are popped as their sample is built: the warehouse's rows and the
                # samples are not all held at once (the paper's volume is 6,560 samples).
                samples = [_sample(e, turns.pop(e["episode_id"], []),
                                   verdicts.pop(e["episode_id"], []), items.get(e["item_id"]),
                                   _model_of(target, roles))
                           for e in eps]
                log = _log(spec, p.run, config, roles, use, target, samples, partial)
                name = log_name(spec.name, target)
                # JSON, not the zipped .eval: inspect_ai 0.3.285's .eval writer re-reads its
                # buffered samples for each one it adds (196 s for 6,560 samples here, 22 s as
                # JSON); `inspect view` and read_eval_log open both.
                ilog.write_eval_log(log, str(tmp / name), format="json")
                result.logs[name] = len(samples)
                del log, samples
            if not result.logs:
                raise ExportError(f"{spec.name}: no completed episode to export")
            publish(tmp, out)
        finally:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return result


def _rows(con, sql: str, where: str | None = None) -> list[dict]:
    if where:
        sql = f"SELECT * FROM ({sql}) WHERE {where}"
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _group(rows: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def _model_of(target: str, roles: dict) -> str:
    """The model string behind a seat (``<target>+<wrapper>`` sits that target's model; a seat
    of its own, such as a reference planner, has none: its name)."""
    base = target.split("+", 1)[0]
    for m in roles.get("targets", []):
        if m["name"] == base:
            return m["model"]
    return target


def score_key(kind: str, model_turn, set_id: str, several: bool) -> str:
    return f"{kind}/t{model_turn}" + (f"/{set_id[:8]}" if several else "")


def scores_of(verdicts: list[dict], iscorer) -> dict:
    """One Score per (judge kind, target turn) (and set, where an episode has several sets of
    one kind): {measure: value} with None for an unscored verdict."""
    sets: dict[str, set] = {}
    for v in verdicts:
        sets.setdefault(v["set_kind"], set()).add(v["judgment_set_id"])
    groups: dict[str, list[dict]] = {}
    for v in verdicts:
        key = score_key(v["set_kind"], v["model_turn"], v["judgment_set_id"],
                        len(sets[v["set_kind"]]) > 1)
        groups.setdefault(key, []).append(v)
    out = {}
    for key, vs in groups.items():
        vs.sort(key=lambda v: v["measure"])
        explanation = "\n".join(f"{v['measure']}: {v['reason']}" for v in vs if v["reason"])
        out[key] = iscorer.Score(
            value={v["measure"]: v["value"] for v in vs},
            explanation=explanation or None,
            metadata={"judgment_set_id": vs[0]["judgment_set_id"], "position": vs[0]["position"],
                      "labels": {v["measure"]: v["label"] for v in vs if v["label"] is not None},
                      "evidence": {v["measure"]: v["evidence"] for v in vs
                                   if v.get("evidence") is not None}})
    return out


def _sample(e: dict, turns: list[dict], verdicts: list[dict], item: dict | None, model: str):
    ilog, imodel, iscorer = _inspect()
    kinds = {"user": imodel.ChatMessageUser, "assistant": imodel.ChatMessageAssistant,
             "system": imodel.ChatMessageSystem}
    messages = []
    for t in sorted(turns, key=lambda t: t["position"]):
        cls = kinds.get(t["role"], imodel.ChatMessageUser)
        text = t["content"] if t["content"] is not None else WITHHELD_TEXT
        kw = {"model": model} if cls is imodel.ChatMessageAssistant else {}
        messages.append(cls(content=text, **kw))
    first = next((m.text for m in messages if m.role == "user"), "")
    last = next((m.text for m in reversed(messages) if m.role == "assistant"), "")
    try:
        meta = json.loads(item["meta"]) if item else {}
    except ValueError:
        meta = {}
    return ilog.EvalSample(
        id=e["episode_id"], epoch=1, input=first, target="", messages=messages,
        output=imodel.ModelOutput.from_content(model, last),
        scores=scores_of(verdicts, iscorer) or None,
        metadata={"condition": e["condition"], "item_id": e["item_id"], "target": e["target"],
                  "termination": e["termination"], "n_turns": e["n_turns"],
                  "user_policy": e["user_policy"], "item": meta})


def _log(spec, run: dict, config: dict, roles: dict, use: dict, target: str, samples: list,
         partial: bool):
    ilog, imodel, _ = _inspect()
    model = _model_of(target, roles)
    model_usage, role_usage = {}, {}
    for r in use["by_model"]:
        for book, key in ((model_usage, r["model"]), (role_usage, r["role"])):
            u = book.setdefault(key, imodel.ModelUsage())
            u.input_tokens += r["prompt_tokens"]
            u.output_tokens += r["completion_tokens"]
            u.total_tokens += r["prompt_tokens"] + r["completion_tokens"]
    clean = clean_config(config)
    other_roles = {role: [imodel.ModelConfig(model=m["model"]) for m in ms]
                   for role, ms in roles.items() if role != "targets"}
    revision = (ilog.EvalRevision(type="git", origin="", commit=run["git_rev"])
                if run.get("git_rev") else None)
    return ilog.EvalLog(
        status="success" if run["status"] == "succeeded" else "cancelled",
        eval=ilog.EvalSpec(
            created=_iso(run["started"]), task=spec.name, task_display_name=spec.title,
            task_description=spec.description or None, run_id=run["run_id"],
            dataset=ilog.EvalDataset(name=spec.name, samples=len(samples),
                                     sample_ids=[s.id for s in samples]),
            model=model, model_roles=other_roles or None, config=ilog.EvalConfig(),
            revision=revision, packages={"carryonbench": project_version()},
            metadata={"carryon_run_id": run["run_id"], "seat": target,
                      "run_status": run["status"], "partial": partial, "config": clean,
                      "conditions": [c.name for c in spec.conditions]}),
        stats=ilog.EvalStats(started_at=_iso(run["started"]), completed_at=_iso(run["finished"]),
                             model_usage=model_usage, role_usage=role_usage),
        results=ilog.EvalResults(total_samples=len(samples), completed_samples=len(samples)),
        samples=samples)
