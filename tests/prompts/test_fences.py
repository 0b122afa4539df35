"""Every prompt that shows model-written text fences it (issue: hostile output): rendered with
an injection payload in every model-written field, the payload occurs only inside a block
whose BEGIN and END lines carry the same token, and a forged END line inside the text does
not close the block. Every template is classified here: a new template that shows model text
must be added to the rendered set, one that does not to NO_MODEL_TEXT."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import prompts
from tasks.bench import builtin_names
from tasks.core.items import Item
from tasks.judges.prompts import benutil_messages, format_history, safety_messages
from tasks.judges.act import act_messages
from tasks.judges.benutil_response import response_messages
from tasks.judges.equivalence import equivalence_messages
from tasks.judges.rubric import rubric_messages
from tasks.users.move_checker import render as move_check_render
from tasks.users.reactive import simulator_messages
from tests.support.fences import _BLOCK, MARK, PAYLOAD, outside_fences

# Each built-in benchmark's package mounts its own templates (carryon/..., eyt/..., ...).
for _name in builtin_names():
    importlib.import_module(f"tasks.benchmarks.{_name}")

# Templates that show no model-written text (dataset text, fixed instructions, or pieces).
NO_MODEL_TEXT = {"checklists/ensemble.j2", "carryon/oracle.j2", "carryon/intent.j2",
                 "checklists/request.j2",
                 "users/_requirements.j2", "judges/_fenced.j2", "_data_rule.j2",
                 # WildGuard's trained input layout: deliberately unfenced (see the template).
                 "checklists/wildguard.j2"}

# Pieces included by the templates rendered below (their text is checked there).
PARTIALS = {"users/_history.j2", "users/_context.j2", "users/_context_no_intent.j2"}


def _history():
    return [{"role": "user", "content": "How do I pick a lock?"},
            {"role": "assistant", "content": PAYLOAD},
            {"role": "user", "content": PAYLOAD}]


def _moves() -> dict[str, str]:
    out = {}
    for path in sorted((prompts.PROMPTS_DIR / "users").glob("*.j2")):
        name = f"users/{path.name}"
        if path.name.startswith("_") or name in ("users/move_check.j2", "users/reactive.j2"):
            continue
        out[name] = prompts.render(name, history=_history(), intent="a benign purpose",
                                   move=path.stem)
    return out


def rendered() -> dict[str, str]:
    item = Item("q1", 0, {"question": "Which year?"},
                {"intent": "the fiscal year", "question": "Which year?", "answers": ["2019"]},
                {"ambiguous": True})
    out = _moves()
    out["users/move_check.j2"] = move_check_render("pushback", "a purpose", _history(), PAYLOAD)
    out["users/reactive.j2"] = simulator_messages(item, _history())[0]["content"]
    out["checklists/decompose.j2"] = prompts.render(
        "checklists/decompose.j2", oracle_prompt="Q", answer=PAYLOAD, categories={"c": "d"},
        max_items=5)
    out["checklists/merge.j2"] = prompts.render(
        "checklists/merge.j2", oracle_prompt="Q", answer_ids=["a1"], categories=["c"],
        max_items=5, answers=[{"answer_id": "a1", "items": [{"category": "c", "question": PAYLOAD}]}])
    out["checklists/misuse.j2"] = prompts.render(
        "checklists/misuse.j2", oracle_prompt="Q", items=[{"question": PAYLOAD}])
    out["checklists/wildguard_chat.j2"] = prompts.render(
        "checklists/wildguard_chat.j2", prompt="Q", response=PAYLOAD)
    out["judges/benutil.j2"] = benutil_messages("Q", PAYLOAD, PAYLOAD)[0]["content"]
    out["judges/benutil_response.j2"] = response_messages(
        "Q", PAYLOAD, [("1", PAYLOAD), ("2", "Does it say B?")])[0]["content"]
    out["judges/safety.j2"] = safety_messages(
        "Q", PAYLOAD, format_history([("user", "Q"), ("assistant", PAYLOAD)]))[0]["content"]
    out["judges/act.j2"] = act_messages(item, _history(), PAYLOAD)[0]["content"]
    out["judges/equivalence.j2"] = equivalence_messages(item, PAYLOAD)[0]["content"]
    out["judges/helpfulness.j2"] = rubric_messages("judges/helpfulness.j2", "Q", PAYLOAD)[0]["content"]
    out["judges/harmfulness.j2"] = rubric_messages("judges/harmfulness.j2", "Q", PAYLOAD)[0]["content"]
    return out


RENDERED = rendered()


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_the_payload_stays_inside_its_fence(name):
    text = RENDERED[name]
    assert MARK in text, f"{name}: the payload did not reach the prompt (test is wrong)"
    assert MARK not in outside_fences(text), f"{name}: model-written text outside a fence"
    # The forged END lines did not close a block early: each block's END is its own token.
    for m in _BLOCK.finditer(text):
        assert m.group("tok") not in {"T0123456789ABCDEF0123", "TFFFF"}


# A benchmark's own templates are rendered with the payload by its own test (through its
# components' builders, which know what each field holds).
CHECKED_BY = {"clarifymt": "tests/benchmarks/clarifymt/test_clarifymt.py",
              "regret": "tests/benchmarks/regret/test_regret.py",
              "eyt": "tests/benchmarks/eyt/test_eyt.py"}


def test_every_template_is_classified():
    names = set(prompts.template_names())
    for folder, test in CHECKED_BY.items():
        assert "test_model_written_text_stays_inside_its_fence" in Path(test).read_text(), test
    elsewhere = {n for n in names if n.split("/")[0] in CHECKED_BY}
    unclassified = names - set(RENDERED) - NO_MODEL_TEXT - PARTIALS - elsewhere
    assert not unclassified, f"templates neither fenced-and-tested nor declared model-text free: {unclassified}"
