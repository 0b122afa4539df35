"""A ClarifyAgent-style target policy (beyond the paper): the wrapped model decides when to ask
in four prompted steps, each a structured call of the same model, so a user can measure what
the agentic wrapper adds to their own model (seated as ``<target>+clarify_agent`` beside the
plain ``<target>``):

1. **perception** (prompts/agent_perceive.j2 here): is the request ambiguous, along which
   dimension, and what is unclear;
2. **persona forecast** (agent_forecast.j2, only once the user has replied): which kind of user
   this is (precise, vague, off-focus, contradictory, mistaken, refusing), from the replies;
3. **slot tracking** (agent_track.j2): the details the answer needs, known (with the value the
   user gave) or missing;
4. **planning** (agent_plan.j2): ask or answer, and the message itself: the conversation as chat
   messages after a system message holding steps 1-3.

Only the message is the turn's content (what the user policy and the next turn see); the
steps' results are the turn's aside (JSON, episode_turns.aside). Steps 1-3 show the
conversation fenced (a simulated user's text is data); their own outputs are fenced again
when the plan shows them. A failed step ends the turn with that call's error. Sampled calls
take keys from their own messages, so a rerun replays them.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

import prompts
from tasks.benchmarks.clarifymt.persona_user import conversation, fenced
from tasks.core.registry import target_policy
from tasks.core.targets import Reply, TargetPolicy
from tasks.core.users import PolicyEnv

TARGET_ROLE = "targets"
ASIDE_CHARS = 2000


class Perception(BaseModel):
    reason: str
    ambiguous: bool
    dimension: Literal["linguistic", "intent", "contextual", "epistemic", "interactional", "none"]
    unclear: str = Field(description="what is unclear, in one sentence; empty when nothing is")


class Forecast(BaseModel):
    reason: str
    persona: Literal["precise", "partial_vague", "off_focus", "contradictory", "factually_wrong",
                     "refusal", "unknown"]


class SlotState(BaseModel):
    known: list[str] = Field(description="details the answer needs that the user gave, as 'name: value'")
    missing: list[str] = Field(description="details the answer needs that are still unknown")


class Plan(BaseModel):
    decision: Literal["ask", "answer"]
    response: str = Field(description="the message to the user: the question, or the answer")


def _step_messages(template: str, transcript: list[dict], **ctx) -> list[dict]:
    text = prompts.render(template, conversation=conversation(transcript, skip_opening=False), **ctx)
    return [{"role": "user", "content": text}]


def plan_messages(transcript: list[dict], notes: str) -> list[dict]:
    system = prompts.render("clarifymt/agent_plan.j2", notes=fenced(notes, "AGENT NOTES"))
    return [{"role": "system", "content": system},
            *({"role": t["role"], "content": t["content"]} for t in transcript)]


@target_policy("clarify_agent", roles=(TARGET_ROLE,), takes_model=True)
class ClarifyAgent(TargetPolicy):
    name = "clarify_agent"
    takes_model = True

    async def _call(self, env, seat, kind: str, messages, schema):
        return await env.gateway.chat(seat.model, TARGET_ROLE, messages, schema=schema,
                                      sample_key=PolicyEnv.sample_key(seat.model, kind, messages))

    async def respond(self, env, seat, state):
        t = list(state.transcript)
        steps = {}
        r = await self._call(env, seat, "agent-perceive",
                             _step_messages("clarifymt/agent_perceive.j2", t), Perception)
        if not r.ok or r.parsed is None:
            return r
        steps["perception"] = r.parsed.model_dump()
        if any(x["role"] == "user" for x in t[1:]):
            r = await self._call(env, seat, "agent-forecast",
                                 _step_messages("clarifymt/agent_forecast.j2", t), Forecast)
            if not r.ok or r.parsed is None:
                return r
            steps["forecast"] = r.parsed.model_dump()
        r = await self._call(env, seat, "agent-track",
                             _step_messages("clarifymt/agent_track.j2", t,
                                            perception=fenced(json.dumps(steps["perception"]),
                                                              "PERCEPTION")), SlotState)
        if not r.ok or r.parsed is None:
            return r
        steps["slots"] = r.parsed.model_dump()
        r = await self._call(env, seat, "agent-plan",
                             plan_messages(t, json.dumps(steps, ensure_ascii=False)), Plan)
        if not r.ok or r.parsed is None:
            return r
        text = r.parsed.response.strip()
        if not text:
            return Reply(None, ok=False, error_kind="empty_output", call_hash=r.call_hash,
                         error="clarify_agent: the plan's response is empty")
        steps["decision"] = r.parsed.decision
        aside = json.dumps(steps, ensure_ascii=False)
        if len(aside) > ASIDE_CHARS:  # still JSON: the steps' text cut, and said so
            aside = json.dumps({"cut": aside[:ASIDE_CHARS]}, ensure_ascii=False)
        return Reply(text, call_hash=r.call_hash, aside=aside)

    def calls(self, condition) -> dict[str, int]:
        # Beside the model's own (the plan) per target turn: perception, forecast, tracking.
        return {TARGET_ROLE: 3}
