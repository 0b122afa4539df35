"""The persona simulator (EYT): after each target turn, the user's next message, written by
the ``user_simulator`` model from the item's persona and the latent intent in force at the
next model turn (``item.hidden["trajectory"]``, tasks/benchmarks/eyt/personas.py).

It reveals the intent progressively and never names it outright unless the trajectory's
segment says ``explicit``; when a new segment starts at the next turn it is told the intent
changed. It sees the transcript only: the responses the target gave, never what a
perceive-then-respond target stated beside them (the engine keeps asides out of the
transcript). The opening turn is the trajectory's ``opening``, verbatim (no call). The
episode ends at the condition's turn cap.
"""

from __future__ import annotations

import prompts
from tasks.benchmarks.eyt.personas import latent_at
from tasks.core.registry import user_policy
from tasks.untrusted import cap_turn
from tasks.core.users import UserTurn, clean_user_turn, UserPolicy

TEMPLATE = "eyt/simulator.j2"
SIM_ROLE = "user_simulator"


def simulator_messages(item, transcript: list[dict], next_turn: int) -> list[dict]:
    segs = item.hidden["trajectory"]
    seg = latent_at(segs, next_turn)
    history = [{"role": t["role"], "content": cap_turn(t.get("content") or "")}
               for t in transcript]
    text = prompts.render(TEMPLATE, persona=item.hidden["persona"], intent=seg["intent"],
                          shifted=seg["turn"] == next_turn and next_turn > 1,
                          explicit=seg["explicit"], history=history)
    return [{"role": "user", "content": text}]


@user_policy("persona_sim", roles=(SIM_ROLE,))
class PersonaSim(UserPolicy):
    name = "persona_sim"
    template = TEMPLATE
    roles: tuple[str, ...] = (SIM_ROLE,)

    async def next(self, env, state):
        spec = env.spec(SIM_ROLE)
        msgs = simulator_messages(state.item, state.transcript, state.model_turns + 1)
        sim = await env.gateway.chat(spec, SIM_ROLE, msgs,
                                     sample_key=env.sample_key(spec, "user", state.transcript))
        content = clean_user_turn(sim.content or "") if sim.ok else ""
        if not sim.ok or not content:
            return UserTurn(None, sim.call_hash,
                            error=(f"{sim.error_kind}: user simulator: {sim.error}" if not sim.ok
                                   else "empty_output: user simulator: no text"),
                            error_kind=sim.error_kind or "empty_output")
        return UserTurn(content, sim.call_hash)

    def calls(self, condition) -> dict[str, int]:
        # One simulator call after every target turn but the last.
        n = max(condition.max_turns - 1, 0)
        return {SIM_ROLE: n} if n else {}
