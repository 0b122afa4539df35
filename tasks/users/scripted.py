"""The scripted user: CarryOnBench's moves (benign clarification, pushback, rephrasing, ...)
as a user policy of the episode engine, so any benchmark's items can be followed up the way
CarryOnBench follows up its queries.

A condition gives ``script: {group: BC | NC, lengths: [...], per_length: k}``; each item is
played with the move sequences CarryOnBench's sampler draws for it (``tasks/users/scripts.py``,
seeded by the config's seed and the item id), one episode per sequence. A script that gives
neither ``lengths`` nor ``per_length`` takes them from the config's ``scripts:`` section
(lengths, ``bc_per_length``, ``nc_per_length``), both groups drawn together as CarryOnBench
draws them. Each user turn is
written by the simulator from the move's template (``prompts/users/<move>.j2``) with the
conversation so far; only benign-clarification moves see the item's benign intent
(``item.hidden[script.intent]``, default ``intent``). When the script is spent the episode
ends (``turn_cap``).

CarryOnBench plays its conversations with this policy (its spec's BC and NC conditions), with
two of its rules as the policy's arguments and the run's settings:

- ``after_block: continue``: a target turn the provider blocked is a refusal the user answers
  like any other (the engine's default, ``end``, closes the episode as answered);
- a move check (``PolicyEnv.move_check``, from ``models.move_checker``): every user turn is
  judged; a failing one is sampled again under a new key (``tasks/core/keys.py``) up to
  ``max_resamples`` times and the last candidate is kept. Each candidate's verdict travels on
  the turn (``UserTurn.checks``). A greedy simulator that writes the same turn again ends
  the resampling: there is nothing new to check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import prompts
from tasks.core.items import ItemError
from tasks.core.keys import check_key, resample_key
from tasks.core.registry import settings, user_policy
from tasks.core.users import CHECKER_ROLE, TURN_CAP, Stop, UserTurn, clean_user_turn, UserPolicy
from tasks.untrusted import cap_transcript
from tasks.users.move_checker import check_turn
from tasks.model_entry import _Strict
from tasks.users.scripts import DEFAULT_LENGTHS, get_move, moves_for, sample_scripts

SIMULATOR = "user_simulator"


def check_lengths(lengths: list[int]) -> list[int]:
    """Conversation lengths are 4, 6, 8, 10 or 12 turns of both sides (1 to 5 moves)."""
    bad = [n for n in lengths if n not in DEFAULT_LENGTHS]
    if bad:
        raise ValueError(f"length {bad[0]} is not one of 4, 6, 8, 10, 12 (turns of both sides)")
    return lengths


@settings("scripts", aliases=("flows",), stored_as="flows", first_release=True)
class ScriptCounts(_Strict):
    """The config's ``scripts:`` section (read as ``flows:`` too, its stored name, so configs
    and homes from before the rename keep their hashes and run ids): the lengths and counts
    of the scripts a condition draws when its script leaves them to the config."""

    lengths: list[int] = Field(default_factory=lambda: list(DEFAULT_LENGTHS), min_length=1)
    bc_per_length: int = Field(2, ge=0, le=10_000)
    nc_per_length: int = Field(1, ge=0, le=10_000)

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v):
        if len(set(check_lengths(v))) != len(v):
            raise ValueError("lengths repeat")
        return v


class Script(BaseModel):
    """A condition's ``script:`` (the spec's): per conversation length, ``per_length`` move
    sequences of the group, drawn as CarryOnBench draws them. A script that leaves
    ``lengths`` and ``per_length`` unset takes them from the config's ``scripts:`` section
    (both groups drawn together, as CarryOnBench draws them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    group: Literal["BC", "NC"]  # with benign clarification, or without
    lengths: list[int] = Field(default_factory=lambda: [4], min_length=1)  # turns, both sides
    per_length: int = Field(1, ge=1, le=100)
    intent: str = "intent"  # the key of item.hidden that benign-clarification moves are told

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v):
        return check_lengths(v)


def script_of(condition) -> Script | None:
    """The condition's script as the scripted user reads it (ValueError naming the field)."""
    if condition.script is None:
        return None
    try:
        return Script.model_validate(condition.script)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(["script", *(str(p) for p in first["loc"])])
        raise ValueError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None


class ScriptedArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    after_block: Literal["end", "continue"] = "end"


# The move checker is optional: a config that sets models.move_checker gets every user turn
# checked (and resampled); without it no call or key changes.
@user_policy("scripted", args=ScriptedArgs, roles=(SIMULATOR, CHECKER_ROLE),
             optional_roles=(CHECKER_ROLE,))
class Scripted(UserPolicy):
    name = "scripted"
    roles: tuple[str, ...] = (SIMULATOR, CHECKER_ROLE)

    def __init__(self, args: ScriptedArgs | None = None):
        # Read by the engine's play loop after a blocked target turn.
        self.continues_after_block = (args or ScriptedArgs()).after_block == "continue"

    def check_condition(self, condition) -> None:
        if script_of(condition) is None:
            raise ValueError("script: the scripted user plays a script ({group: BC or NC, "
                             "...}) and this condition gives none")

    def group(self, condition) -> str | None:
        s = script_of(condition)
        return s.group if s else None

    def intent_key(self, condition) -> str:
        """The key of item.hidden its benign-clarification moves state."""
        s = script_of(condition)
        return s.intent if s else "intent"

    def plans(self, item, condition, seed: int, scripts=None) -> list[tuple[str, ...]]:
        s = script_of(condition)
        if s is None:
            raise ValueError(f"condition {condition.name}: the scripted user needs a script")
        if scripts is not None and not s.model_fields_set & {"lengths", "per_length"}:
            # A script that leaves its lengths and counts to the config's `scripts:` section
            # is drawn as CarryOnBench draws them: both groups from one draw per length, the
            # condition keeping its group's (so the BC and NC conditions of a spec never
            # share a script).
            drawn = sample_scripts(seed, item.item_id, tuple(scripts.lengths),
                                   scripts.bc_per_length, scripts.nc_per_length)
            return [f.moves for f in drawn if f.condition == s.group]
        drawn = sample_scripts(seed, item.item_id, s.lengths,
                               bc_per_length=s.per_length if s.group == "BC" else 0,
                               nc_per_length=s.per_length if s.group == "NC" else 0)
        return [f.moves for f in drawn]

    async def next(self, env, state):
        k = state.model_turns - 1  # the k-th follow-up move (turn 1 is the item's prompt)
        if k >= len(state.plan):
            return Stop(TURN_CAP)
        move = state.plan[k]
        spec = env.spec(SIMULATOR)
        key = env.user_key(spec, state, move)
        if env.move_check is None:
            return await self.write(env.gateway, spec, state.item, state.condition, move,
                                    state.transcript, key)
        return await self._checked(env, spec, state, move, key)

    async def _checked(self, env, spec, state, move: str, key: str | None) -> UserTurn:
        """The user turn for ``move``, checked and resampled (see the module docstring); an
        error only when the first sample failed."""
        mc = env.move_check
        intent = state.item.hidden.get(self.intent_key(state.condition))
        kept, checks, seen = None, [], set()
        for attempt in range(1 + mc.max_resamples):
            k = resample_key(key, attempt)
            turn = await self.write(env.gateway, spec, state.item, state.condition, move,
                                    state.transcript, k)
            if not turn.content:
                if attempt:  # a failed resample: keep the last candidate
                    break
                return turn
            if turn.call_hash in seen:  # the same turn again: nothing new to check
                break
            seen.add(turn.call_hash)
            kept = turn
            c = await check_turn(env.gateway, mc.checker, move, intent, state.transcript,
                                 turn.content, sample_key=check_key(k))
            checks.append({"attempt": attempt, "move": move, "content": turn.content,
                           "sim_call_hash": turn.call_hash, "realises_move": c.realises_move,
                           "reveals_purpose": c.reveals_purpose, "passed": c.passed,
                           "kept": False, "reasoning": c.reasoning, "error": c.error,
                           "call_hash": c.call_hash})
            if c.passed is not False:  # passed, or unchecked (the checker call failed)
                break
        checks[-1]["kept"] = True
        return replace(kept, checks=tuple(checks))

    def check_item(self, item, condition) -> None:
        """A condition whose scripts hold benign-clarification moves tells the item's intent:
        an item without one would fail every such episode (simulator_error)."""
        key = self.intent_key(condition)
        if self.group(condition) == "BC" and not item.hidden.get(key):
            raise ItemError(f"hidden.{key}", f"condition {condition.name}: the scripted user's "
                            "benign-clarification moves state the item's intent, and this "
                            f"item has none (give the loader a field for hidden.{key})")

    async def write(self, gateway, spec, item, condition, move: str, transcript: list[dict],
                    sample_key: str | None) -> UserTurn:
        """The user turn for ``move`` after ``transcript``, written by the simulator under the
        given sample key."""
        ctx = {"history": cap_transcript(transcript), "move": move}  # a long turn is cut
        if get_move(move).knows_intent:  # only benign clarification is told the intent
            key = self.intent_key(condition)
            intent = item.hidden.get(key)
            if not intent:
                return UserTurn(None, None, error=f"invalid_input: item {item.item_id} "
                                f"has no hidden {key!r} for a benign-clarification move",
                                error_kind="invalid_input")
            ctx["intent"] = intent
        messages = [{"role": "user", "content": prompts.render(f"users/{move}.j2", **ctx)}]
        r = await gateway.chat(spec, SIMULATOR, messages, sample_key=sample_key)
        if not r.ok:
            return UserTurn(None, r.call_hash, error=f"{r.error_kind}: {r.error}",
                            error_kind=r.error_kind)
        text = clean_user_turn(r.content)
        if not text:
            return UserTurn(None, r.call_hash, error="empty_output: nothing left after "
                            "removing labels and quotes", error_kind="empty_output")
        return UserTurn(text, r.call_hash)

    def calls(self, condition) -> dict[str, int]:
        s = script_of(condition)
        if s is None:
            return {}
        n = max(moves_for(n) for n in s.lengths)
        # With a move checker: one check per user turn (resamples are not counted).
        return {SIMULATOR: n, CHECKER_ROLE: n}

