"""The reference judge (clarify): the response against the item's reference answers, without
a model. SQuAD-style: lower case, punctuation, the articles a/an/the and extra whitespace
removed; ``exact_match`` is 1 when the normalised response equals a normalised reference,
``token_f1`` the harmonic mean of token precision and recall (token counts as multisets);
both the maximum over the references. ``contains`` (ours, not SQuAD's) is 1 when a
normalised reference occurs in the normalised response as whole tokens: a chat model
rarely answers with the bare span, so exact match alone is near zero for every target.

Every assistant turn with a response is judged (a clarifying question scores 0, which the
views use only where a question is the final answer). A blocked turn (the provider refused
to produce it) gave no answer: 0 on every measure, with the reason. An item without
references is unscored.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from tasks.engine.registry import judge
from tasks.judges.base import Judge, Measure, TurnView

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """SQuAD's normalize_answer: lower, drop punctuation, drop articles, fix whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize(prediction) == normalize(reference))


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = normalize(prediction).split(), normalize(reference).split()
    if not pred or not ref:
        return float(pred == ref)  # both empty: a match; one empty: nothing in common
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains(prediction: str, reference: str) -> float:
    ref = normalize(reference)
    return float(bool(ref) and f" {ref} " in f" {normalize(prediction)} ")


def best(fn, prediction: str, references: list[str]) -> float:
    return max(fn(prediction, r) for r in references)


class ReferenceJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return turn.response is not None or turn.blocked

    def request(self, turn: TurnView):
        return None  # no model: judged from the text

    def verdicts(self, turn: TurnView, parsed=None) -> list[Measure]:
        refs = [r for r in turn.item.hidden.get("answers") or [] if isinstance(r, str) and r]
        if not refs:
            return self.unscored("the item has no reference answer")
        if turn.blocked or turn.response is None:
            why = "blocked by the provider: no answer"
            return [Measure(m, 0.0, None, why) for m in self.measures]
        r = turn.response
        return [Measure("exact_match", best(exact_match, r, refs)),
                Measure("token_f1", best(token_f1, r, refs)),
                Measure("contains", best(contains, r, refs))]


JUDGE = ReferenceJudge(kind="reference", role=None,
                       measures=("exact_match", "token_f1", "contains"),
                       extra_version="squad-normalize-v1+contains")
judge('reference', roles=(JUDGE.role,) if JUDGE.role else ())(JUDGE)
