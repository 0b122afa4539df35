"""EYT's judges. Three ask a judge model (role ``eyt_judge``: one model, or a list that votes)
and one asks for embeddings (role ``embedder``, through the gateway's ``embed``):

- ``eyt_latent`` (every assistant turn): does the target's perceived intent (its aside) match
  the latent intent in force at that turn? measure ``latent_match`` 0/1. A turn without a
  perceived intent (a target not seated under ``perceive``) is unscored, with the reason;
- ``eyt_final`` (the last turn): has the conversation satisfied the final intent by then?
  measure ``final_complete`` 0/1 (its mean over episodes is FICR);
- ``eyt_subjective`` (the last turn, over the whole conversation): ``empathy``,
  ``persona_consistency``, ``anthropomorphism``, each 1-5;
- ``eyt_drift`` (every assistant turn): ``drift_latent`` = cosine distance between the
  embeddings of the perceived and the latent intent; ``drift_step`` = between this turn's
  perceived intent and the previous turn's (unscored on the first turn).

With several judge models, the binary measures take the value more than half of them gave
(``Judge.combine``) and the 1-5 ones the mean of the scored judges; either way each judge's
own value is kept as ``<measure>#<k>`` (k = its position in the config's list, 1-based) so
the views can rank targets per judge and the report can say whether judges agree (Kendall's
tau, tasks/benchmarks/eyt/report.py).
"""

from __future__ import annotations

import json
import math
from typing import Literal

from pydantic import BaseModel, Field

import prompts
from tasks.benchmarks.eyt.personas import latent_at
from tasks.core.registry import judge
from tasks.untrusted import cap_turn
from tasks.core.judges import EmbedRequest, Judge, Measure, Request
from tasks.roles import Role

JUDGE_ROLE = Role("eyt_judge", ("verdicts",), "either", "eyt/*.j2", "EytVerdict", (700, 80),
                  in_report=True)
EMBED_ROLE = "embedder"
# What is embedded of a perceived intent (an embedding model reads a short text; the judges'
# prompts cap each turn with limits.prompt_turn_chars instead).
TURN_CHARS = 2000
NO_PERCEPTION = "no perceived intent on this turn (the target is not seated under perceive)"


def perceived(aside: str | None) -> str | None:
    """The perceived intent a perceive-then-respond target stated (None: none or unreadable)."""
    if not aside:
        return None
    try:
        value = json.loads(aside).get("perceived_intent")
    except (ValueError, AttributeError):
        return None
    return value.strip() if isinstance(value, str) and value.strip() else None


def latent(turn) -> str:
    return latent_at(turn.item.hidden["trajectory"], turn.model_turn)["intent"]


def cosine_distance(a: list[float], b: list[float]) -> float | None:
    """1 - cos(a, b); None when either vector is zero (no direction to compare)."""
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    if not na or not nb or len(a) != len(b):
        return None
    # Clamped: rounding may put identical texts a hair below 0.
    return min(2.0, max(0.0, 1.0 - sum(x * y for x, y in zip(a, b)) / (na * nb)))


def conversation(turn) -> list[dict]:
    """The conversation up to and including this response, each turn capped (the templates
    fence every turn on its own)."""
    hist = [{"role": h["role"], "content": cap_turn(h.get("content") or "")} for h in turn.history]
    hist.append({"role": "assistant", "content": cap_turn(turn.response or "")})
    return hist


def per_judge(measures: tuple[str, ...], per: list[list[Measure]]) -> list[Measure]:
    """Each judge's own value of each measure, as ``<measure>#<k>`` rows (k from 1)."""
    return [Measure(f"{name}#{k}", ms[i].value, None, ms[i].reason)
            for k, ms in enumerate(per, start=1) for i, name in enumerate(measures)]


class PanelJudge(Judge):
    """Majority per measure (the engine's rule), plus each judge's own value."""

    def combine(self, per_judge_measures: list[list[Measure]]) -> list[Measure]:
        return super().combine(per_judge_measures) + per_judge(self.measures, per_judge_measures)


class LatentVerdict(BaseModel):
    reason: str
    match: bool


class LatentJudge(PanelJudge):
    def request(self, turn):
        p = perceived(turn.aside)
        if p is None or turn.blocked:
            return None
        text = prompts.render("eyt/latent.j2", latent=latent(turn), perceived=cap_turn(p))
        return Request([{"role": "user", "content": text}], LatentVerdict)

    def verdicts(self, turn, parsed):
        if parsed is None:
            return self.unscored("blocked turn" if turn.blocked else NO_PERCEPTION)
        return [Measure("latent_match", float(parsed.match), None, parsed.reason)]


class FinalVerdict(BaseModel):
    reason: str
    completed: bool


class FinalJudge(PanelJudge):
    def wants(self, turn) -> bool:
        return turn.is_last

    def request(self, turn):
        if turn.blocked:
            return None
        text = prompts.render("eyt/final.j2", final_intent=turn.item.hidden["final_intent"],
                              history=conversation(turn))
        return Request([{"role": "user", "content": text}], FinalVerdict)

    def verdicts(self, turn, parsed):
        if parsed is None:  # a blocked last turn: the final intent was not served
            return [Measure("final_complete", 0.0, None, "the last turn was blocked")]
        return [Measure("final_complete", float(parsed.completed), None, parsed.reason)]


Score = Literal[1, 2, 3, 4, 5]


class SubjectiveVerdict(BaseModel):
    reason: str
    empathy: Score = Field(description="1-5")
    persona_consistency: Score = Field(description="1-5")
    anthropomorphism: Score = Field(description="1-5")


class SubjectiveJudge(Judge):
    def wants(self, turn) -> bool:
        return turn.is_last

    def request(self, turn):
        if turn.blocked:
            return None
        text = prompts.render("eyt/subjective.j2", persona=turn.item.hidden["persona"],
                              history=conversation(turn))
        return Request([{"role": "user", "content": text}], SubjectiveVerdict)

    def verdicts(self, turn, parsed):
        if parsed is None:
            return self.unscored("the last turn was blocked")
        return [Measure(m, float(getattr(parsed, m)), None, parsed.reason) for m in self.measures]

    def combine(self, per: list[list[Measure]]) -> list[Measure]:
        """Scores 1-5: the mean of the judges that scored, and each judge's own value."""
        out = []
        for i, name in enumerate(self.measures):
            values = [ms[i].value for ms in per if ms[i].value is not None]
            out.append(Measure(name, sum(values) / len(values), None,
                               f"mean of {len(values)} of {len(per)} judges") if values else
                       Measure(name, None, None, "all judges unscored: " + "; ".join(
                           ms[i].reason or "unscored" for ms in per)))
        return out + per_judge(self.measures, per)


class DriftJudge(Judge):
    """Embedding distances; needs no judge prompt, only the embedder."""

    def request(self, turn):
        now = perceived(turn.aside)
        if now is None or turn.blocked:
            return None
        texts = [now[:TURN_CHARS], latent(turn)]
        before = perceived(turn.asides[-2]) if len(turn.asides) > 1 else None
        if before is not None:
            texts.append(before[:TURN_CHARS])
        return EmbedRequest(tuple(texts))

    def verdicts(self, turn, vectors):
        if vectors is None:
            return self.unscored("blocked turn" if turn.blocked else NO_PERCEPTION)
        d_latent = cosine_distance(vectors[0], vectors[1])
        out = [Measure("drift_latent", d_latent, None,
                       None if d_latent is not None else "a zero embedding")]
        if len(vectors) > 2:
            d_step = cosine_distance(vectors[0], vectors[2])
            out.append(Measure("drift_step", d_step, None,
                               None if d_step is not None else "a zero embedding"))
        else:
            out.append(Measure("drift_step", None, None, "no earlier perceived intent"))
        return out


JUDGES = {
    "eyt_latent": LatentJudge(kind="eyt_latent", role="eyt_judge", measures=("latent_match",),
                              templates=("eyt/latent.j2",)),
    "eyt_final": FinalJudge(kind="eyt_final", role="eyt_judge", measures=("final_complete",),
                            templates=("eyt/final.j2",)),
    "eyt_subjective": SubjectiveJudge(
        kind="eyt_subjective", role="eyt_judge",
        measures=("empathy", "persona_consistency", "anthropomorphism"),
        templates=("eyt/subjective.j2",)),
    "eyt_drift": DriftJudge(kind="eyt_drift", role=EMBED_ROLE,
                            measures=("drift_latent", "drift_step"),
                            extra_version="cosine-distance-v1"),
}
for _name, _judge in JUDGES.items():
    judge(_name, roles=(EMBED_ROLE,) if _judge.role == EMBED_ROLE else (JUDGE_ROLE,))(_judge)
