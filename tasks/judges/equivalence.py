"""The equivalence judge (clarify, optional): does the answer in the final response match a
reference answer? A model reads past phrasing, units and rounding that exact match and token
F1 cannot ("3,150 cakes" vs "3150"). Measure ``equivalent`` (0/1). Only the episode's last
assistant turn is judged (the final answer the views score); a blocked turn gave no answer
(0, no call); an item without references is unscored. Skipped when ``equivalence_judge`` is
not configured.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

import prompts
from tasks.judges.prompts import fence
from tasks.core.registry import judge
from tasks.core.judges import Judge, Measure, Request, TurnView

TEMPLATE = "judges/equivalence.j2"


class EquivalenceVerdict(BaseModel):
    reason: str = Field(description="what answer the response gives and how it compares, first")
    equivalent: bool = Field(description="true only if the response's answer matches a reference")


def _refs(turn: TurnView) -> list[str]:
    return [r for r in turn.item.hidden.get("answers") or [] if isinstance(r, str) and r]


def equivalence_messages(item, response: str) -> list[dict]:
    token, safe = fence(response)
    question = item.hidden.get("intent") or item.hidden.get("question") or ""
    text = prompts.render(TEMPLATE, question=question, references=item.hidden["answers"],
                          response=safe, response_token=token)
    return [{"role": "user", "content": text}]


class EquivalenceJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return turn.is_last and (turn.response is not None or turn.blocked)

    def request(self, turn: TurnView) -> Request | None:
        if turn.blocked or turn.response is None or not _refs(turn):
            return None
        return Request(equivalence_messages(turn.item, turn.response), EquivalenceVerdict)

    def verdicts(self, turn: TurnView, parsed: EquivalenceVerdict | None) -> list[Measure]:
        if not _refs(turn):
            return self.unscored("the item has no reference answer")
        if parsed is None:
            return [Measure("equivalent", 0.0, None, "blocked by the provider: no answer")]
        return [Measure("equivalent", float(parsed.equivalent), None, parsed.reason)]


JUDGE = EquivalenceJudge(kind="equivalence", role="equivalence_judge", measures=("equivalent",),
                         templates=(TEMPLATE, "judges/_fenced.j2"), optional=True)
judge('equivalence', roles=(JUDGE.role,) if JUDGE.role else ())(JUDGE)
