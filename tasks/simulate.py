"""Stage 2's core: multi-turn conversations between a user simulator and each target model.

Per (target, query): the oracle conversation (one answer to the oracle prompt) and one
conversation per sampled flow. Turn 1 is the query verbatim; for each move the simulator
writes the user turn (from the move's template and the conversation so far; only the
benign-clarification moves also see the benign intent) and the target answers the whole
history.

Prefix sharing (this project's choice; the paper does not say how it sampled shared prefixes):
an exchange is a node of a prefix tree keyed by its move prefix (``()`` = the answer to the
bare query). With ``flows.share_prefix`` every conversation of a (target, query) walks the
same tree, so a prefix is simulated once and its sampled calls carry a sample key derived from
(target, query, prefix); the 15 conversations of a query share the first answer, which makes
them correlated (Table 2's intervals are therefore clustered by query). Without it, each
conversation has its own tree and its sampled calls are keyed by (conversation, turn). Either
way, a rerun replays every call from the gateway's cache.

Failures are data: a failed call ends that conversation (and only the conversations through
that prefix) with a termination reason; its turns so far are stored, the failed turn is not.
One exception: a target answer the provider refused to produce (gateway error kind
``content_blocked``) is a refusal, not a lost conversation. It is stored as an assistant turn
with ``blocked`` = True and the fixed text ``BLOCKED_CONTENT`` (which the target and the
simulator also see in the history), and the conversation goes on.

Move checking (optional, ``models.move_checker``; tasks/move_checker.py): every simulated user
turn is judged; a failing one is sampled again under a new sample key (derived from the turn's
own key, so it stays a function of the prefix) up to ``move_check.max_resamples`` times, and
the last candidate is kept. The step is one node of the prefix tree, so every conversation
through that prefix gets the same resampled turn and continues from it. Without a checker no
call or key changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field

from tasks.bench import CarryOnConditions, carryon_conditions, load_spec, module
from tasks.engine.items import Item
from tasks.flowgen import SampledFlow
from tasks.move_checker import CHECKER_ROLE, check_turn
# The planning (call counts per role) is its own module; re-exported here, where the plan
# stage and tests import it. The role names live there too, so it does not import this one.
from tasks.simulate_plan import (  # noqa: F401
    SIMULATOR_ROLE, TARGET_ROLE, _query_calls, flows_for, plan_calls,
)

log = logging.getLogger("carryon.simulate")

STATUSES = ("completed", "target_error", "simulator_error", "context_exceeded", "move_check_failed")
# The gateway's error kind for an answer the provider refused to produce (finish reason
# content_filter, or an error the provider marks as a safety block).
BLOCKED_KIND = "content_blocked"
# What a blocked assistant turn holds (turns.content) and what later turns see in the history.
BLOCKED_CONTENT = "[No response: the provider blocked this answer.]"
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


def _hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


def conversation_id(target: str, query_id: str, flow_id: str) -> str:
    return _hash("conversation", target, query_id, flow_id)[:32]


def prefix_sample_key(role: str, target: str, query_id: str, prefix) -> str:
    """Shared mode: the same (target, query, move prefix) gives the same sample."""
    return _hash("prefix", role, target, query_id, list(prefix))


def conversation_sample_key(role: str, conv_id: str, position: int) -> str:
    """Independent mode: every conversation samples its own turns."""
    return _hash("conversation", role, conv_id, position)


def resample_key(sample_key: str, attempt: int) -> str:
    """The sample key of the ``attempt``-th resample of a user turn (attempt 0 = the key)."""
    return sample_key if attempt == 0 else _hash("resample", sample_key, attempt)


@dataclass
class _Step:
    """One exchange: the user turn and the target's answer (or the failure that ended it)."""

    move: str
    user: str | None = None
    user_hash: str | None = None
    answer: str | None = None
    answer_hash: str | None = None
    messages: list = field(default_factory=list)  # the history through this exchange
    status: str | None = None  # None = ok; else a termination reason
    error: str | None = None
    error_hash: str | None = None
    blocked: bool = False  # the provider blocked the answer (stored as a refusal)
    checks: list = field(default_factory=list)  # move checker rows, one per attempt


@dataclass
class ConversationResult:
    row: dict
    turns: list[dict]
    checks: list[dict] = field(default_factory=list)  # move_checks rows


def _failure(status: str, r) -> tuple[str, str, str]:
    if r.error_kind == "context_exceeded":
        status = "context_exceeded"
    return status, f"{r.error_kind}: {r.error}", r.call_hash


class QuerySimulation:
    """The conversations of one (target, query): a memoised prefix tree of exchanges."""

    def __init__(self, gateway, target, simulator, q: SimQuery, *, share_prefix: bool = True,
                 run_id: str | None = None, checker=None, max_resamples: int = 2,
                 exclude_failing: bool = False, conditions: CarryOnConditions | None = None,
                 spec=None):
        self.gw, self.target, self.sim, self.q = gateway, target, simulator, q
        self.share, self.run_id = share_prefix, run_id
        self.checker, self.max_resamples, self.exclude_failing = checker, max_resamples, exclude_failing
        self._steps: dict[tuple, asyncio.Future] = {}
        # The spec names the conditions and the user policy that writes the follow-up turns
        # (both groups share prefixes, so one policy and one intent key serve both).
        self.spec = spec or load_spec()
        self.names = conditions or carryon_conditions(self.spec)
        followup = self.spec.condition(self.names.bc)
        self.user, self.followup = module("tasks.users", followup.user).POLICY, followup
        self.item = Item(q.query_id, -1, {"query": q.query, "oracle": q.oracle_prompt},
                         {self.names.intent: q.intent})

    # ----- the tree ------------------------------------------------------------------------
    def _key(self, role: str, conv_id: str, prefix: tuple, position: int) -> str:
        if self.share:
            return prefix_sample_key(role, self.target.name, self.q.query_id, prefix)
        return conversation_sample_key(role, conv_id, position)

    def step(self, conv_id: str, prefix: tuple) -> asyncio.Future:
        scope = "" if self.share else conv_id
        slot = (scope, prefix)
        fut = self._steps.get(slot)
        if fut is None:
            fut = self._steps[slot] = asyncio.ensure_future(self._compute(conv_id, prefix))
        return fut

    async def _compute(self, conv_id: str, prefix: tuple) -> _Step:
        if not prefix:  # turn 1: the query verbatim, then the target's first answer
            s = _Step(move="query", user=self.q.query)
            history: list[dict] = []
        else:
            parent = await self.step(conv_id, prefix[:-1])
            s = _Step(move=prefix[-1])
            history = parent.messages
            if not await self._user_turn(s, history, conv_id, prefix):
                return s
        messages = history + [{"role": "user", "content": s.user}]
        r = await self.gw.chat(self.target, TARGET_ROLE, messages,
                               sample_key=self._key(TARGET_ROLE, conv_id, prefix, 2 * len(prefix) + 1))
        if not self._answer(s, r):
            return s
        s.messages = messages + [{"role": "assistant", "content": s.answer}]
        return s

    def _answer(self, s: _Step, r) -> bool:
        """Store the target's answer on the step; False when the call failed (the step ends
        its conversations). A provider block is an answer: a refusal, marked blocked."""
        if r.ok:
            s.answer, s.answer_hash = r.content, r.call_hash
            return True
        if r.error_kind == BLOCKED_KIND:
            s.answer, s.answer_hash, s.blocked = BLOCKED_CONTENT, r.call_hash, True
            return True
        s.status, s.error, s.error_hash = _failure("target_error", r)
        return False

    async def _user_turn(self, s: _Step, history: list[dict], conv_id: str, prefix: tuple) -> bool:
        """The user policy's turn for the step's move (checked and resampled when a move
        checker is configured); False when the first sample failed (the step ends)."""
        base = self._key(SIMULATOR_ROLE, conv_id, prefix, 2 * len(prefix))
        attempts = 1 + (self.max_resamples if self.checker is not None else 0)
        seen: set[str] = set()
        for attempt in range(attempts):
            key = resample_key(base, attempt)
            r = await self.user.write(self.gw, self.sim, self.item, self.followup, s.move,
                                      history, key)
            text = r.content or ""
            if not text:
                if attempt:  # a failed resample: keep the last candidate
                    break
                status = ("context_exceeded" if r.error_kind == "context_exceeded"
                          else "simulator_error")
                s.status, s.error, s.error_hash = status, r.error, r.call_hash
                return False
            if r.call_hash in seen:  # a greedy simulator answers the same: nothing new to check
                break
            seen.add(r.call_hash)
            s.user, s.user_hash = text, r.call_hash
            if self.checker is None:
                break
            c = await check_turn(self.gw, self.checker, s.move, self.q.intent, history, text,
                                 sample_key=_hash("check", key))
            s.checks.append({"attempt": attempt, "move": s.move, "content": text,
                             "sim_call_hash": r.call_hash, "realises_move": c.realises_move,
                             "reveals_purpose": c.reveals_purpose, "passed": c.passed,
                             "kept": False, "reasoning": c.reasoning, "error": c.error,
                             "call_hash": c.call_hash})
            if c.passed is not False:  # passed, or unchecked (the checker call failed)
                break
        if s.checks:
            s.checks[-1]["kept"] = True
        return True

    @staticmethod
    def _check_failed(s: _Step) -> bool:
        return bool(s.checks) and s.checks[-1]["passed"] is False

    # ----- conversations -------------------------------------------------------------------
    async def run_flow(self, flow: SampledFlow) -> ConversationResult:
        cid = conversation_id(self.target.name, self.q.query_id, flow.flow_id)
        steps: list[_Step] = []
        for k in range(flow.n_moves + 1):
            s = await self.step(cid, tuple(flow.moves[:k]))
            steps.append(s)
            if s.status:
                break
        return self._result(cid, flow.flow_id, self.names.of_group(flow.condition), flow.length,
                            flow.n_moves, steps)

    async def run_oracle(self) -> ConversationResult:
        # The ids and the sample key say "oracle" whatever the spec calls the condition: they
        # are cache and warehouse keys, and renaming a condition must not invalidate them.
        cond = self.spec.condition(self.names.oracle)
        cid = conversation_id(self.target.name, self.q.query_id, "oracle")
        s = _Step(move="oracle", user=self.item.prompts[cond.prompt])
        key = (prefix_sample_key(TARGET_ROLE, self.target.name, self.q.query_id, ["oracle"])
               if self.share else conversation_sample_key(TARGET_ROLE, cid, 1))
        r = await self.gw.chat(self.target, TARGET_ROLE, [{"role": "user", "content": s.user}],
                               sample_key=key)
        self._answer(s, r)
        return self._result(cid, "oracle", cond.name, 2, 0, [s])

    def _result(self, cid, fid, condition, length, n_moves, steps: list[_Step]) -> ConversationResult:
        turns, checks = [], []
        for k, s in enumerate(steps):
            if s.user is not None:
                turns.append({"conversation_id": cid, "position": 2 * k, "role": "user",
                              "model_turn": k + 1, "move": s.move, "content": s.user,
                              "call_hash": s.user_hash, "blocked": None})
                checks += [{"conversation_id": cid, "position": 2 * k, **c} for c in s.checks]
            if s.answer is not None:
                turns.append({"conversation_id": cid, "position": 2 * k + 1, "role": "assistant",
                              "model_turn": k + 1, "move": s.move, "content": s.answer,
                              "call_hash": s.answer_hash, "blocked": s.blocked})
        last = steps[-1]
        status, error, error_hash = last.status or "completed", last.error, last.error_hash
        failed = [(k, s) for k, s in enumerate(steps) if self._check_failed(s)]
        flagged = bool(failed) if checks else None
        if failed and self.exclude_failing and status == "completed":
            k, s = failed[0]
            status, error_hash = "move_check_failed", s.checks[-1]["call_hash"]
            error = (f"move_check_failed: user turn {k + 1} ({s.move}) failed the move check "
                     f"after {len(s.checks) - 1} resample(s)")
        row = {"conversation_id": cid, "target": self.target.name, "query_id": self.q.query_id,
               "flow_id": fid, "condition": condition, "length": length, "n_moves": n_moves,
               "status": status, "error": error, "error_call_hash": error_hash,
               "n_turns": len(turns), "run_id": self.run_id, "move_check_failed": flagged,
               "n_blocked": sum(1 for s in steps if s.blocked)}
        return ConversationResult(row, turns, checks)


async def simulate_query(gateway, target, simulator, q: SimQuery, flows: list[SampledFlow], *,
                         share_prefix: bool = True, run_id: str | None = None, checker=None,
                         max_resamples: int = 2, exclude_failing: bool = False,
                         spec=None) -> list[ConversationResult]:
    """The oracle conversation and one conversation per flow, for one target and query."""
    qs = QuerySimulation(gateway, target, simulator, q, share_prefix=share_prefix, run_id=run_id,
                         checker=checker, max_resamples=max_resamples,
                         exclude_failing=exclude_failing, spec=spec)
    return list(await asyncio.gather(qs.run_oracle(), *(qs.run_flow(f) for f in flows)))


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
    units = [simulate_query(ctx.gateway, t, sim, q, flows_for(cfg, q.query_id),
                            share_prefix=cfg.flows.share_prefix, run_id=ctx.run_id,
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
