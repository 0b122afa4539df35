"""The plain target: the configured target model answers the whole transcript as chat
messages (temperature 0 or a sample key from the transcript, so episodes of one target that
share a prefix share its sampled calls and a rerun replays them)."""

from __future__ import annotations

from tasks.core.registry import target_policy
from tasks.core.targets import TargetPolicy

TARGET_ROLE = "targets"


@target_policy("llm", roles=(TARGET_ROLE,), takes_model=True)
class LLM(TargetPolicy):
    name = "llm"
    takes_model = True

    async def respond(self, env, seat, state):
        return await env.gateway.chat(seat.model, TARGET_ROLE, list(state.transcript),
                                      sample_key=env.target_key(seat, state))
