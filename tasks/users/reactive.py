"""The reactive user (clarify): answers a clarifying question from the item's hidden intent,
and otherwise lets the episode end.

After each target turn (the engine calls ``next`` only while the turn cap allows another
exchange), the act judge classifies the response with exactly the request the verdicts stage
sends later (tasks/judges/act.py: messages from the item, the history and the response only),
so the stage reads the act from the gateway's cache instead of paying for it twice.

- ``clarifying_question``: the simulated user (``user_simulator``, prompts/users/reactive.j2)
  replies from ``item.hidden`` (intent, slots), in the voice of an optional persona
  (``item.hidden["persona"]`` or ``item.meta["persona"]``). It never sees the reference
  answers, so it cannot give them away; asked for something its facts do not settle it says
  it does not know or has no preference.
- any other act: ``Stop("answered")``; a blocked target turn is a refusal (no call).

A failed act call ends the episode as an error (a ``UserTurn`` with ``error``), never as an
answer: an unclassified turn counted as "answered" would bias the clarification rate down.
Its ``call_hash`` is the failed act call's, so the episode row points at it.
"""

from __future__ import annotations

import prompts
from tasks.core.judges import TurnView, verdict_sample_key
from tasks.core.registry import user_policy
from tasks.core.users import ANSWERED, Stop, UserTurn, drop_fence_lines, UserPolicy
from tasks.judges import act as act_judge
from tasks.untrusted import cap_turn

TEMPLATE = "users/reactive.j2"
ACT_ROLE = "act_judge"
SIM_ROLE = "user_simulator"


def turn_view(state) -> TurnView:
    """The target's last turn as the act judge sees it (the same fields the verdicts stage
    fills; the request reads only item, history and response)."""
    t = state.transcript
    last = t[-1]
    return TurnView(item=state.item, condition=state.condition.name, episode_id="",
                    position=len(t) - 1, model_turn=state.model_turns,
                    prompt=t[0]["content"], response=last.get("content"),
                    history=tuple({"role": x["role"], "content": x["content"]} for x in t[:-1]),
                    is_last=False, blocked=bool(last.get("blocked")))


async def read_act(env, turn: TurnView):
    """The act judge's call on the target's turn: the verdicts stage's request and its sample
    key (None at temperature 0), so the stage finds this very answer in the cache, and a
    sampled act judge judges later the act the user read."""
    req = act_judge.JUDGE.request(turn)
    spec = env.spec(ACT_ROLE)
    return await env.gateway.chat(spec, ACT_ROLE, req.messages, schema=req.schema,
                                  sample_key=verdict_sample_key(spec, req.messages))


async def unless_asked(env, state) -> tuple[Stop | UserTurn | None, str | None]:
    """(the step that ends the episode, None), unless the target's last turn asked a
    clarifying question: then (None, the act call's hash). A blocked or empty turn is a
    refusal (no call); a failed act call an error, never an answer; any other act answered."""
    turn = turn_view(state)
    if turn.blocked or turn.response is None:
        return Stop(ANSWERED, act="refusal"), None
    res = await read_act(env, turn)
    if not res.ok or res.parsed is None:
        return UserTurn(None, res.call_hash, error=_error(res, "act judge"),
                        error_kind=res.error_kind or "invalid_output",
                        act=None, act_call_hash=res.call_hash), None
    if res.parsed.act != act_judge.CLARIFYING:
        return Stop(ANSWERED, act=res.parsed.act, act_call_hash=res.call_hash), None
    return None, res.call_hash


def simulator_messages(item, transcript: list[dict]) -> list[dict]:
    hidden = item.hidden
    persona = hidden.get("persona") or item.meta.get("persona")
    slots = hidden.get("slots") or {}
    facts = [f"{k.replace('_', ' ')}: {v}" for k, v in slots.items() if v not in (None, "")]
    # The opening turn holds the whole document; the user only needs its own question.
    later = [{"role": x["role"], "content": cap_turn(x["content"] or "")} for x in transcript[1:]]
    text = prompts.render(TEMPLATE, question=hidden.get("question") or transcript[0]["content"],
                          intent=hidden.get("intent"), facts=facts, persona=persona,
                          history=later)
    return [{"role": "user", "content": text}]


def _error(result, who: str) -> str:
    return f"{result.error_kind}: {who}: {result.error}"


@user_policy("reactive", roles=(ACT_ROLE, SIM_ROLE))
class Reactive(UserPolicy):
    name = "reactive"
    template = TEMPLATE
    roles: tuple[str, ...] = (ACT_ROLE, SIM_ROLE)

    async def next(self, env, state):
        end, act_hash = await unless_asked(env, state)
        if end is not None:
            return end
        act = act_judge.CLARIFYING
        spec = env.spec(SIM_ROLE)
        sim = await env.gateway.chat(spec, SIM_ROLE, self.reply_messages(state),
                                     sample_key=env.sample_key(spec, "user", state.transcript))
        content = drop_fence_lines(sim.content or "") if sim.ok else ""
        if not sim.ok or not content:
            return UserTurn(None, sim.call_hash,
                            error=_error(sim, "user simulator") if not sim.ok
                            else "empty_output: user simulator: no text",
                            error_kind=sim.error_kind or "empty_output",
                            act=act, act_call_hash=act_hash)
        return UserTurn(content, sim.call_hash, act=act, act_call_hash=act_hash)

    def reply_messages(self, state) -> list[dict]:
        """The simulator's request for the reply (a policy that phrases replies otherwise,
        e.g. from a persona, overrides this and keeps the act-then-reply loop)."""
        return simulator_messages(state.item, state.transcript)

    def calls(self, condition) -> dict[str, int]:
        # next() runs after every target turn but the last: one act call and at most one
        # simulator call each.
        n = max(condition.max_turns - 1, 0)
        return {ACT_ROLE: n, SIM_ROLE: n} if n else {}


POLICY = Reactive()
