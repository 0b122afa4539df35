"""The scripted user: CarryOnBench's moves (benign clarification, pushback, rephrasing, ...)
as a user policy of the episode engine, so any benchmark's items can be followed up the way
CarryOnBench follows up its queries.

A condition gives ``script: {group: BC | NC, lengths: [...], per_length: k}``; each item is
played with the move sequences CarryOnBench's sampler draws for it (``tasks/flowgen.py``,
seeded by the config's seed and the item id), one episode per sequence. Each user turn is
written by the simulator from the move's template (``prompts/user/<move>.j2``) with the
conversation so far; only benign-clarification moves see the item's benign intent
(``item.hidden[script.intent]``, default ``intent``). When the script is spent the episode
ends (``turn_cap``).
"""

from __future__ import annotations

import prompts
from tasks.engine.registry import user_policy
from tasks.flowgen import get_move, moves_for, sample_flows
from tasks.untrusted import cap_transcript
from tasks.users.base import TURN_CAP, Stop, UserTurn, clean_user_turn

SIMULATOR = "user_simulator"


@user_policy("scripted", roles=(SIMULATOR,))
class Scripted:
    name = "scripted"
    roles: tuple[str, ...] = (SIMULATOR,)

    def plans(self, item, condition, seed: int) -> list[tuple[str, ...]]:
        s = condition.script
        if s is None:
            raise ValueError(f"condition {condition.name}: the scripted user needs a script")
        flows = sample_flows(seed, item.item_id, s.lengths,
                             bc_per_length=s.per_length if s.group == "BC" else 0,
                             nc_per_length=s.per_length if s.group == "NC" else 0)
        return [f.moves for f in flows]

    async def next(self, env, state):
        k = state.model_turns - 1  # the k-th follow-up move (turn 1 is the item's prompt)
        if k >= len(state.plan):
            return Stop(TURN_CAP)
        move = state.plan[k]
        spec = env.spec(SIMULATOR)
        return await self.write(env.gateway, spec, state.item, state.condition, move,
                                state.transcript,
                                env.sample_key(spec, "user", state.transcript, move))

    async def write(self, gateway, spec, item, condition, move: str, transcript: list[dict],
                    sample_key: str | None) -> UserTurn:
        """The user turn for ``move`` after ``transcript``, written by the simulator under the
        given sample key. CarryOnBench's simulate stage calls this directly: it keys the
        sample by its prefix tree (and resamples a turn that fails the move check)."""
        ctx = {"history": cap_transcript(transcript), "move": move}  # a long turn is cut
        if get_move(move).knows_intent:  # only benign clarification is told the intent
            key = condition.script.intent if condition.script else "intent"
            intent = item.hidden.get(key)
            if not intent:
                return UserTurn(None, None, error=f"invalid_input: item {item.item_id} "
                                f"has no hidden {key!r} for a benign-clarification move",
                                error_kind="invalid_input")
            ctx["intent"] = intent
        messages = [{"role": "user", "content": prompts.render(f"user/{move}.j2", **ctx)}]
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
        s = condition.script
        if s is None:
            return {}
        return {SIMULATOR: max(moves_for(n) for n in s.lengths)}


POLICY = Scripted()
