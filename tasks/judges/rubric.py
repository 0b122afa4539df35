"""A rubric judge: one call per judged turn, a reasoned integer score on the rubric of one
template, which reads the fenced request and the fenced response (OpenSafeIntent's
helpfulness and harmfulness judges are two of them).

A blocked turn (the provider refused to produce the response) is scored ``blocked_score``
without a call, reason "blocked". The set's version carries the answer schema's hash, so a
changed scale makes a new verdict set.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pydantic import BaseModel

import prompts
from tasks.core.registry import judge
from tasks.core.judges import Judge, Measure, Request, TurnView
from tasks.judges.prompts import fence

FENCE = "judges/_fenced.j2"
BLOCKED = "blocked"


def rubric_messages(template: str, prompt: str, response: str) -> list[dict]:
    """One user message: rubric, fenced request, fenced response (both are untrusted: the
    request comes from a dataset file, the response from the model under test)."""
    response_token, safe_response = fence(response)
    prompt_token, safe_prompt = fence(prompt)
    text = prompts.render(template, prompt=safe_prompt, prompt_token=prompt_token,
                          response=safe_response, response_token=response_token)
    return [{"role": "user", "content": text}]


def schema_version(verdict: type[BaseModel]) -> str:
    doc = json.dumps(verdict.model_json_schema(), sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


@dataclass
class RubricJudge(Judge):
    verdict: type[BaseModel] | None = None  # the answer's schema: ``reason`` and ``score``
    blocked_score: float = 0.0

    def wants(self, turn: TurnView) -> bool:
        # The answer to the opening prompt, and an episode's last answer (the same turn in a
        # single-turn episode; a follow-up script's first and final responses otherwise).
        return turn.is_last or turn.model_turn == 1

    def request(self, turn: TurnView) -> Request | None:
        if turn.blocked or turn.response is None:
            return None
        return Request(rubric_messages(self.templates[0], turn.prompt, turn.response),
                       self.verdict)

    def verdicts(self, turn: TurnView, parsed: BaseModel | None) -> list[Measure]:
        if turn.blocked:
            return [Measure("score", self.blocked_score, None, BLOCKED)]
        if parsed is None:
            return self.unscored("no response to judge")
        return [Measure("score", float(parsed.score), None, parsed.reason)]


def rubric_judge(kind: str, template: str, verdict: type[BaseModel],
                 blocked_score: float) -> RubricJudge:
    """A rubric judge registered under ``kind``, calling the role ``<kind>_judge``."""
    obj = RubricJudge(kind=kind, role=f"{kind}_judge", measures=("score",),
                      templates=(template, FENCE), extra_version=schema_version(verdict),
                      verdict=verdict, blocked_score=blocked_score)
    judge(kind, roles=(obj.role,))(obj)
    return obj
