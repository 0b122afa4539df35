"""The perceive-then-respond target (EYT): wraps each configured target model so that every
turn returns ``{perceived_intent, response}`` through the gateway's structured output; only
``response`` is the turn's content (what the user simulator and the next target turn see),
``perceived_intent`` is the turn's aside (episode_turns.aside, JSON), which the judges read.

Seated as ``<target>+perceive`` (tasks/targets/). The model answers the transcript with one
system message (prompts/perceive.j2 here) before it; its earlier perceived intents are not in
its history (the transcript holds responses only), so each turn's perception is stated
afresh. Sampled calls take a key from the transcript, as the plain target's do.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

import prompts
from tasks.core.registry import target_policy
from tasks.core.targets import Reply, TargetPolicy
from tasks.core.users import PolicyEnv

TARGET_ROLE = "targets"
TEMPLATE = "eyt/perceive.j2"
INTENT_CHARS = 600  # a perceived intent is one sentence; a longer one is cut in the aside


class PerceivedTurn(BaseModel):
    perceived_intent: str = Field(description="one sentence: what the user wants right now")
    response: str = Field(description="the reply shown to the user")


def target_messages(transcript: list[dict]) -> list[dict]:
    return [{"role": "system", "content": prompts.render(TEMPLATE)},
            *({"role": t["role"], "content": t["content"]} for t in transcript)]


@target_policy("perceive", roles=(TARGET_ROLE,), takes_model=True)
class Perceive(TargetPolicy):
    name = "perceive"
    takes_model = True

    async def respond(self, env, seat, state):
        msgs = target_messages(state.transcript)
        r = await env.gateway.chat(
            seat.model, TARGET_ROLE, msgs, schema=PerceivedTurn,
            sample_key=PolicyEnv.sample_key(seat.model, "target", msgs))
        if not r.ok or r.parsed is None:
            return r  # a failed or blocked call ends the episode as the engine says
        response = r.parsed.response.strip()
        if not response:
            return Reply(None, ok=False, error_kind="empty_output",
                         error="perceive: the structured answer's response is empty",
                         call_hash=r.call_hash)
        aside = json.dumps({"perceived_intent": r.parsed.perceived_intent.strip()[:INTENT_CHARS]},
                           ensure_ascii=False)
        return Reply(response, call_hash=r.call_hash, aside=aside)
