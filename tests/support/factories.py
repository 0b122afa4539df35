"""Test factories shared by the test files: a model entry with test defaults (``model_spec``),
a gateway that records every call and answers by a function of it (``FakeGateway``), and a
small config with every role on the loopback server (``base_config``).

Nothing here starts a server or touches the disk; tests/conftest.py holds the fixtures that do.
tests/support/shard_worker.py imports this module from its own process
(``python -m tests.support.shard_worker`` from the repository root), so it imports nothing
from the test suite.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from tasks.gateway import CallResult, Gateway
from tasks.model_entry import ModelSpec


def model_spec(name: str = "m", api_base: str | None = None, **over) -> ModelSpec:
    """A resolved model entry ``name`` (model ``openai/<name>``, config path ``models.<name>``):
    greedy, 64 tokens, no retries. ``over`` sets any other field of ``ModelSpec``."""
    fields = dict(name=name, model=f"openai/{name}", api_base=api_base, api_key_env=None,
                  temperature=0.0, top_p=None, max_tokens=64, seed=None, stop=None,
                  max_concurrency=4, rpm=None, timeout_s=5.0, max_retries=0,
                  structured="json_schema", mode="chat", where=f"models.{name}")
    return ModelSpec(**{**fields, **over})


@dataclass(frozen=True)
class Call:
    """One chat call as the fake gateway received it (``messages`` copied: the caller's
    transcript grows after the call)."""

    spec: Any
    role: str
    messages: list[dict]
    schema: type[BaseModel] | None
    sample_key: str | None


Answer = Callable[[Call], "str | CallResult"]


class FakeGateway:
    """Answers each chat call with ``answer(call)``: a ``CallResult`` as it is, or text, which
    becomes a successful result (call hash ``h<n>`` for the n-th call) parsed with the call's
    schema when it has one. Records every call in ``calls``. ``chat_key`` is the real
    Gateway's, so code that wraps a gateway (tasks/core/keys.py SharedCalls) works on it."""

    chat_key = staticmethod(Gateway.chat_key)

    def __init__(self, answer: Answer | None = None):
        self.answer, self.calls = answer, []

    async def chat(self, spec, role: str, messages: list[dict], *,
                   schema: type[BaseModel] | None = None, sample_key: str | None = None,
                   live: bool = False, cache_prefix: int | None = None) -> CallResult:
        call = Call(spec, role, [dict(m) for m in messages], schema, sample_key)
        self.calls.append(call)
        out = self.answer(call) if self.answer is not None else None
        if isinstance(out, CallResult):
            return out
        if not isinstance(out, str):
            # A test that gave no answer for this call: say so, not an AttributeError later.
            raise AssertionError(f"FakeGateway: no answer for a {role!r} call (got {out!r})")
        parsed = schema.model_validate_json(out) if schema is not None else None
        return CallResult(call_hash=f"h{len(self.calls)}", content=out, parsed=parsed)


def by_role(**answers: str | CallResult) -> Answer:
    """An answer function: the answer given for the call's role (a KeyError for another)."""
    return lambda call: answers[call.role]


def rounded(obj, digits: int = 9):
    """``obj`` (rows, dicts, lists) with every float rounded: DuckDB sums a view's floats in
    the order the rows were stored and its threads met them, so a mean may differ in its last
    bit between two equal warehouses. Compare numbers to ``digits`` decimals, not to the bit."""
    if isinstance(obj, float):
        return round(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(rounded(v, digits) for v in obj)
    return obj


def target_failures_only(code: int, out: str) -> bool:
    """A CLI run that finished: exit 0, or exit 1 where every error line is the rule that a
    target whose episodes all failed fails the run (a weak or scripted model's junk), never a
    crash or another error."""
    errors = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    return code == 0 or (code == 1 and bool(errors) and all(
        " episodes completed (" in ln and ln.startswith("error: target ") for ln in errors))


def as_episodes(rows: dict, benchmark: str = "carryon") -> dict:
    """Table -> rows, with CarryOnBench's ``conversations`` and ``turns`` rows (as its views
    show them) turned into the ``episodes`` and ``episode_turns`` rows the engine stores
    (tasks/benchmarks/carryon/migrate.sql does the same to an older home)."""
    rows = dict(rows)
    convs, turns = rows.pop("conversations", []), rows.pop("turns", [])
    eps = []
    for c in convs:
        oracle = c["flow_id"] == "oracle"
        done = c["status"] in ("completed", "move_check_failed")
        eps.append({"episode_id": c["conversation_id"], "benchmark": benchmark,
                    "item_id": c["query_id"], "condition": c["condition"], "target": c["target"],
                    "user_policy": "single_turn" if oracle else "scripted",
                    "script": None if oracle else c["flow_id"], "status": c["status"],
                    "termination": ("single_turn" if oracle else "turn_cap") if done else "error",
                    "n_turns": c.get("n_turns") or 0, "error": c.get("error"),
                    "error_call_hash": c.get("error_call_hash"), "run_id": c.get("run_id")})
    rows["episodes"] = rows.get("episodes", []) + eps
    rows["episode_turns"] = rows.get("episode_turns", []) + [
        {"episode_id": t["conversation_id"], "position": t["position"], "role": t["role"],
         "model_turn": t["model_turn"], "content": t.get("content"),
         "call_hash": t.get("call_hash"), "blocked": t.get("blocked")} for t in turns]
    return as_verdicts(rows, benchmark)


def as_verdicts(rows: dict, benchmark: str = "carryon") -> dict:
    """Table -> rows, with CarryOnBench's ``judgment_sets``, ``item_judgments``,
    ``safety_judgments`` and ``judge_votes`` rows (as its views show them) turned into the
    ``verdict_sets``, ``verdicts`` and ``verdict_votes`` rows the engine stores
    (tasks/benchmarks/carryon/migrate_judgments.sql does the same to an older home)."""
    rows = dict(rows)
    sets, items = rows.pop("judgment_sets", []), rows.pop("item_judgments", [])
    safety, votes = rows.pop("safety_judgments", []), rows.pop("judge_votes", [])
    if not (sets or items or safety or votes):
        return rows
    kinds = {s["judgment_set_id"]: s["kind"] for s in sets}
    rows["verdict_sets"] = rows.get("verdict_sets", []) + [
        {"judgment_set_id": s["judgment_set_id"], "benchmark": benchmark, "kind": s["kind"],
         "judge": ", ".join(json.loads(s["judges"])), "prompt_version": s["prompt_version"],
         "created": s["created"], "run_id": s["run_id"], "judges": s["judges"],
         "item_version": s.get("checklist_version"),
         "args": '{"sees_history": true}' if s.get("sees_history") else None} for s in sets]
    value = (lambda v: None if v is None else float(v))
    rows["verdicts"] = rows.get("verdicts", []) + [
        {"judgment_set_id": r["judgment_set_id"], "episode_id": r["conversation_id"],
         "position": r["position"], "measure": f"fulfilled:{r['item_id']}", "kind": "benutil",
         "model_turn": r["model_turn"], "value": value(r.get("fulfilled")),
         "reason": r.get("reason"), "call_hash": r.get("call_hash"),
         "evidence": r.get("evidence"), "item_version": r.get("checklist_version")}
        for r in items] + [
        {"judgment_set_id": r["judgment_set_id"], "episode_id": r["conversation_id"],
         "position": r["position"], "measure": "score", "kind": "safety",
         "model_turn": r["model_turn"], "value": value(r.get("score")),
         "reason": r.get("reason"), "call_hash": r.get("call_hash")} for r in safety]
    rows["verdict_votes"] = rows.get("verdict_votes", []) + [
        {"judgment_set_id": v["judgment_set_id"], "episode_id": v["conversation_id"],
         "position": v["position"], "judge": v["judge"], "kind": kinds[v["judgment_set_id"]],
         "measure": (f"fulfilled:{v['item_id']}" if kinds[v["judgment_set_id"]] == "benutil"
                     else "score"),
         "model_turn": v.get("model_turn", (v["position"] + 1) // 2),
         "value": value(v.get("value")), "reason": v.get("reason"),
         "call_hash": v.get("call_hash")} for v in votes]
    return rows


def carryon_rows(pairs: list[tuple]) -> list[tuple]:
    """``(table, rows)`` pairs for ``Warehouse.write_many``, CarryOnBench's conversations and
    turns among them written as the engine stores them (``as_episodes``)."""
    tables: dict[str, list] = {}
    for table, rows in pairs:
        tables.setdefault(table, []).extend(rows)
    return [(t, r) for t, r in as_episodes(tables).items() if r or t in dict(pairs)]


def judge_stored(ctx, episode_ids: list[str] | None = None) -> tuple[dict, dict]:
    """Judge stored episodes as the verdicts stage does, in one batch: the spec's judges, their
    sets over the episodes' prepared items (CarryOnBench's: the current checklist) and one
    ``judge_batch``. ``episode_ids``: default, the benchmark's episodes of the configured
    targets. Returns ({kind: set id}, the batch's summary)."""
    import asyncio

    from tasks.core.items import prepare_items, stored_items
    from tasks.engine.verdicts import judge_batch, judge_sets, set_rows, spec_judges

    wh, bench = ctx.warehouse, ctx.config.spec.name
    if episode_ids is None:
        targets = [s.name for s in ctx.config.role_specs("targets")]
        episode_ids = [r["episode_id"] for r in wh.query(
            "SELECT episode_id FROM episodes WHERE benchmark = ? AND list_contains(?, target) "
            "ORDER BY episode_id", [bench, targets])]
    item_ids = [r["item_id"] for r in wh.query(
        "SELECT DISTINCT item_id FROM episodes WHERE list_contains(?, episode_id)", [episode_ids])]
    items, _ = prepare_items(ctx, list(stored_items(wh, bench, item_ids).values()))
    judges, _ = spec_judges(ctx.config)
    sets = judge_sets(ctx, judges, items)
    wh.write("verdict_sets", set_rows(ctx, sets))
    out = asyncio.run(judge_batch(ctx, judges, episode_ids, [s.set_id for s in sets]))
    return {s.judge.kind: s.set_id for s in sets}, out


def carryon_item(query_id: str, query: str, source_row: int = 0) -> dict:
    """A ``bench_items`` row of CarryOnBench (what its episodes stage stores for a query)."""
    return {"benchmark": "carryon", "item_id": query_id, "source_row": source_row,
            "prompts": json.dumps({"query": query}), "hidden": "{}", "meta": "{}",
            "run_id": None}


def base_config(api_base: str, home: Path, **over) -> dict:
    """A small config with every role on the loopback server (two ensemble... three, to
    satisfy min_harmless=3)."""
    m = "openai/test-"
    cfg = {
        "home": str(home),
        "seed": 0,
        "dataset": {"source": "sample", "path": None, "limit": 2},
        "flows": {"lengths": [4, 6], "bc_per_length": 2, "nc_per_length": 1},
        "models": {
            "defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 256,
                         "max_concurrency": 8, "timeout_s": 5, "max_retries": 3},
            "targets": [{"name": "target-a", "model": m + "target-a"}],
            "user_simulator": {"model": m + "sim", "temperature": 1.0},
            "intent_rewriter": {"model": m + "helper"},
            "ensemble": [{"name": f"ens-{i}", "model": f"{m}ens-{i}"} for i in (1, 2, 3)],
            "wildguard": {"model": m + "wildguard", "mode": "chat"},
            "decomposer": {"model": m + "helper"},
            "merger": {"model": m + "helper"},
            "misuse_filter": {"model": m + "helper"},
            "benutil_judge": {"model": m + "judge"},
            "safety_judge": {"model": m + "judge"},
        },
        "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.2},
    }
    for key, value in over.items():
        cfg[key] = value
    return cfg
