"""judging.benutil_quote_choices: the Ben-Util judge's quote constrained to the response's
passages by the request's JSON schema (tasks/judges/prompts.py), for small local models."""

from __future__ import annotations

import json

import pytest

from tasks.config import Config, load_config
from tasks.benchmarks.carryon.keys import judgment_set_id
from tasks.judges.prompts import (
    MAX_QUOTE_CHOICES, MAX_QUOTE_WORDS, BenUtilVerdict, quote_choices, quoted_verdict,
)
from tasks.judges.benutil import BenUtilArgs, BenUtilJudge
from tests.support.factories import model_spec


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
    from tasks.core.items import Item
    from tasks.core.judges import TurnView

    item = Item("q", 0, {"query": "the query"}, {"checklist": ["Does it name a tool?"]})
    turn = TurnView(item=item, condition="BC", episode_id="e", position=1, model_turn=1,
                    prompt="the query", response="Use a tension wrench. Then rake the pins.",
                    history=(), is_last=True)
    (plain,) = BenUtilJudge().requests(turn)
    (quoting,) = BenUtilJudge(BenUtilArgs(quote_choices=True)).requests(turn)
    assert plain.schema is BenUtilVerdict
    assert quoting.schema is quoted_verdict(turn.response)
    assert quoting.messages == plain.messages  # the prompt is unchanged


def test_the_option_leaves_existing_hashes_and_set_ids_alone(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("home: h\ndataset: {source: sample}\n")
    base = load_config(path)
    off = Config.model_validate({**base.model_dump(), "judging": {"benutil_quote_choices": False}})
    on = Config.model_validate({**base.model_dump(), "judging": {"benutil_quote_choices": True}})
    assert off.config_hash() == base.config_hash() != on.config_hash()
    specs = [model_spec("judge")]
    off_extra = BenUtilJudge().judgment_identity()[1]
    on_extra = BenUtilJudge(BenUtilArgs(quote_choices=True)).judgment_identity()[1]
    assert off_extra == {"history": False}  # the recipe's document without the option
    assert judgment_set_id("benutil", specs, "p", "c", on_extra) != judgment_set_id(
        "benutil", specs, "p", "c", off_extra)


def test_the_config_section_sets_the_judges_arguments(write_config):
    # judging: is read as the arguments of the spec's Ben-Util and safety judges (their
    # fields name the section's keys), over what the spec gives them.
    from tasks.engine.verdicts import spec_judges

    judges, _ = spec_judges(load_config(write_config(
        judging={"benutil_quote_choices": True, "safety_sees_history": True})))
    by_kind = {j.kind: j for j, _ in judges}
    assert by_kind["benutil"].args.quote_choices and by_kind["benutil"].args.query == "query"
    assert by_kind["safety"].sees_history and by_kind["safety"].args.query == "query"
    plain, _ = spec_judges(load_config(write_config()))
    # (its checklist's version key, checklist_version, is Ben-Util's default)
    assert [j.changed_args() for j, _ in plain] == [{"query": "query"}, {"query": "query"}]
