"""ClarifyMT's simulated users: the persona-conditioned reactive user (condition ``live``) and
the replay of a stored dialogue prefix (condition ``static_prefix``).

``clarifymt_persona`` (after each target turn the engine asks it for the next user turn):

1. The act judge reads the target's turn with exactly the request the verdicts stage sends
   (tasks/judges/act.py), so the stage finds it in the cache. Any act but a clarifying
   question ends the episode (``answered``); a failed act call ends it as an error.
2. The reply's *move* is decided in code, not by the simulator: ``reply_move(item, k)`` for
   the user's k-th reply (0-based) from the persona's kind and rate. A deviation shows in a
   reply when a seeded draw (item id, k) falls below the persona's ``rate``; otherwise the
   reply is precise. The move fixes the only facts the simulator is given:

   - ``precise``: each slot's true value;
   - ``partial_vague``: each slot's ``partial`` form (else the value, with an order to give
     only part of it);
   - ``off_focus``: no fact: the reply drifts to something beside the point (the item's
     ``off_topic`` if it has one);
   - ``contradictory`` (never the first reply: nothing to contradict yet): each slot's
     ``alternative``, said as if it had been meant all along;
   - ``factually_wrong``: each slot's ``wrong`` form (else the alternative), stated as fact;
   - ``refusal``: no fact: the user declines.

3. The simulator (``user_simulator``, prompts/persona_user.j2 here) phrases one reply:
   only what the question asks, from those facts; anything else it does not know. It never
   sees the reference answers. Whether a reply realises its move and leaks nothing unasked is
   the persona check's verdict (judges.py, role ``move_checker``).

``clarifymt_static`` plays each item that has a stored prefix at depths 1..3 (one episode per
depth, ``depthN`` as its script): the engine replays the first N-1 stored exchanges
(``prefix``), the target answers once, and the episode stops (``single_turn``): only that
act is new, so every model is judged on the same dialogue at the same depth.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

import prompts
from tasks.core.registry import user_policy
from tasks.untrusted import cap_turn
from tasks.core.users import SINGLE_TURN, Stop, UserPolicy
from tasks.users.reactive import Reactive

TEMPLATE = "clarifymt/persona_user.j2"
ACT_ROLE = "act_judge"
SIM_ROLE = "user_simulator"


# ----- text shown to a model -----------------------------------------------------------------
def fenced(text: str | None, label: str) -> str:
    """Model-written text, cut at the run's limits.prompt_turn_chars (tasks/untrusted.py) and
    put between BEGIN/END lines whose token the text cannot contain (the one fence rule)."""
    return prompts.fenced(cap_turn(text or "") or "", label)


def conversation(turns, user_label: str = "USER TURN", skip_opening: bool = True) -> str:
    """The turns after the opening (or all), each fenced on its own."""
    rows = list(turns)[1:] if skip_opening else list(turns)
    return "\n\n".join(fenced(t.get("content") or "", user_label if t["role"] == "user"
                              else "ASSISTANT TURN") for t in rows)


# ----- the move of one reply ------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    move: str  # a persona kind (tasks/benchmarks/clarifymt/loaders.py KINDS)
    facts: tuple[str, ...]  # "slot: text" lines the simulated user may draw on
    instruction: str  # what this reply does with them


def draw(item_id: str, k: int) -> float:
    """A uniform number in [0, 1) from the item and the reply's index (the seeded draw)."""
    return int(hashlib.sha256(f"{item_id}|reply|{k}".encode()).hexdigest()[:15], 16) / 16 ** 15


def _facts(hidden: dict, form: str | None, fallback: str | None = None) -> tuple[str, ...]:
    out = []
    for name, value in (hidden.get("slots") or {}).items():
        forms = (hidden.get("slot_forms") or {}).get(name) or {}
        text = forms.get(form) if form else value
        if text is None and fallback:
            text = forms.get(fallback)
        out.append(f"{name.replace('_', ' ')}: {text if text is not None else value}")
    return tuple(out)


INSTRUCTIONS = {
    "precise": "Answer exactly what the assistant asked, plainly and correctly, from the facts below.",
    "partial_vague": "Answer only part of what the assistant asked, in loose, vague words, using "
                     "the facts below as they are: do not make them more exact.",
    "off_focus": "Do not answer the question. Reply with something related but beside the point{topic}, "
                 "as if you had misread what was asked.",
    "contradictory": "Answer what the assistant asked with the facts below, even where they "
                     "differ from what you said earlier: say them as what you meant all along, "
                     "without pointing out the change.",
    "factually_wrong": "Answer what the assistant asked with the facts below, stated confidently "
                       "as true (you believe them, though they are wrong).",
    "refusal": "Decline to answer the question: you do not want to give details. Do not "
               "give any of the information asked for.",
}


def reply_move(item, k: int) -> Move:
    """The move of the user's k-th reply (0-based) for ``item``: its persona's kind when the
    seeded draw falls below the persona's rate (a contradiction needs an earlier reply),
    else a precise reply."""
    h = item.hidden
    kind = h.get("persona_kind") or "precise"
    rate = float(h.get("persona_rate", 1.0))
    if kind == "contradictory" and k == 0:
        kind = "precise"
    if kind != "precise" and draw(item.item_id, k) >= rate:
        kind = "precise"
    topic = f" (for example {h['off_topic']})" if h.get("off_topic") else ""
    instruction = INSTRUCTIONS[kind].format(topic=topic)
    facts = {"precise": _facts(h, None), "partial_vague": _facts(h, "partial"),
             "off_focus": (), "contradictory": _facts(h, "alternative"),
             "factually_wrong": _facts(h, "wrong", "alternative"), "refusal": ()}[kind]
    if kind == "partial_vague" and any(not ((h.get("slot_forms") or {}).get(n) or {}).get("partial")
                                       for n in h.get("slots") or {}):
        instruction += " Where a fact below is exact, give only a vague part of it."
    return Move(kind, facts, instruction)


def replies_so_far(transcript) -> int:
    """The user's replies after the opening (the index of the next one)."""
    return sum(t["role"] == "user" for t in transcript) - 1


def simulator_messages(item, transcript, move: Move) -> list[dict]:
    text = prompts.render(TEMPLATE, persona=item.hidden.get("persona"),
                          question=item.hidden.get("question") or transcript[0]["content"],
                          instruction=move.instruction, facts=list(move.facts),
                          conversation=conversation(transcript, "USER TURN (you)"))
    return [{"role": "user", "content": text}]


@user_policy("clarifymt_persona", roles=(ACT_ROLE, SIM_ROLE))
class PersonaUser(Reactive):
    """The reactive user's loop (the act judge reads the target's turn; a clarifying question
    gets a reply, anything else ends the episode), with the reply phrased from the move the
    persona makes at this point (which facts it may use, chosen in code)."""

    name = "clarifymt_persona"
    template = TEMPLATE

    def reply_messages(self, state) -> list[dict]:
        move = reply_move(state.item, replies_so_far(state.transcript))
        return simulator_messages(state.item, state.transcript, move)


# ----- the static prefix ------------------------------------------------------------------------
class StaticArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depths: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)

    @field_validator("depths")
    @classmethod
    def _depths(cls, v):
        if any(d not in (1, 2, 3) for d in v) or len(set(v)) != len(v):
            raise ValueError("distinct depths among 1, 2, 3")
        return v


def depth_of(plan) -> int:
    return int(plan[0].removeprefix("depth")) if plan else 1


@user_policy("clarifymt_static", args=StaticArgs)
class StaticPrefix(UserPolicy):
    """Replays an item's stored prefix up to a depth; the target's next act ends the episode."""

    name = "clarifymt_static"
    roles: tuple[str, ...] = ()

    def __init__(self, args: StaticArgs | None = None):
        self.args = args or StaticArgs()

    def plans(self, item, condition, seed, scripts=None) -> list[tuple[str, ...]]:
        stored = len(item.hidden.get("prefix") or []) // 2
        return [(f"depth{d}",) for d in sorted(self.args.depths) if d - 1 <= stored]

    def prefix(self, item, condition, plan) -> list[dict]:
        turns = item.hidden.get("prefix") or []
        return [dict(t) for t in turns[: 2 * (depth_of(plan) - 1)]]

    async def next(self, env, state):
        return Stop(SINGLE_TURN)

    def calls(self, condition) -> dict[str, int]:
        return {}
