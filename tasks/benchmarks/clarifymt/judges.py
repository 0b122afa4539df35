"""ClarifyMT's own judges (beside the shared ``act`` and ``reference`` judges):

- ``clarifymt_question`` (role ``question_judge``): the quality of a clarifying question,
  1-5, against the item's gold clarifying question where it has one (else against its hidden
  slots). Judged on the target's live turns of ambiguous items that the user policy did not
  read as another act; a response the judge finds is no question is ``not_applicable``
  (value NULL with that label, not unscored). The views average it over the turns the act
  judge calls clarifying questions.
- ``clarifymt_slots`` (role ``slot_judge``): slot resolution. On an episode's last turn of an
  ambiguous item: which hidden slots the user's replies had stated with their true value (the
  latest statement counts: a contradicted or wrong value is not elicited). ``slot_recall`` =
  elicited / slots, its label the elicited names. A last turn with no user reply before it
  elicited nothing (0, no call).
- ``clarifymt_persona_check`` (role ``move_checker``, optional): the move checker of the
  persona user. For each simulated user reply (not a replayed one) it reads the move the
  policy chose (persona_user.reply_move: the same seeded draw) and answers whether the reply
  realises it and whether it leaks anything the question did not ask for; ``passed`` is
  both right. It is stored on the assistant turn that follows the reply.

Model-written text (responses, simulated replies) is fenced and capped in every prompt.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

import prompts
from tasks.benchmarks.clarifymt.persona_user import conversation, fenced, reply_move
from tasks.core.registry import judge
from tasks.core.judges import Judge, Measure, Request, TurnView
from tasks.roles import Role

NOT_APPLICABLE = "not_applicable"
QUESTION_ROLE = Role("question_judge", ("verdicts",), "either", "clarifymt/question_quality.j2",
                     "QuestionQuality", (700, 80), optional=True, in_report=True)
SLOT_ROLE = Role("slot_judge", ("verdicts",), "either", "clarifymt/slots.j2", "SlotsElicited",
                 (700, 80), optional=True, in_report=True)


def is_replayed(turn: TurnView) -> bool:
    """Whether the turn is part of the stored prefix the static condition replayed."""
    prefix = turn.item.hidden.get("prefix") or []
    p = turn.position  # the opening is position 0; prefix turn i is position i + 1
    if p > len(prefix):
        return False
    shown = [{"role": h["role"], "content": h["content"]} for h in turn.history[1:]]
    shown.append({"role": "assistant", "content": turn.response})
    return shown == [{"role": t["role"], "content": t["content"]} for t in prefix[:p]]


def _slots(item) -> list[dict]:
    return [{"name": k, "value": v} for k, v in (item.hidden.get("slots") or {}).items()]


# ----- question quality --------------------------------------------------------------------
class QuestionQuality(BaseModel):
    reason: str = Field(description="one or two sentences, written first")
    is_question: bool = Field(description="does the response ask the user a clarifying question?")
    score: int | None = Field(None, ge=1, le=5, description="1-5 for a clarifying question, else null")


class QuestionJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return (turn.response is not None and not turn.blocked
                and bool(turn.item.meta.get("ambiguous")) and turn.act in (None, "clarifying_question")
                and not is_replayed(turn))

    def request(self, turn: TurnView) -> Request | None:
        text = prompts.render("clarifymt/question_quality.j2",
                              conversation=conversation(turn.history) or None,
                              response=fenced(turn.response, "RESPONSE"),
                              question=turn.item.hidden.get("question") or turn.prompt,
                              gold=turn.item.hidden.get("clarifying_question"),
                              slots=_slots(turn.item))
        return Request([{"role": "user", "content": text}], QuestionQuality)

    def verdicts(self, turn: TurnView, parsed: QuestionQuality | None) -> list[Measure]:
        if parsed is None:
            return self.unscored("no response to judge")
        if not parsed.is_question:
            return [Measure("quality", None, NOT_APPLICABLE, parsed.reason)]
        if parsed.score is None:
            return [Measure("quality", None, None, "the judge gave no score for a question")]
        return [Measure("quality", float(parsed.score), None, parsed.reason)]


QUESTION = QuestionJudge(kind="clarifymt_question", role="question_judge", measures=("quality",),
                         templates=("clarifymt/question_quality.j2",), optional=True)
judge("clarifymt_question", roles=(QUESTION_ROLE,))(QUESTION)


# ----- slot resolution ---------------------------------------------------------------------
class SlotsElicited(BaseModel):
    reason: str = Field(description="one or two sentences, written first")
    elicited: list[str] = Field(description="names of the slots the user's replies stated "
                                            "with their true value")


class SlotJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return turn.is_last and bool(_slots(turn.item)) and not turn.blocked

    def request(self, turn: TurnView) -> Request | None:
        if not any(h["role"] == "user" for h in turn.history[1:]):
            return None  # no reply yet: nothing elicited, no call
        text = prompts.render("clarifymt/slots.j2", slots=_slots(turn.item),
                              question=turn.item.hidden.get("question") or turn.prompt,
                              conversation=conversation(turn.history))
        return Request([{"role": "user", "content": text}], SlotsElicited)

    def verdicts(self, turn: TurnView, parsed: SlotsElicited | None) -> list[Measure]:
        names = [s["name"] for s in _slots(turn.item)]
        if parsed is None:
            return [Measure("slot_recall", 0.0, "", "no user reply before this turn")]
        got = sorted({n for n in parsed.elicited if n in names})
        return [Measure("slot_recall", len(got) / len(names), ",".join(got), parsed.reason)]


SLOTS = SlotJudge(kind="clarifymt_slots", role="slot_judge", measures=("slot_recall",),
                  templates=("clarifymt/slots.j2",), optional=True)
judge("clarifymt_slots", roles=(SLOT_ROLE,))(SLOTS)


# ----- the persona user's move checker ---------------------------------------------------------
class PersonaCheck(BaseModel):
    reason: str = Field(description="a short explanation, written first")
    realises_persona: bool = Field(description="does the reply do what its move prescribes?")
    leaks_unasked: bool = Field(description="does the reply volunteer a fact the question did "
                                            "not ask for, or the answer to the user's question?")


def checked_reply(turn: TurnView) -> tuple[int, str, str] | None:
    """(reply index, the question it answers, the reply) for the simulated user reply just
    before this turn; None when there is none (first turn) or it was replayed."""
    h = turn.history
    if len(h) < 3 or h[-1]["role"] != "user" or h[-2]["role"] != "assistant":
        return None
    if len(turn.item.hidden.get("prefix") or []) >= len(h) - 1:
        stored = [(t["role"], t["content"]) for t in turn.item.hidden["prefix"][: len(h) - 1]]
        if stored == [(x["role"], x["content"]) for x in h[1:]]:
            return None
    k = sum(x["role"] == "user" for x in h) - 2
    return k, h[-2]["content"] or "", h[-1]["content"] or ""


class PersonaCheckJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return checked_reply(turn) is not None

    def request(self, turn: TurnView) -> Request | None:
        k, asked, reply = checked_reply(turn)
        move = reply_move(turn.item, k)
        text = prompts.render("clarifymt/persona_check.j2", move=move.move.replace("_", "-"),
                              instruction=move.instruction, facts=list(move.facts),
                              persona=turn.item.hidden.get("persona") or "",
                              question=turn.item.hidden.get("question") or turn.prompt,
                              asked=fenced(asked, "ASSISTANT QUESTION"),
                              reply=fenced(reply, "USER REPLY"))
        return Request([{"role": "user", "content": text}], PersonaCheck)

    def verdicts(self, turn: TurnView, parsed: PersonaCheck | None) -> list[Measure]:
        if parsed is None:
            return self.unscored("no simulated reply to check")
        ok = parsed.realises_persona and not parsed.leaks_unasked
        return [Measure("realises_persona", float(parsed.realises_persona), None, parsed.reason),
                Measure("leaks_unasked", float(parsed.leaks_unasked), None, parsed.reason),
                Measure("passed", float(ok), None, parsed.reason)]


PERSONA_CHECK = PersonaCheckJudge(kind="clarifymt_persona_check", role="move_checker",
                                  measures=("realises_persona", "leaks_unasked", "passed"),
                                  templates=("clarifymt/persona_check.j2",), optional=True,
                                  extra_version="reply_move-v1")
judge("clarifymt_persona_check", roles=("move_checker",))(PERSONA_CHECK)
