"""Multi-span references on the clarify benchmark (PACIFIC): an answer of several spans
(["41.6", "38.2"]) is stored span by span and scored as a set of spans, as TAT-QA's metric
(PACIFIC's) does -- never as the one joined string "41.6, 38.2". Single answers keep the
scores they had (pinned below)."""

from __future__ import annotations

import json

import pytest

from tasks.benchmarks.clarify import loader as pacific
from tasks.core.judges import TurnView
from tasks.judges.reference import JUDGE, aligned_f1, response_spans, span_set_scores

DOC = {
    "table": {"uid": "t", "table": [["", "2019", "2018"], ["Revenue", "41.6", "38.2"]]},
    "paragraphs": [{"uid": "p", "order": 1, "text": "Revenue is in millions."}],
    "questions": [
        {"uid": "m1", "order": 1, "question": "What was the revenue in 2019 and 2018?",
         "answer": ["41.6", "38.2"], "answer_type": "multi-span", "scale": "million", "req_clari": False},
        {"uid": "s1", "order": 2, "question": "What was the revenue in 2019?", "answer": ["41.6"],
         "answer_type": "span", "scale": "million", "req_clari": False},
        {"uid": "c1", "order": 3, "question": "What were the two figures?", "answer": ["Which row?"],
         "answer_type": "question", "req_clari": True},
        {"uid": "c2", "order": 4, "question": "Revenue.", "original_question": "What was the revenue in 2019 and 2018?",
         "answer": ["3,150", "2,900"], "answer_type": "multi-span", "scale": "", "req_clari": False},
    ],
}


@pytest.fixture
def items(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([DOC]))
    return {it.hidden["question"]: it for it in pacific.load(path)}


def _judge(item, response: str) -> dict:
    turn = TurnView(item=item, condition="ask", episode_id="e", position=1, model_turn=1,
                    prompt="", response=response, history=(), is_last=True)
    return {m.measure: m.value for m in JUDGE.verdicts(turn)}


# ----- the stored form -------------------------------------------------------------------------
def test_multi_span_answers_are_stored_span_by_span(items):
    m = items["What was the revenue in 2019 and 2018?"]  # the unambiguous one comes first
    amb = [it for it in items.values() if it.meta["ambiguous"]][0]
    assert m.hidden["answer_spans"] == [["41.6", "38.2"], ["41.6 million", "38.2 million"]]
    assert m.hidden["answers"] == ["41.6, 38.2", "41.6, 38.2 million"]  # the equivalence judge's form
    assert amb.hidden["answer_spans"] == [["3,150", "2,900"]]
    # A single answer's hidden dict is what it always was: no answer_spans.
    s = items["What was the revenue in 2019?"]
    assert s.hidden == {"question": "What was the revenue in 2019?", "answers": ["41.6", "41.6 million"]}


def test_the_built_in_sample_has_no_multi_span_answer_and_is_unchanged():
    loaded = pacific.load(pacific.SAMPLE)
    assert not any("answer_spans" in it.hidden for it in loaded)
    assert sorted(set(it.hidden) for it in loaded)[0] >= {"question", "answers"}


# ----- scored as a set of spans, by hand ---------------------------------------------------------------
# Reference spans 41.6 and 38.2 (normalised "416", "382"; the scale form "416 million", ...).
#   "38.2, 41.6"   spans {382, 416} = the set: EM 1, F1 1, contains 1
#                  (joined: "382 416" != "416 382": EM 0, and "416 382" does not occur: contains 0)
#   "41.6"         one of two: EM 0; F1 (1 + 0) / 2 = 0.5; contains 0   (joined: F1 2/3)
#   "The values were 41.6 and 38.2."  cut at "and": "values were 416" | "382":
#                  F1 (2 x 1/3 x 1 / (1/3 + 1) = 0.5, and 1) / 2 = 0.75; uncut: one span of 5
#                  tokens, (1/3 + 0) / 2; EM 0; both spans occur: contains 1
#   "41.6, 38.2, 12.0"  three spans for two: EM 0; F1 (1 + 1 + 0) / 3 = 2/3; contains 1
#   "41.6 million and 38.2 million"  = the scale form's set: EM 1, F1 1, contains 1
HAND = {
    "38.2, 41.6": (1.0, 1.0, 1.0),
    "41.6": (0.0, 0.5, 0.0),
    "The values were 41.6 and 38.2.": (0.0, 0.75, 1.0),
    "41.6, 38.2, 12.0": (0.0, 2 / 3, 1.0),
    "41.6 million and 38.2 million": (1.0, 1.0, 1.0),
    "I cannot tell.": (0.0, 0.0, 0.0),
}


@pytest.mark.parametrize("response", sorted(HAND))
def test_multi_span_scores_by_hand(items, response):
    got = _judge(items["What was the revenue in 2019 and 2018?"], response)
    em, f1, has = HAND[response]
    assert got == {"exact_match": em, "token_f1": pytest.approx(f1), "contains": has}


def test_a_thousands_separator_is_not_a_span_break(items):
    amb = [it for it in items.values() if it.meta["ambiguous"]][0]
    assert response_spans("3,150, 2,900")[0] == ["3,150", " 2,900"]
    assert _judge(amb, "3,150, 2,900") == {"exact_match": 1.0, "token_f1": 1.0, "contains": 1.0}
    assert _judge(amb, "2,900; 3,150") == {"exact_match": 1.0, "token_f1": 1.0, "contains": 1.0}
    # One span, 3,150 only: F1 (1 + 0) / 2.
    assert _judge(amb, "3,150") == {"exact_match": 0.0, "token_f1": 0.5, "contains": 0.0}


def test_aligned_f1_pairs_spans_one_to_one():
    # Both predictions overlap gold "x y"; the best pairing gives "x y" to "x y" and "z" to
    # "x z": (F1 1 + F1("x z", "z") = 2 x 1/2 x 1 / (1/2 + 1) = 2/3) / 2 (the other pairing: 0.5 + 0).
    assert aligned_f1(["x y", "x z"], ["x y", "z"]) == pytest.approx((1 + 2 / 3) / 2)
    assert aligned_f1(["x z", "x y"], ["x y", "z"]) == pytest.approx((1 + 2 / 3) / 2)
    assert aligned_f1([], ["x", "y"]) == 0.0
    assert span_set_scores("x; x", ["x", "y"])[0] == 0.0  # two spans, but not the set


# ----- single answers keep today's scores ----------------------------------------------------------
# Pinned values of the SQuAD-style measures, computed by hand on the built-in sample's items:
#   "3,150" against ["3,150"]: normalised "3150" both: EM 1, F1 1, contains 1
#   "They sold 3,150 cakes." -> "they sold 3150 cakes": F1 2 x (1/4) x 1 / (1/4 + 1) = 0.4
#   "3150 cakes were sold in 2023" -> 6 tokens: F1 2/7; "3150" occurs: contains 1
#   "About 28.13%" against ["28.13", "28.13 percent"] -> "about 2813": F1 max(2/3, 1/2) = 2/3
#   "28.13 percent": EM 1 (the second reference)
SINGLE = {
    ("3,150", "3,150"): (1.0, 1.0, 1.0),
    ("3,150", "They sold 3,150 cakes."): (0.0, 0.4, 1.0),
    ("3,150", "3150 cakes were sold in 2023"): (0.0, 2 / 7, 1.0),
    ("28.13", "About 28.13%"): (0.0, 2 / 3, 1.0),
    ("28.13", "28.13 percent"): (1.0, 1.0, 1.0),
    ("28.13", "I don't know."): (0.0, 0.0, 0.0),
}


@pytest.mark.parametrize("answer,response", sorted(SINGLE))
def test_single_answers_keep_their_scores(answer, response):
    item = next(it for it in pacific.load(pacific.SAMPLE) if it.hidden["answers"][0] == answer)
    em, f1, has = SINGLE[(answer, response)]
    assert _judge(item, response) == {"exact_match": em, "token_f1": pytest.approx(f1), "contains": has}
