"""Episodes: one item under one condition against one target, played until a stop rule fires.

The opening user turn is the item's prompt for the condition, verbatim (no call), followed by
the stored turns the user policy replays, if it has any (``prefix``: a dialogue prefix every
target shares, e.g. ClarifyMT's static condition). Then, in turn: the target answers (its
seat's target policy, tasks/targets/: a configured model through the gateway, a wrapper
around one, or a deterministic policy); the spec's stop rules
(``stops:``, each ``rule(state) -> reason | None``, in order) may end the episode with their
reason; else if the condition's turn cap is reached it stops (``turn_cap``; ``single_turn``
when the cap is one turn); else the condition's user policy gives the next user turn or a stop (``answered``, ``user_stop``, ``single_turn``). Every episode keeps
its termination reason; a failed call ends it with status ``target_error``,
``simulator_error`` or ``context_exceeded`` and termination ``error`` (its turns so far are
kept, the metric views leave it out).

A target turn the provider blocked is stored as a refusal (``blocked``, a marker text) and
ends the episode as ``answered``: the target answered, with a refusal; unless the user policy
``continues_after_block`` (CarryOnBench's scripted user), which then answers it like any turn.
A user turn may carry the move checker's verdicts on its candidates (``UserTurn.checks``):
they are kept beside the turns (``Played.checks``, with the turn's position).

Sample keys derive from the transcript so far: episodes (of one target) that share a prefix
share its sampled calls, and a rerun replays them (the gateway's cache sends nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from dataclasses import dataclass, field

from tasks.bench import BenchmarkSpec, ConditionSpec
from tasks.core.items import Item, prepare_items, run_items
from tasks.core.keys import SharedCalls, keys_of
from tasks.core.targets import Seat, seats
from tasks.core.users import (
    ANSWERED, CHECKER_ROLE, ERROR, SINGLE_TURN, TURN_CAP, EpisodeState, MoveCheck, PolicyEnv,
    Stop, UserTurn,
)

BLOCKED_CONTENT = "[No response: the provider blocked this answer.]"


def episode_id(benchmark: str, target: str, item_id: str, condition: str,
               plan: tuple[str, ...] = ()) -> str:
    parts = (benchmark, target, item_id, condition) + ((">".join(plan),) if plan else ())
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


def episode_key(keys, benchmark: str, target: str, item_id: str, condition: str,
                plan: tuple[str, ...] = ()) -> str:
    """An episode's id under the run's key scheme (tasks/core/keys.py ``keys_of``)."""
    if keys is not None:
        return keys.episode_id(target, item_id, condition, plan)
    return episode_id(benchmark, target, item_id, condition, plan)


def run_work(ctx) -> tuple[list, list, dict, dict]:
    """The run's items as its prepare stages left them, its episodes (item, condition,
    target, script), the skipped conditions and the items a prepare stage left out (with
    why): what the episodes stage plays and the verdicts stage judges."""
    items, left_out = prepare_items(ctx, run_items(ctx))
    cfg = ctx.config
    work, skipped = plan_episodes(cfg.spec, items, run_seats(cfg), cfg.seed, cfg.scripts)
    return items, work, skipped, left_out


def plans_for(user, item: Item, condition: ConditionSpec, seed: int,
              scripts=None) -> list[tuple[str, ...]]:
    """The scripts an item is played with (one episode each); the empty script by default.
    ``scripts``: the config's ``scripts:`` section (lengths and counts a script may leave to
    the config)."""
    return [tuple(p) for p in user.plans(item, condition, seed, scripts)]


def replayed_prefix(user, item: Item, condition: ConditionSpec,
                    plan: tuple[str, ...]) -> list[dict]:
    """Stored turns the user policy replays after the opening, before the target's first
    live turn (its ``prefix(item, condition, plan)``: assistant and user turns in turn,
    ending with a user turn); none by default. Replayed turns are stored like played
    ones, without a call hash, so a later act is judged on a dialogue every target shares."""
    turns = [{"role": t["role"], "content": t["content"]} for t in user.prefix(item, condition, plan)]
    if [t["role"] for t in turns] != ["assistant", "user"] * (len(turns) // 2) or any(
            not isinstance(t["content"], str) or not t["content"].strip() for t in turns):
        raise ValueError(f"{user.name or type(user).__name__}: a replayed prefix is assistant and "
                         "user turns in turn, each with text, ending with a user turn")
    return turns


@dataclass
class Played:
    """An episode's rows: the ``episodes`` row and its ``episode_turns``."""

    episode: dict
    turns: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # move checks: position + UserTurn.checks


def opening(item: Item, condition: ConditionSpec) -> str | None:
    """The item's opening for the condition; None = the condition does not apply to the item."""
    text = item.prompts.get(condition.prompt) if condition.prompt else None
    return text if isinstance(text, str) and text.strip() else None


def stop_reason(bench: BenchmarkSpec, state: EpisodeState) -> str | None:
    """The reason of the first of the spec's stop rules that fires after a target turn."""
    for name in bench.stops:
        reason = bench.component("stop", name)(state)
        if reason:
            return reason
    return None


async def play(env: PolicyEnv, bench: BenchmarkSpec, item: Item, condition: ConditionSpec,
               seat: Seat, run_id: str | None = None, plan: tuple[str, ...] = ()) -> Played:
    user = bench.user(condition)
    eid = episode_key(env.keys, bench.name, seat.name, item.item_id, condition.name, plan)
    first = opening(item, condition)
    assert first is not None, "episodes are built only for conditions the item has"
    transcript = [{"role": "user", "content": first}]
    turns = [{"episode_id": eid, "position": 0, "role": "user", "model_turn": 1, "content": first,
              "call_hash": None, "blocked": None, "act": None, "act_call_hash": None,
              "aside": None}]
    status, termination, error, error_hash = "completed", TURN_CAP, None, None
    model_turns = 0
    checks: list[dict] = []
    continues_after_block = user.continues_after_block
    for t in replayed_prefix(user, item, condition, plan):
        model_turns += t["role"] == "assistant"
        turns.append({"episode_id": eid, "position": len(turns), "role": t["role"],
                      "model_turn": model_turns + (t["role"] == "user"), "content": t["content"],
                      "call_hash": None, "blocked": False if t["role"] == "assistant" else None,
                      "act": None, "act_call_hash": None, "aside": None})
        transcript.append(t)
    while True:
        r = await seat.policy.respond(env, seat, EpisodeState(
            item, condition, seat.name, list(transcript), model_turns, plan))
        model_turns += 1
        if not r.ok and r.error_kind != "content_blocked":
            status = "context_exceeded" if r.error_kind == "context_exceeded" else "target_error"
            termination, error, error_hash = ERROR, f"{r.error_kind}: {r.error}", r.call_hash
            break
        blocked = not r.ok
        content = BLOCKED_CONTENT if blocked else r.content
        turns.append({"episode_id": eid, "position": len(turns), "role": "assistant",
                      "model_turn": model_turns, "content": content, "call_hash": r.call_hash,
                      "blocked": blocked, "act": None, "act_call_hash": None,
                      # what the policy stated beside its response: for judges, never in
                      # the transcript the user policy reads
                      "aside": getattr(r, "aside", None)})
        transcript.append({"role": "assistant", "content": content})
        if blocked and not continues_after_block:
            termination = ANSWERED
            break
        state = EpisodeState(item, condition, seat.name, list(transcript), model_turns, plan)
        reason = stop_reason(bench, state)
        if reason:
            termination = reason
            break
        if model_turns >= condition.max_turns:
            # One exchange by construction is a single-turn episode, not a cut-off one.
            termination = SINGLE_TURN if condition.max_turns == 1 else TURN_CAP
            break
        nxt = await user.next(env, state)
        if nxt.act is not None or nxt.act_call_hash:  # a UserTurn and a Stop both carry it
            turns[-1].update(act=nxt.act, act_call_hash=nxt.act_call_hash)
        if isinstance(nxt, Stop):
            termination = nxt.reason
            break
        assert isinstance(nxt, UserTurn)
        if nxt.error:
            status = "context_exceeded" if nxt.error_kind == "context_exceeded" else "simulator_error"
            termination, error, error_hash = ERROR, nxt.error, nxt.call_hash
            break
        checks += [{"position": len(turns), **c} for c in nxt.checks]
        turns.append({"episode_id": eid, "position": len(turns), "role": "user",
                      "model_turn": model_turns + 1, "content": nxt.content,
                      "call_hash": nxt.call_hash, "blocked": None, "act": None,
                      "act_call_hash": None, "aside": None})
        transcript.append({"role": "user", "content": nxt.content})
    if status == "completed" and env.move_check is not None and env.move_check.exclude_failing:
        failed = failed_checks(checks)
        if failed:  # a user turn still failed its check: out of the metric views
            c = failed[0]
            status, error_hash = "move_check_failed", c["call_hash"]
            error = (f"move_check_failed: user turn {c['position'] // 2 + 1} ({c['move']}) "
                     f"failed the move check after {c['attempt']} resample(s)")
    row = {"episode_id": eid, "benchmark": bench.name, "item_id": item.item_id,
           "condition": condition.name, "target": seat.name, "user_policy": condition.user,
           "script": ">".join(plan) if plan else None,
           "status": status, "termination": termination, "n_turns": len(turns),
           "error": error, "error_call_hash": error_hash, "run_id": run_id}
    return Played(row, turns, checks)


def failed_checks(checks: list[dict]) -> list[dict]:
    """The move checks of user turns that went into the episode and still failed (a checker
    call that failed leaves its turn unchecked, ``passed`` None, not failed)."""
    return [c for c in checks if c["kept"] and c["passed"] is False]


def run_seats(cfg) -> list[Seat]:
    """The config's seats (tasks/targets/): its spec's target policies over its target models."""
    spec = cfg.spec
    return seats(spec, cfg.role_specs("targets") if spec.needs_target_models() else [])


def plan_episodes(bench: BenchmarkSpec, items: list[Item], targets: list[Seat],
                  seed: int = 0, scripts=None) -> tuple[list, dict]:
    """(item, condition, seat, script) for every condition an item has and every script its
    user plays, item-major; and the count of (item, condition) pairs skipped because the item
    lacks the condition's prompt."""
    out, skipped = [], {}
    for item in items:
        for cond in bench.conditions:
            if opening(item, cond) is None:
                skipped[cond.name] = skipped.get(cond.name, 0) + 1
                continue
            for plan in plans_for(bench.user(cond), item, cond, seed, scripts):
                out.extend((item, cond, t, plan) for t in targets)
    return out, skipped


async def play_batch(ctx, bench: BenchmarkSpec, work: list) -> dict:
    """Play a batch of episodes and write them (one transaction; an episode's earlier turns
    are replaced, so a shorter replay leaves no stale turn). Returns counts."""
    keys = keys_of(bench, ctx.config)
    # Under prefix keys a batch makes each distinct call once (tasks/core/keys.py).
    gateway = SharedCalls(ctx.gateway) if keys is not None else ctx.gateway
    env = PolicyEnv(gateway, ctx.config, keys=keys, move_check=move_check_of(ctx.config))
    played = await asyncio.gather(*(play(env, bench, item, cond, t, ctx.run_id, plan)
                                    for item, cond, t, plan in work))
    checks = {p.episode["episode_id"]: [{"conversation_id": p.episode["episode_id"], **c}
                                        for c in p.checks] for p in played}
    with ctx.warehouse.connect():  # one attachment for the comparison and the write
        kept = unchanged(ctx.warehouse, played, checks)
        new = [p for p in played if p.episode["episode_id"] not in kept]
        ids = [p.episode["episode_id"] for p in new]
        ctx.warehouse.write_many([
            ("episodes", [p.episode for p in new], None),
            ("episode_turns", [t for p in new for t in p.turns],
             ("list_contains(?, episode_id)", [ids])),
            # The move checker's verdicts, keyed by the episode's id.
            ("move_checks", [c for i in ids for c in checks[i]],
             ("list_contains(?, conversation_id)", [ids])),
        ])
    status = Counter(p.episode["status"] for p in played)
    term = Counter(p.episode["termination"] for p in played)
    errors = [p.episode["error"] for p in played if p.episode["error"]]
    out = {"episodes": len(played), "status": dict(status), "termination": dict(term),
           "turns": sum(len(p.turns) for p in played),
           "blocked_turns": sum(bool(t["blocked"]) for p in played for t in p.turns),
           "errors": errors,
           # Why each episode that did not complete ended (its status and error kind).
           "failures": [p.episode["status"] + (f" ({p.episode['error'].split(':', 1)[0]})"
                                               if p.episode["error"] else "")
                        for p in played if p.episode["status"] != "completed"]}
    if env.move_check is not None:  # episodes with a kept user turn that failed its check
        out["move_check_failed"] = sum(bool(failed_checks(p.checks)) for p in played)
    return out


def unchanged(wh, played: list[Played], checks: dict[str, list[dict]]) -> set[str]:
    """The ids of the played episodes whose stored rows (episode, turns, move checks) are
    exactly these but for ``run_id``: a rerun that replayed them from the cache leaves them as
    they are, with the id of the run that wrote them (rewriting them was most of a cached
    rerun's play time at the paper's volume)."""
    ids = [p.episode["episode_id"] for p in played]
    if not ids:
        return set()
    tables = (("episodes", "episode_id", lambda p: [p.episode]),
              ("episode_turns", "episode_id", lambda p: p.turns),
              ("move_checks", "conversation_id", lambda p: checks[p.episode["episode_id"]]))
    stored: dict[str, set] = {}
    new: dict[str, set] = {i: set() for i in ids}
    for table, key, rows_of in tables:
        cols = [c for c in wh.columns(table) if c != "run_id"]
        sel = ", ".join(f'"{c}"' for c in cols)
        for r in wh.query(f"SELECT {sel} FROM {table} WHERE list_contains(?, {key})", [ids]):
            stored.setdefault(r[key], set()).add((table, *(r[c] for c in cols)))
        for p in played:
            new[p.episode["episode_id"]] |= {(table, *(row.get(c) for c in cols))
                                             for row in rows_of(p)}
    return {i for i in ids if new[i] == stored.get(i)}


def move_check_of(cfg) -> MoveCheck | None:
    """The run's move check: ``models.move_checker`` with ``move_check.max_resamples`` and
    ``exclude_failing``; None
    when the config sets no checker (a user policy that checks its turns then does not)."""
    checkers = cfg.role_specs(CHECKER_ROLE)
    mc = cfg.move_check
    return MoveCheck(checkers[0], mc.max_resamples, mc.exclude_failing) if checkers else None


def merge_counts(parts: list[dict]) -> dict:
    """The batches' counts added up (the stage's summary)."""
    status, term = Counter(), Counter()
    for p in parts:
        status.update(p["status"])
        term.update(p["termination"])
    out = {"episodes": sum(p["episodes"] for p in parts), "turns": sum(p["turns"] for p in parts),
           "blocked_turns": sum(p.get("blocked_turns", 0) for p in parts),
           "status": dict(status), "termination": dict(term)}
    if any("move_check_failed" in p for p in parts):
        out["move_check_failed"] = sum(p.get("move_check_failed", 0) for p in parts)
    return out


def stored_episode_ids(wh, ids: list[str]) -> set[str]:
    """Those of ``ids`` that have an ``episodes`` row."""
    return {r["episode_id"] for r in wh.query(
        "SELECT episode_id FROM episodes WHERE list_contains(?, episode_id)", [ids])}
