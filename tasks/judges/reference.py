"""The reference judge (clarify): the response against the item's reference answers, without
a model. SQuAD-style: lower case, punctuation, the articles a/an/the and extra whitespace
removed; ``exact_match`` is 1 when the normalised response equals a normalised reference,
``token_f1`` the harmonic mean of token precision and recall (token counts as multisets);
both the maximum over the references. ``contains`` (ours, not SQuAD's) is 1 when a
normalised reference occurs in the normalised response as whole tokens: a chat model
rarely answers with the bare span, so exact match alone is near zero for every target.

A multi-span reference (``hidden["answer_spans"]``: PACIFIC's ``["41.6", "38.2"]``) is scored
as a set of spans, as TAT-QA's metric (PACIFIC's) does: the response is cut into spans (at
line breaks, semicolons and commas that are not a number's thousands separator; also at
"and" / "&" where that scores better), each span normalised as above; ``exact_match`` is 1
only when the response's spans are the reference's spans as sets (the same number of them);
``token_f1`` pairs response spans with reference spans one to one (the assignment with the
highest total F1) and averages the pairs' token F1 over the larger of the two counts (a
missing or extra span counts 0); ``contains`` is 1 when every reference span occurs in the
response. Each is the maximum over the references (the spans, the spans with the scale). A
single answer is scored exactly as before.

Every assistant turn with a response is judged (a clarifying question scores 0, which the
views use only where a question is the final answer). A blocked turn (the provider refused
to produce it) gave no answer: 0 on every measure, with the reason. An item without
references is unscored.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from tasks.core.registry import judge
from tasks.core.judges import Judge, Measure, TurnView

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


# ----- multi-span references: scored as sets of spans ---------------------------------------------
# A span ends at a line break, a semicolon, or a comma that is not a thousands separator
# (a digit, a comma, exactly three digits: "3,150" stays one span).
_SPAN_BREAK = re.compile(r"\n|;|(?<!\d),|,(?!\d{3}(?!\d))")
_AND = re.compile(r"\s+(?:and|&)\s+", re.IGNORECASE)


def response_spans(prediction: str) -> list[list[str]]:
    """The ways a free-form response is cut into spans: at the span breaks, and also at
    "and" / "&" (a list in prose: "41.6 and 38.2"); empty pieces dropped."""
    pieces = _SPAN_BREAK.split(prediction)
    cuts = [pieces, [q for p in pieces for q in _AND.split(p)]]
    return [[p for p in cut if normalize(p)] for cut in cuts]


def aligned_f1(predicted: list[str], gold: list[str]) -> float:
    """TAT-QA's (DROP's) multi-span F1: the one-to-one pairing of predicted and gold spans
    with the highest total token F1, averaged over max(len(gold), len(predicted))."""
    if not predicted or not gold:
        return float(not predicted and not gold)
    from scipy.optimize import linear_sum_assignment  # here: only multi-span items need it

    scores = [[token_f1(p, g) for p in predicted] for g in gold]
    rows, cols = linear_sum_assignment(scores, maximize=True)
    return sum(scores[r][c] for r, c in zip(rows, cols)) / max(len(gold), len(predicted))


def span_set_scores(prediction: str, spans: list[str]) -> tuple[float, float, float]:
    """(exact_match, token_f1, contains) of a response against one multi-span reference."""
    gold = [normalize(s) for s in spans]
    em = f1 = 0.0
    for cut in response_spans(prediction):
        pred = [normalize(p) for p in cut]
        if pred and len(pred) == len(gold) and set(pred) == set(gold):
            em = 1.0
        f1 = max(f1, aligned_f1(cut, spans))
    return em, f1, float(all(contains(prediction, s) for s in spans))


def answer_span_sets(hidden: dict) -> list[list[str]] | None:
    """The item's multi-span references (``answer_spans``: lists of at least two spans), or None
    for a single answer."""
    sets = hidden.get("answer_spans")
    if not isinstance(sets, list):
        return None
    sets = [[s for s in x if isinstance(s, str) and normalize(s)] for x in sets if isinstance(x, list)]
    sets = [x for x in sets if len(x) >= 2]
    return sets or None


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
        span_sets = answer_span_sets(turn.item.hidden)
        if span_sets:  # a multi-span answer: a set of spans, never the joined string
            em, f1, has = (max(x) for x in zip(*(span_set_scores(r, s) for s in span_sets)))
            return [Measure("exact_match", em), Measure("token_f1", f1), Measure("contains", has)]
        return [Measure("exact_match", best(exact_match, r, refs)),
                Measure("token_f1", best(token_f1, r, refs)),
                Measure("contains", best(contains, r, refs))]


JUDGE = ReferenceJudge(kind="reference", role=None,
                       measures=("exact_match", "token_f1", "contains"),
                       extra_version="squad-normalize-v1+contains")
judge('reference', roles=(JUDGE.role,) if JUDGE.role else ())(JUDGE)
