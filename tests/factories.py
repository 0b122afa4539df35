"""Test factories shared by the test files: a model entry with test defaults (``model_spec``)
and a gateway that records every call and answers by a function of it (``FakeGateway``).

Nothing here starts a server or touches the disk; tests/conftest.py holds the fixtures that do.
tests/shard_worker.py imports this module from its own process (``python -m tests.shard_worker``
from the repository root), so it imports nothing from the test suite.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    Gateway's, so code that wraps a gateway (tasks/engine/keys.py SharedCalls) works on it."""

    chat_key = staticmethod(Gateway.chat_key)

    def __init__(self, answer: Answer | None = None):
        self.answer, self.calls = answer, []

    async def chat(self, spec, role: str, messages: list[dict], *,
                   schema: type[BaseModel] | None = None, sample_key: str | None = None,
                   live: bool = False) -> CallResult:
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
    return rows


def carryon_rows(pairs: list[tuple]) -> list[tuple]:
    """``(table, rows)`` pairs for ``Warehouse.write_many``, CarryOnBench's conversations and
    turns among them written as the engine stores them (``as_episodes``)."""
    tables: dict[str, list] = {}
    for table, rows in pairs:
        tables.setdefault(table, []).extend(rows)
    return [(t, r) for t, r in as_episodes(tables).items() if r or t in dict(pairs)]
