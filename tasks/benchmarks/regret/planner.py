"""The reference planner (regret benchmark): a deterministic target policy with no model, in a
seat of its own, so its episodes are stored, judged and shown beside every target's.

It knows the item's graph (its intents and facets), never the hidden intent. Each turn it
replays the conversation so far: its own earlier questions (its decisions are deterministic,
so it recomputes which facet each asked) and the user's replies, read for the facet's values
they name (tasks/benchmarks/regret/cig.py ``parse_reply``; a reply naming none rules nothing out). Then it
decides as tasks/benchmarks/regret/cig.py ``decide`` does: exact belief over the intents, a depth-limited
search under the episode's own costs; it answers (the first alias of the most likely intent)
once one intent remains, at the turn cap, or when no question is worth its cost, and
otherwise asks the best facet, naming the values still possible.
"""

from __future__ import annotations

import dataclasses

from tasks.benchmarks.regret.cig import (Graph, Rules, answer_text, consistent, decide, parse_reply,
                       question_text)
from tasks.core.registry import target_policy
from tasks.core.targets import Reply, TargetPolicy


def observations(g: Graph, transcript: list[dict], turns: int, rules: Rules) -> list[tuple]:
    """(facet, values named) for each of the planner's ``turns`` earlier questions."""
    obs = []
    for k in range(turns):
        action = decide(g, obs, k + 1, rules)
        reply = transcript[2 * k + 2]["content"] if 2 * k + 2 < len(transcript) else ""
        if action[0] != "ask":
            continue  # it answered and the act judge read a question: nothing was learnt
        obs.append((action[1], parse_reply(g, action[1], reply or "")))
    return obs


@target_policy("planner", takes_model=False)
class Planner(TargetPolicy):
    takes_model = False

    async def respond(self, env, seat, state):
        g = Graph.from_hidden(state.item.hidden)
        # The condition's cap decides when it must answer (the responder refuses an item
        # whose rules assume another cap).
        rules = dataclasses.replace(Rules.from_hidden(state.item.hidden),
                                    max_turns=state.condition.max_turns)
        obs = observations(g, state.transcript, state.model_turns, rules)
        action = decide(g, obs, state.model_turns + 1, rules)
        if action[0] == "answer":
            return Reply(answer_text(g, action[1]))
        return Reply(question_text(g, action[1], consistent(g, obs)))
