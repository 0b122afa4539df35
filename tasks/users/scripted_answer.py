"""A deterministic user: answers a clarifying question with the item's hidden intent, word
for word, and otherwise lets the episode end. No simulator model, so no sampling: the
reference user for ablations (is a target's gain after asking the simulator's doing?) and
the user side of a reference-policy comparison.

The act of the target's turn comes from the act judge with the request the verdicts stage
sends later (as the reactive user does), so the stage reads it from the cache. A failed act
call ends the episode as an error, never as an answer; an item without a hidden intent ends
it as a simulator error (there is nothing to say), named in the episode's error.
"""

from __future__ import annotations

from tasks.core.registry import user_policy
from tasks.judges import act as act_judge
from tasks.core.users import UserTurn, UserPolicy
from tasks.users.reactive import ACT_ROLE, unless_asked


@user_policy("scripted_answer", roles=(ACT_ROLE,))
class ScriptedAnswer(UserPolicy):
    name = "scripted_answer"
    roles: tuple[str, ...] = (ACT_ROLE,)

    async def next(self, env, state):
        end, act_hash = await unless_asked(env, state)
        if end is not None:
            return end
        act = act_judge.CLARIFYING
        intent = (state.item.hidden.get("intent") or "").strip()
        if not intent:
            return UserTurn(None, None, error=f"invalid_input: item {state.item.item_id} has "
                            "no hidden intent to answer with", error_kind="invalid_input",
                            act=act, act_call_hash=act_hash)
        return UserTurn(intent, None, act=act, act_call_hash=act_hash)

    def calls(self, condition) -> dict[str, int]:
        n = max(condition.max_turns - 1, 0)
        return {ACT_ROLE: n} if n else {}


POLICY = ScriptedAnswer()
