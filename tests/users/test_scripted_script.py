"""A condition's script is the scripted user's own (tasks/users/scripted.py ``Script``): the
spec loader has it checked by the condition's user policy, one line naming the spec, the
condition and the field; a policy that plays no script refuses one."""

from __future__ import annotations

import pytest

from tasks.bench import SpecError, load_spec

BASE = """name: s
title: S
loader: records
loader: {name: records, args: {file: items.jsonl, prompts: {question: question}}}
conditions:
  - {name: c, prompt: question, user: USER, max_turns: 2SCRIPT}
"""


def _spec(tmp_path, user: str, script: str) -> str:
    path = tmp_path / "spec.yaml"
    text = BASE.replace("loader: records\n", "").replace("USER", user).replace("SCRIPT", script)
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("user, script, line", [
    ("scripted", ", script: {group: XC}",
     "conditions[c].script.group: Input should be 'BC' or 'NC'"),
    ("scripted", ", script: {group: BC, lengths: [5]}",
     "conditions[c].script.lengths: length 5 is not one of 4, 6, 8, 10, 12 (turns of both sides)"),
    ("scripted", "", "conditions[c].script: the scripted user plays a script ({group: BC or NC, "
                     "...}) and this condition gives none"),
    ("single_turn", ", script: {group: BC}",
     "conditions[c].script: the user policy single_turn plays no script"),
])
def test_a_script_is_checked_by_the_conditions_user(tmp_path, user, script, line):
    path = _spec(tmp_path, user, script)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value) == f"{path}: {line}"


def test_a_good_script_gives_the_condition_its_group(tmp_path):
    spec = load_spec(_spec(tmp_path, "scripted", ", script: {group: NC, lengths: [4, 6]}"))
    c = spec.condition("c")
    assert spec.user(c).group(c) == "NC" and spec.user(c).calls(c) == {
        "user_simulator": 2, "move_checker": 2}
