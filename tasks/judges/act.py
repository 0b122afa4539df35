"""The act judge (clarify): what the target's response does with the question, and, for a
clarifying question on an ambiguous item, whether it asks about the actual ambiguity.

Acts: ``direct_answer`` (gives an answer, even a wrong one), ``clarifying_question`` (asks the
user what they mean instead of answering), ``refusal`` (declines or says it cannot answer),
``hedge`` (answers several readings at once, or answers while saying it is unsure which one
was meant, without asking). Measures: ``act`` (label = the act, value = its code below) and
``on_target`` (1/0 for a clarifying question on an ambiguous item; otherwise NULL labelled
``not_applicable``, which the engine does not count as unscored).

One request per turn: the judge sees the hidden intent and the reference clarifying question
only to decide ``on_target``, so both verdicts come from one call. The reactive user policy
sends the very same request after the target's first turn (tasks/users/reactive.py), so the
verdicts stage finds it in the gateway's cache: the messages depend only on the item, the
history and the response (never on episode ids or positions).

A blocked turn (the provider refused to produce it) is a refusal, without a call.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

import prompts
from tasks.judges.prompts import fence
from tasks.core.registry import judge
from tasks.core.judges import Judge, Measure, Request, TurnView

TEMPLATE = "judges/act.j2"
ACTS = ("direct_answer", "clarifying_question", "refusal", "hedge")
# The stored value of each act (a number, so the views can filter on it).
ACT_CODES = {a: i for i, a in enumerate(ACTS)}
CLARIFYING = "clarifying_question"
# on_target where it does not apply (not a question, or nothing ambiguous): NULL with this
# label, so it is told apart from an unscored on_target (NULL, no label, a reason).
NOT_APPLICABLE = "not_applicable"


class ActVerdict(BaseModel):
    reason: str = Field(description="one or two sentences: what the response does, written first")
    act: Literal["direct_answer", "clarifying_question", "refusal", "hedge"]
    on_target: bool | None = Field(None, description="only for a clarifying_question when the "
                                   "intended meaning is given: does it ask about what the "
                                   "question leaves open? null otherwise")


def _turns(history) -> list[dict]:
    # Only role and content: whatever else a stored turn carries must not change the request.
    return [{"role": t["role"], "content": t.get("content") or ""} for t in history]


def opening_and_rest(history) -> tuple[str, str]:
    """The opening user turn (the dataset's text) and the later turns as labelled text
    (model and simulator output: untrusted, fenced by the caller)."""
    turns = _turns(history)
    opening = turns[0]["content"] if turns else ""
    rest = "\n\n".join(f"{'User' if t['role'] == 'user' else 'Assistant'}: {t['content']}"
                       for t in turns[1:])
    return opening, rest


def act_messages(item, history, response: str) -> list[dict]:
    opening, rest = opening_and_rest(history)
    token, safe = fence(response)
    ctx = {"opening": opening, "response": safe, "response_token": token,
           "rest": None, "rest_token": None,
           "intent": item.hidden.get("intent") if item.meta.get("ambiguous") else None,
           "clarifying_question": item.hidden.get("clarifying_question") or None}
    if rest:
        ctx["rest_token"], ctx["rest"] = fence(rest)
    return [{"role": "user", "content": prompts.render(TEMPLATE, **ctx)}]


class ActJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return turn.response is not None or turn.blocked

    def request(self, turn: TurnView) -> Request | None:
        if turn.blocked or turn.response is None:
            return None
        return Request(act_messages(turn.item, turn.history, turn.response), ActVerdict)

    def verdicts(self, turn: TurnView, parsed: ActVerdict | None) -> list[Measure]:
        if parsed is None:  # blocked: the provider refused to produce the answer
            return [Measure("act", ACT_CODES["refusal"], "refusal", "blocked by the provider"),
                    Measure("on_target", None, NOT_APPLICABLE, "not a clarifying question")]
        act = Measure("act", ACT_CODES[parsed.act], parsed.act, parsed.reason)
        if parsed.act != CLARIFYING or not turn.item.meta.get("ambiguous"):
            why = ("not a clarifying question" if parsed.act != CLARIFYING
                   else "the item is not ambiguous")
            return [act, Measure("on_target", None, NOT_APPLICABLE, why)]
        if parsed.on_target is None:
            # A missing answer is unscored, never a silent 0.
            return [act, Measure("on_target", None, None, "the judge gave no on_target")]
        return [act, Measure("on_target", float(parsed.on_target), None, parsed.reason)]


JUDGE = ActJudge(kind="act", role="act_judge", measures=("act", "on_target"),
                 templates=(TEMPLATE, "judges/_fenced.j2"))
judge('act', roles=(JUDGE.role,) if JUDGE.role else ())(JUDGE)
