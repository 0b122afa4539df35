"""The responder (regret benchmark, RegretBench style): the simulated user of a conversation
intent graph, who answers the facet a clarifying question asks about from its hidden intent,
transformed by its behaviour.

After each target turn (the engine calls ``next`` only while the turn cap allows another
exchange):

1. the act judge reads the response with the verdicts stage's own request (so the stage
   finds it in the cache); any act but ``clarifying_question`` ends the episode
   (``answered``); a blocked turn is a refusal, without a call;
2. the facet mapper (role ``facet_mapper``, tasks/benchmarks/regret/judge.py; the regret judge's very
   request) maps the question to a facet of the graph or UNSUPPORTED;
3. the values the user states come from tasks/benchmarks/regret/cig.py ``reply_values`` (cooperative, vague,
   contradictory; drawn per graph, hidden intent and facet, so a repeated question gets the
   same reply); a non-answer is the fixed ``NON_ANSWER`` text;
4. they are verbalised by the user simulator (``verbaliser: llm``, prompts/reply.j2 here:
   it sees the question and the values to state, never the intent or the answer) or by a
   template (``verbaliser: template``: no call).

The belief the replies imply is not kept here: the regret judge stores each reply's admitted
intents per turn and the views intersect them (tasks/benchmarks/regret/views.sql).

The component declares ``user_simulator`` whatever its verbaliser (a registration is
static), so a config sets it even for ``verbaliser: template``, which never calls it.

A failed call ends the episode as an error (a ``UserTurn`` with ``error``), never as an
answer. An item whose rules were written for another turn cap than the condition's is refused
the same way (its R_ref would assume another cap).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

import prompts
from tasks.benchmarks.regret.cig import Graph, Rules, reply_values
from tasks.core.registry import user_policy
from tasks.judges.prompts import fence
from tasks.core.judges import verdict_sample_key
from tasks.benchmarks.regret.judge import (CLARIFYING, FACET_MAPPER, FacetMapping, cap, facet_messages,
                                 resolve_facet)
from tasks.core.users import ANSWERED, Stop, UserTurn, drop_fence_lines, UserPolicy
from tasks.users.reactive import ACT_ROLE, SIM_ROLE, read_act, turn_view

TEMPLATE = "regret/reply.j2"
MAP_ROLE = FACET_MAPPER.name
NON_ANSWER = "I'm not sure what you mean; I can't say anything about that."


def template_reply(values: tuple[str, ...]) -> str:
    if len(values) > 1:
        return f"Maybe {values[0]}, or perhaps {values[1]}; I'm not sure."
    return f"It's {values[0]}."


def reply_messages(item, question: str, values: tuple[str, ...]) -> list[dict]:
    token, safe = fence(cap(question))
    text = prompts.render(TEMPLATE, prompt=item.prompts.get("prompt") or item.hidden["prompt"],
                          question=safe, question_token=token, values=list(values))
    return [{"role": "user", "content": text}]


class ResponderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verbaliser: Literal["llm", "template"] = "llm"


def _failed(result, who: str, act, act_hash) -> UserTurn:
    return UserTurn(None, result.call_hash, error=f"{result.error_kind}: {who}: {result.error}",
                    error_kind=result.error_kind or "invalid_output", act=act,
                    act_call_hash=act_hash)


@user_policy("responder", args=ResponderArgs, roles=(ACT_ROLE, FACET_MAPPER, SIM_ROLE))
class Responder(UserPolicy):
    name = "responder"
    template = TEMPLATE

    def __init__(self, args: ResponderArgs):
        self.args = args
        self.roles = (ACT_ROLE, MAP_ROLE) + ((SIM_ROLE,) if args.verbaliser == "llm" else ())

    async def next(self, env, state):
        turn = turn_view(state)
        if turn.blocked or turn.response is None:
            return Stop(ANSWERED, act="refusal")
        rules = Rules.from_hidden(state.item.hidden)
        if rules.max_turns != state.condition.max_turns:
            return UserTurn(None, None, error=f"invalid_input: item {state.item.item_id}: its "
                            f"rules assume max_turns {rules.max_turns}, condition "
                            f"{state.condition.name} has {state.condition.max_turns}",
                            error_kind="invalid_input")
        res = await read_act(env, turn)
        if not res.ok or res.parsed is None:
            return _failed(res, "act judge", None, res.call_hash)
        act, act_hash = res.parsed.act, res.call_hash
        if act != CLARIFYING:
            return Stop(ANSWERED, act=act, act_call_hash=act_hash)
        messages = facet_messages(state.item, turn.response)
        spec = env.spec(MAP_ROLE)
        mapped = await env.gateway.chat(spec, MAP_ROLE, messages, schema=FacetMapping,
                                        sample_key=verdict_sample_key(spec, messages))
        if not mapped.ok or mapped.parsed is None:
            return _failed(mapped, "facet mapper", act, act_hash)
        g = Graph.from_hidden(state.item.hidden)
        facet = resolve_facet(g, mapped.parsed.facet)
        values = reply_values(g, state.item.hidden["hidden_index"], facet, rules)
        if values is None:
            return UserTurn(NON_ANSWER, None, act=act, act_call_hash=act_hash)
        if self.args.verbaliser == "template":
            return UserTurn(template_reply(values), None, act=act, act_call_hash=act_hash)
        spec = env.spec(SIM_ROLE)
        sim = await env.gateway.chat(spec, SIM_ROLE, reply_messages(state.item, turn.response, values),
                                     sample_key=env.sample_key(spec, "user", state.transcript))
        content = drop_fence_lines(sim.content or "") if sim.ok else ""
        if not sim.ok:
            return _failed(sim, "user simulator", act, act_hash)
        if not content:
            return UserTurn(None, sim.call_hash, error="empty_output: user simulator: no text",
                            error_kind="empty_output", act=act, act_call_hash=act_hash)
        return UserTurn(content, sim.call_hash, act=act, act_call_hash=act_hash)

    def calls(self, condition) -> dict[str, int]:
        # After every target turn but the last: one act call, at most one mapper call and
        # one simulator call.
        n = max(condition.max_turns - 1, 0)
        return {r: n for r in self.roles} if n else {}
