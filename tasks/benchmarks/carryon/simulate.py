"""Stage 2's core: multi-turn conversations between a user simulator and each target model,
played by the engine's one play loop (tasks/engine/episode.py) and stored as CarryOnBench's
``conversations`` / ``turns`` / ``move_checks``.

Per (target, query): the oracle conversation (one answer to the oracle prompt) and one
conversation per sampled script, each an episode of the spec's conditions: turn 1 is the query
verbatim; for each move the scripted user policy (tasks/users/scripted.py) writes the user
turn (from the move's template and the conversation so far; only the benign-clarification
moves also see the benign intent) and the target answers the whole history.

Prefix sharing (this project's choice; the paper does not say how it sampled shared prefixes):
with ``scripts.share_prefix`` a sampled call's key derives from (target, query, move prefix)
(``PrefixKeys``, tasks/engine/keys.py), so the 15 conversations of a query share the first
answer and every common prefix, which makes them correlated (Table 2's intervals are
therefore clustered by query). Within one (target, query) identical calls are made once
(``SharedCalls``): a prefix is simulated once, and a failure in it ends every conversation
through it alike. Without sharing, each conversation's sampled turns have keys of their own.
Either way, a rerun replays every call from the gateway's cache.

Failures are data: a failed call ends that conversation with a termination reason; its turns
so far are stored, the failed turn is not. One exception: a target answer the provider
refused to produce (gateway error kind ``content_blocked``) is a refusal, not a lost
conversation: stored as an assistant turn with ``blocked`` = True and the fixed text
``BLOCKED_CONTENT`` (which the target and the simulator also see in the history), and the
conversation goes on (the spec's ``after_block: continue``).

Move checking (optional, ``models.move_checker``; tasks/users/move_checker.py): every simulated user
turn is judged and a failing one sampled again (tasks/users/scripted.py); every conversation
through that prefix gets the same resampled turn. Without a checker no call or key changes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from tasks.benchmarks.carryon.conditions import BENCHMARK, carryon_conditions
from tasks.bench import load_spec
from tasks.engine.episode import BLOCKED_CONTENT, Played, play
from tasks.engine.items import Item
from tasks.engine.keys import PrefixKeys, conversation_id
from tasks.users.scripts import SampledScript
from tasks.users.move_checker import CHECKER_ROLE
# The planning (call counts per role) is its own module; re-exported here, where the plan
# stage and tests import it. The role names live there too, so it does not import this one.
from tasks.benchmarks.carryon.simulate_plan import (  # noqa: F401
    SIMULATOR_ROLE, TARGET_ROLE, _query_calls, scripts_for, plan_calls,
)
from tasks.targets import Seat
from tasks.targets.llm import LLM
from tasks.users.base import MoveCheck, PolicyEnv

__all__ = ["BLOCKED_CONTENT", "SimQuery", "conversation_id", "simulate_batch", "simulate_query"]

log = logging.getLogger("carryon.simulate")

STATUSES = ("completed", "target_error", "simulator_error", "context_exceeded", "move_check_failed")
# Conversations are written in groups of about this many (whole (target, query) slices), so a
# killed run loses at most one group of bookkeeping; its calls stay in the cache regardless.
FLUSH_EVERY = 50


@dataclass(frozen=True)
class SimQuery:
    """What the simulation needs of a query (plain data: tests and flows build it alike)."""

    query_id: str
    query: str
    intent: str
    oracle_prompt: str


@dataclass
class ConversationResult:
    row: dict
    turns: list[dict]
    checks: list[dict] = field(default_factory=list)  # move_checks rows


class SharedCalls:
    """The gateway, but each distinct chat call is made once while this object lives (one
    (target, query)): conversations through a common prefix await the same answer, or the
    same failure, as a prefix tree would give them."""

    def __init__(self, gateway):
        self._gw, self._calls = gateway, {}

    async def chat(self, spec, role, messages, *, schema=None, sample_key=None, live=False):
        key = (role, self._gw.chat_key(spec, messages, schema, sample_key), live)
        task = self._calls.get(key)
        if task is None:
            task = self._calls[key] = asyncio.ensure_future(self._gw.chat(
                spec, role, messages, schema=schema, sample_key=sample_key, live=live))
        return await task

    def __getattr__(self, name):
        return getattr(self._gw, name)


@dataclass(frozen=True)
class _Models:
    """The models the policies ask the run for, by role (PolicyEnv.config's one method)."""

    by_role: dict

    def role_spec(self, role: str):
        return self.by_role[role]


async def simulate_query(gateway, target, simulator, q: SimQuery, scripts: list[SampledScript], *,
                         share_prefix: bool = True, run_id: str | None = None, checker=None,
                         max_resamples: int = 2, exclude_failing: bool = False,
                         spec=None) -> list[ConversationResult]:
    """The oracle conversation and one conversation per script, for one target and query."""
    spec = spec or load_spec(BENCHMARK)
    names = carryon_conditions(spec)
    env = PolicyEnv(SharedCalls(gateway), _Models({SIMULATOR_ROLE: simulator}),
                    keys=PrefixKeys(share_prefix, names.oracle),
                    move_check=MoveCheck(checker, max_resamples) if checker is not None else None)
    item = Item(q.query_id, -1, {"query": q.query, "oracle": q.oracle_prompt},
                {names.intent: q.intent})
    seat = Seat(target.name, "llm", LLM(), target)
    oracle = spec.condition(names.oracle)
    work = [(oracle, (), 2)] + [(spec.condition(names.of_group(f.condition)), f.moves, f.length)
                                for f in scripts]
    played = await asyncio.gather(*(play(env, spec, item, cond, seat, run_id, moves)
                                    for cond, moves, _ in work))
    return [_conversation(p, q.query_id, moves, length, cond.name == oracle.name,
                          run_id, exclude_failing)
            for p, (cond, moves, length) in zip(played, work)]


def _conversation(p: Played, query_id: str, moves: tuple, length: int, is_oracle: bool,
                  run_id: str | None, exclude_failing: bool) -> ConversationResult:
    """An episode as CarryOnBench's rows: each turn says its move (``query`` for turn 1,
    ``oracle`` for the oracle's), the conversation its script, length and move-check flag."""
    target = p.episode["target"]
    fid = "oracle" if is_oracle else ">".join(moves)
    cid = conversation_id(target, query_id, fid)

    def move(model_turn: int) -> str:
        return "oracle" if is_oracle else ("query" if model_turn == 1 else moves[model_turn - 2])

    turns = [{"conversation_id": cid, "position": t["position"], "role": t["role"],
              "model_turn": t["model_turn"], "move": move(t["model_turn"]),
              "content": t["content"], "call_hash": t["call_hash"], "blocked": t["blocked"]}
             for t in p.turns]
    checks = [{"conversation_id": cid, **c} for c in p.checks]
    ep = p.episode
    status, error, error_hash = ep["status"], ep["error"], ep["error_call_hash"]
    kept = [c for c in checks if c["kept"]]  # one per checked user turn
    failed = [c for c in kept if c["passed"] is False]
    if failed and exclude_failing and status == "completed":
        c = failed[0]
        status, error_hash = "move_check_failed", c["call_hash"]
        error = (f"move_check_failed: user turn {c['position'] // 2 + 1} ({c['move']}) failed "
                 f"the move check after {c['attempt']} resample(s)")
    row = {"conversation_id": cid, "target": target, "query_id": query_id, "flow_id": fid,
           "condition": ep["condition"], "length": length, "n_moves": len(moves),
           "status": status, "error": error, "error_call_hash": error_hash,
           "n_turns": len(turns), "run_id": run_id,
           "move_check_failed": bool(failed) if checks else None,
           "n_blocked": sum(1 for t in turns if t["blocked"])}
    return ConversationResult(row, turns, checks)


def write_results(warehouse, results: list[ConversationResult]) -> int:
    """Replace each (target, query) slice in ONE transaction: old conversations and turns of
    the slice go, the new ones land; a reader never sees a half-written conversation.

    A slice whose stored rows are already exactly these (a rerun that replayed every call from
    the cache) is left as it is, so its rows keep the id of the run that wrote them: rewriting
    would change nothing but ``run_id``, and it was most of a cached rerun's simulation time.
    Returns the conversations written."""
    if not results:
        return 0
    with warehouse.connect():  # one attachment for the comparison and the write
        results = _changed_slices(warehouse, results)
        if not results:
            return 0
        slices = sorted({(r.row["target"], r.row["query_id"]) for r in results})
        batches: list[tuple] = []
        for target, qid in slices:
            for table in ("turns", "move_checks"):
                batches.append((table, [], ("conversation_id IN (SELECT conversation_id FROM "
                                            "conversations WHERE target = ? AND query_id = ?)",
                                            [target, qid])))
            batches.append(("conversations", [], ("target = ? AND query_id = ?", [target, qid])))
        ids = [r.row["conversation_id"] for r in results]
        for table in ("turns", "move_checks"):
            batches.append((table, [], (f"conversation_id IN ({', '.join('?' * len(ids))})", ids)))
        batches.append(("conversations", [r.row for r in results]))
        batches.append(("turns", [t for r in results for t in r.turns]))
        batches.append(("move_checks", [c for r in results for c in r.checks]))
        warehouse.write_many(batches)
    return len(results)


def _rows_of(warehouse, table: str, where: str, params: list) -> tuple[list[str], list[tuple]]:
    """The column names and the rows (tuples) of ``table`` where ``where`` holds."""
    with warehouse.connect() as con:
        cur = con.execute(f"SELECT * FROM {table} WHERE {where}", params)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
    return cols, rows


def _changed_slices(warehouse, results: list[ConversationResult]) -> list[ConversationResult]:
    """The results of the slices whose stored rows differ from them in any column but run_id
    (conversations, turns and move checks; a stored conversation the new slice lacks counts)."""
    by_slice: dict[tuple, list[ConversationResult]] = {}
    for r in results:
        by_slice.setdefault((r.row["target"], r.row["query_id"]), []).append(r)
    targets = sorted({t for t, _ in by_slice})
    queries = sorted({q for _, q in by_slice})
    in_slices = ("conversation_id IN (SELECT conversation_id FROM conversations WHERE "
                 "list_contains(?, target) AND list_contains(?, query_id))")
    stored: dict[tuple, set] = {}
    owner: dict[str, tuple] = {}
    cols, rows = _rows_of(warehouse, "conversations",
                          "list_contains(?, target) AND list_contains(?, query_id)", [targets, queries])
    conv_cols = [c for c in cols if c != "run_id"]
    for row in rows:
        d = dict(zip(cols, row))
        key = (d["target"], d["query_id"])
        owner[d["conversation_id"]] = key
        stored.setdefault(key, set()).add(("c", *(d[c] for c in conv_cols)))
    child_cols = {}
    for table, tag in (("turns", "t"), ("move_checks", "m")):
        cols, rows = _rows_of(warehouse, table, in_slices, [targets, queries])
        child_cols[tag] = cols
        for row in rows:
            d = dict(zip(cols, row))
            if d["conversation_id"] in owner:
                stored[owner[d["conversation_id"]]].add((tag, *row))
    changed = []
    for key, rs in by_slice.items():
        new = set()
        for r in rs:
            new.add(("c", *(r.row.get(c) for c in conv_cols)))
            new |= {("t", *(t.get(c) for c in child_cols["t"])) for t in r.turns}
            new |= {("m", *(m.get(c) for c in child_cols["m"])) for m in r.checks}
        if new != stored.get(key):
            changed.extend(rs)
    return changed


async def simulate_batch(ctx, queries: list[SimQuery], progress=None) -> dict:
    """Every target × the given queries; writes whole (target, query) slices as they finish.

    Returns counts: conversations by status, turns, and the gateway's requests/hits delta."""
    cfg = ctx.config
    sim = cfg.role_spec(SIMULATOR_ROLE)
    targets = cfg.role_specs(TARGET_ROLE)
    checkers = cfg.role_specs(CHECKER_ROLE)
    mc = cfg.move_check
    units = [simulate_query(ctx.gateway, t, sim, q, scripts_for(cfg, q.query_id),
                            share_prefix=cfg.scripts.share_prefix, run_id=ctx.run_id,
                            checker=checkers[0] if checkers else None,
                            max_resamples=mc.max_resamples, exclude_failing=mc.exclude_failing,
                            spec=cfg.spec)
             for t in targets for q in queries]
    by_status: dict[str, int] = {}
    n_turns = 0
    n_blocked = 0
    flagged = 0
    pending: list[ConversationResult] = []

    def flush():
        write_results(ctx.warehouse, pending)
        ctx.flush_calls()
        pending.clear()

    for fut in asyncio.as_completed(units):
        results = await fut
        for r in results:
            by_status[r.row["status"]] = by_status.get(r.row["status"], 0) + 1
            n_turns += len(r.turns)
            n_blocked += r.row["n_blocked"]
            flagged += bool(r.row["move_check_failed"])
        pending.extend(results)
        if progress is not None:
            progress.advance(len(results))
        if len(pending) >= FLUSH_EVERY:
            flush()
    flush()
    out = {"conversations": by_status, "turns": n_turns, "blocked_turns": n_blocked}
    if checkers:
        out["move_check_failed"] = flagged  # conversations flagged (excluded or not)
    return out
