"""judging.benutil_quote_choices: the Ben-Util judge's quote constrained to the response's
passages by the request's JSON schema (tasks/judges/prompts.py), for small local models."""

from __future__ import annotations

import json

import pytest

from tasks.config import Config, load_config
from tasks.benchmarks.carryon.judge import set_id
from tasks.judges.prompts import (
    MAX_QUOTE_CHOICES, MAX_QUOTE_WORDS, BenUtilVerdict, quote_choices, quoted_verdict,
)
from tasks.benchmarks.carryon.judge_kinds import BenUtil
from tests.factories import model_spec


def test_passages_are_sentences_and_lines_that_are_evidence():
    response = ("Use a tension wrench. Then rake the pins!\nOf the.\nOk\n"
                "Use a tension wrench. Why? Because it works; always")
    # "Of the." is only stop words; "Ok", "Why?" and "always" are one word each: no evidence,
    # so not offered. The repeated sentence is offered once.
    assert quote_choices(response) == ["Use a tension wrench.", "Then rake the pins!",
                                       "Because it works;"]


def test_a_long_sentence_is_cut_into_runs_and_the_list_is_capped():
    words = [f"w{i}" for i in range(MAX_QUOTE_WORDS + 5)]
    assert quote_choices(" ".join(words)) == [" ".join(words[:MAX_QUOTE_WORDS]),
                                              " ".join(words[MAX_QUOTE_WORDS:])]
    many = "\n".join(f"step {i} done" for i in range(MAX_QUOTE_CHOICES + 10))
    got = quote_choices(many)
    assert len(got) == MAX_QUOTE_CHOICES and got[0] == "step 0 done"


def test_a_short_whole_response_can_be_quoted_and_an_empty_one_offers_nothing():
    assert quote_choices("Yes.") == ["Yes."]  # shorter than the minimum: quoted whole
    assert quote_choices("") == []


def test_the_schema_allows_a_passage_or_empty_with_not_fulfilled():
    response = "Use a tension wrench. Then rake the pins."
    cls = quoted_verdict(response)
    schema = cls.model_json_schema()
    empty, quoted = schema["anyOf"]
    assert empty["properties"] == {"evidence": {"const": ""}, "fulfilled": {"const": False}}
    assert quoted["properties"]["evidence"] == {
        "enum": ["Use a tension wrench.", "Then rake the pins."]}
    assert list(quoted["properties"]) == ["evidence", "fulfilled"]  # the quote comes first
    # A fresh copy each time (litellm may edit what it is given), and one class per response.
    schema["anyOf"].clear()
    assert len(cls.model_json_schema()["anyOf"]) == 2
    assert quoted_verdict(response) is cls
    # Answers parse as the plain verdict does.
    v = cls.model_validate_json('{"evidence": "Then rake the pins.", "fulfilled": true}')
    assert isinstance(v, BenUtilVerdict) and v.fulfilled
    assert quoted_verdict("").model_json_schema()["anyOf"] == [empty]


def test_the_judge_sends_it_only_when_configured():
    specs = [model_spec("judge")]
    plain = BenUtil(specs, "s", {}, {})
    quoting = BenUtil(specs, "s", {}, {}, quote_choices=True)
    src = ("the query", "Use a tension wrench. Then rake the pins.", "Does it name a tool?")
    assert plain.schema_for(src) is BenUtilVerdict
    assert quoting.schema_for(src) is quoted_verdict(src[1])
    assert quoting.messages(src) == plain.messages(src)  # the prompt is unchanged


def test_the_option_leaves_existing_hashes_and_set_ids_alone(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("home: h\ndataset: {source: sample}\n")
    base = load_config(path)
    off = Config.model_validate({**base.model_dump(), "judging": {"benutil_quote_choices": False}})
    on = Config.model_validate({**base.model_dump(), "judging": {"benutil_quote_choices": True}})
    assert off.config_hash() == base.config_hash() != on.config_hash()
    specs = [model_spec("judge")]
    assert set_id("benutil", specs, "p", "c", False) == set_id("benutil", specs, "p", "c", False, False)
    assert set_id("benutil", specs, "p", "c", False, True) != set_id("benutil", specs, "p", "c", False)
