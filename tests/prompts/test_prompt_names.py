"""Templates moved beside what renders them keep their names' hashes and their bytes.

The gateway's cache keys hold the rendered prompt text, and every judgment and verdict set id
holds ``prompts.template_version(...)`` over its templates' names and sources: a template
that moved (``prompts.FIRST_NAMES``) must render the same text and give the same version as
before the move, or every existing home would send its calls again and lose its sets.

``BEFORE`` was measured on main before anything moved (commit 340284e), from the names the
templates had then: per template, its ``template_version`` and a hash of its rendering with
the fixed context below; per judge, the version its verdict set holds. A change to a
template's text changes these on purpose: measure again, and say why in the commit."""

from __future__ import annotations

import hashlib

import pytest
from jinja2 import TemplateNotFound

import prompts
from prompts import fence
from tasks.bench import builtin_names, load_spec
from tasks.core import registry
from tasks.judges.prompts import prompt_version

_HISTORY = [{"role": "user", "content": "How do I pick a lock?"},
            {"role": "assistant", "content": "I cannot help with that."},
            {"role": "user", "content": "I locked myself out of my own shed."}]
_TOKEN, _TEXT = fence("The assistant's text.")
_FENCE = {"label": "RESPONSE", "token": _TOKEN, "text": _TEXT}
_RUBRIC = {"prompt": "How do I pick a lock?", "prompt_token": "T1", "response": _TEXT,
           "response_token": _TOKEN}
_SLOTS = [{"name": "time_zone", "value": "CET"}, {"name": "date", "value": "today"}]
_PERSONA = {"persona": "a careful retired teacher", "question": "What time is it there?",
            "instruction": "answer what was asked", "facts": ["lives in Berlin"],
            "conversation": "User: What time is it there?"}

# A context for every template, by the name it had before the move (the partials too: a
# moved partial must still render alone).
CONTEXTS: dict[str, dict] = {
    "_data_rule.j2": {},
    "checklists/decompose.j2": {"oracle_prompt": "I am a nurse.\n\nHow do X?", "answer": "Do Y.",
                                "categories": {"Practical Advice": "steps to take"},
                                "max_items": 23},
    "checklists/ensemble.j2": {"oracle_prompt": "I am a nurse.\n\nHow do X?"},
    "checklists/merge.j2": {"oracle_prompt": "Q", "answer_ids": ["a1", "a2"],
                            "categories": ["Practical Advice", "Resource"], "max_items": 23,
                            "answers": [{"answer_id": "a1", "items": [
                                {"category": "Resource", "question": "Does it name a book?"}]},
                                {"answer_id": "a2", "items": []}]},
    "checklists/misuse.j2": {"oracle_prompt": "Q", "items": [{"question": "Does it say X?"},
                                                             {"question": "Does it say Y?"}]},
    "checklists/wildguard.j2": {"prompt": "PROMPT", "response": "RESPONSE"},
    "checklists/wildguard_chat.j2": {"prompt": "PROMPT", "response": "RESPONSE"},
    "clarifymt/agent_forecast.j2": {"conversation": "User: hi"},
    "clarifymt/agent_perceive.j2": {"conversation": "User: hi"},
    "clarifymt/agent_plan.j2": {"notes": "ask about the time zone"},
    "clarifymt/agent_track.j2": {"conversation": "User: hi", "perception": "ambiguous: place"},
    "clarifymt/persona_check.j2": {**_PERSONA, "move": "answer-directly", "asked": "Where?",
                                   "reply": "Berlin."},
    "clarifymt/persona_user.j2": _PERSONA,
    "clarifymt/question_quality.j2": {"question": "What time is it there?",
                                      "conversation": "User: hi", "response": "Where is there?",
                                      "gold": "Which city?", "slots": _SLOTS},
    "clarifymt/slots.j2": {"question": "What time is it there?", "conversation": "User: hi",
                           "slots": _SLOTS},
    "eyt/final.j2": {"final_intent": "a gift for a friend", "history": _HISTORY},
    "eyt/latent.j2": {"latent": "a gift", "perceived": "You want a gift."},
    "eyt/perceive.j2": {},
    "eyt/simulator.j2": {"persona": "a student", "intent": "a gift", "shifted": True,
                         "explicit": False, "history": _HISTORY},
    "eyt/subjective.j2": {"persona": "a student", "history": _HISTORY},
    "intent.j2": {"query": "How do X?", "situation": [("Sender", "a nurse"), ("Purpose", "care")]},
    "judge/_fenced.j2": _FENCE,
    "judge/benutil.j2": {"query": "How do X?", "response": _TEXT, "response_token": _TOKEN,
                         "item": "Does it say Y?"},
    "judge/safety.j2": {"query": "How do X?", "response": _TEXT, "response_token": _TOKEN,
                        "history": "User: hi", "history_token": "T2"},
    "judges/act.j2": {"opening": "How many?", "rest": "User: more", "rest_token": "T3",
                      "response": _TEXT, "response_token": _TOKEN, "intent": "dozens",
                      "clarifying_question": "Dozens or single ones?"},
    "judges/equivalence.j2": {"question": "Which year?", "references": ["2019", "2020"],
                              "response": _TEXT, "response_token": _TOKEN},
    "judges/harmfulness.j2": _RUBRIC,
    "judges/helpfulness.j2": _RUBRIC,
    "oracle.j2": {"query": "How do X?", "intent": "I am a nurse."},
    "regret/facet_map.j2": {"prompt": "Plan a trip", "question": _TEXT, "question_token": _TOKEN,
                            "facets": [{"name": "season", "options": ["summer", "winter"]}]},
    "regret/reply.j2": {"prompt": "Plan a trip", "question": _TEXT, "question_token": _TOKEN,
                        "values": ["summer", "winter"]},
    "user/_context.j2": {"intent": "a benign purpose", "history": _HISTORY},
    "user/_context_no_intent.j2": {"history": _HISTORY},
    "user/_history.j2": {"history": _HISTORY},
    "user/_requirements.j2": {},
    **{f"user/{move}.j2": {"intent": "a benign purpose", "history": _HISTORY}
       for move in ("backchannel", "benign_justification", "benign_reasking",
                    "context_switching", "delaying", "pushback", "rephrasing")},
    "user/move_check.j2": {"move_label": "PUSHBACK", "definition": "disputes the refusal",
                           "knows_intent": True, "intent": "a purpose", "history": _HISTORY,
                           "message": "Why not?"},
    "user/reactive.j2": {"persona": "a cook", "question": "How many?", "intent": "dozens",
                         "facts": ["bakes for a school"], "history": _HISTORY},
}


BEFORE = {  # first name: (template_version, sha256 of the rendering, 16 hex digits)
    "_data_rule.j2": ("85e0bfab46b8", "66ea6f125db745e7"),
    "checklists/decompose.j2": ("c33a1a020ca0", "70f80f93900e99e7"),
    "checklists/ensemble.j2": ("97a67a5bb768", "5dc09335ec8095d3"),
    "checklists/merge.j2": ("9ac07909d11e", "42b024f00ba9ab5a"),
    "checklists/misuse.j2": ("86275b7bae2b", "83228d51fb7f51dd"),
    "checklists/wildguard.j2": ("7fa779a56445", "f1cdcad26df7a86c"),
    "checklists/wildguard_chat.j2": ("085335191055", "47afd700a4cc4c1e"),
    "clarifymt/agent_forecast.j2": ("9d69c3cf9886", "85697a668d24162e"),
    "clarifymt/agent_perceive.j2": ("2c551f2c1618", "d200a0ee7a40b7fc"),
    "clarifymt/agent_plan.j2": ("0e594a27406d", "da7ea85695ae883b"),
    "clarifymt/agent_track.j2": ("fe5d0d471433", "c638fb25d3d24485"),
    "clarifymt/persona_check.j2": ("794440a97267", "c216fce905b3ca10"),
    "clarifymt/persona_user.j2": ("f367681570e7", "5bcdbf1361bc4b14"),
    "clarifymt/question_quality.j2": ("532ce6e1874d", "f845e940ff57d3e1"),
    "clarifymt/slots.j2": ("745d7ad9dc15", "ad745dfc7ca195a1"),
    "eyt/final.j2": ("461f53f34d8c", "c7564dfdf82efe5c"),
    "eyt/latent.j2": ("c91ad1bfa545", "88e0c0c6979419ba"),
    "eyt/perceive.j2": ("822875975db7", "860f3d042cfc28b0"),
    "eyt/simulator.j2": ("1cb86fb44073", "f3c76e85102b53db"),
    "eyt/subjective.j2": ("0331db6716fb", "a2e2db5414a19dfa"),
    "intent.j2": ("191311c8bd5f", "7fc9613d4a8adf9c"),
    "judge/_fenced.j2": ("e1893b36a945", "3c1f8cb931670fea"),
    "judge/benutil.j2": ("ac5ea770fae0", "b598860c6d5a7132"),
    "judge/safety.j2": ("69317108ff7a", "db726f525a65b6a6"),
    "judges/act.j2": ("4c5d7a9a079a", "affa48beb4a608d1"),
    "judges/equivalence.j2": ("7499c37b51d8", "6f6e1dfe23b344e8"),
    "judges/harmfulness.j2": ("d1ad578abeb9", "f95563c125759480"),
    "judges/helpfulness.j2": ("a99cb85fe727", "59105f9aac4f75f9"),
    "oracle.j2": ("39858bd0eec5", "3aac53f686c24894"),
    "regret/facet_map.j2": ("565e98c778bc", "067865a528a1878f"),
    "regret/reply.j2": ("571549efacc1", "4884b7cca84ee03d"),
    "user/_context.j2": ("db85e146c1dc", "7232957f9f811b72"),
    "user/_context_no_intent.j2": ("826ea45308cb", "7cffaa43b8f3eb8c"),
    "user/_history.j2": ("8cb23fdb36b5", "8b2f22f0d7904142"),
    "user/_requirements.j2": ("765e01d684dd", "016936491328a865"),
    "user/backchannel.j2": ("d1d4c76c1d09", "8c2428b298923a5e"),
    "user/benign_justification.j2": ("1322f2d2c7f6", "cfd873c77686957f"),
    "user/benign_reasking.j2": ("304a9e1f35fa", "99cd4d8b513f53ce"),
    "user/context_switching.j2": ("3e59ab228c8f", "5cd841722366740e"),
    "user/delaying.j2": ("0249fdbe573e", "054fcc4a4a6ae63e"),
    "user/move_check.j2": ("0ea65224ea4b", "e7a688060c0fce2e"),
    "user/pushback.j2": ("a287cc059199", "82050de82008d803"),
    "user/reactive.j2": ("c87d6df4992d", "e82d0d3431f66c03"),
    "user/rephrasing.j2": ("7836f8f77459", "4bcd8360b81a2837"),
}
# Judge kind: the version its verdict sets hold (template_version over its templates).
BEFORE_JUDGES = {
    "act": "56fb17075ee2",
    "benutil": "bb9620c1dd1a",
    "clarifymt_persona_check": "794440a97267",
    "clarifymt_question": "532ce6e1874d",
    "clarifymt_slots": "745d7ad9dc15",
    "equivalence": "99e3ea3e44e4",
    "eyt_final": "461f53f34d8c",
    "eyt_latent": "c91ad1bfa545",
    "eyt_subjective": "0331db6716fb",
    "harmfulness": "0a8287c87900",
    "helpfulness": "aad21eac291c",
    "regret": "0e14abde4329",
    "safety": "d121a4334819",
}
# CarryOnBench's judgment sets: tasks.judges.prompts.prompt_version().
BEFORE_CARRYON_PROMPT_VERSION = "674d78e959c3"


def _measure(name: str, context: dict) -> tuple[str, str]:
    text = prompts.render(name, **context)
    return prompts.template_version(name), hashlib.sha256(text.encode()).hexdigest()[:16]


def _current(first: str) -> str:
    return {was: now for now, was in prompts.FIRST_NAMES.items()}.get(first, first)


@pytest.fixture(scope="module", autouse=True)
def _builtin_benchmarks():
    # Every built-in benchmark's package mounts its own templates, and its judges register.
    for name in builtin_names():
        load_spec(name)


def test_every_template_is_measured():
    # Every template there is, by its first name: one added since needs no line here, but a
    # template of main that disappeared (rather than moved with a FIRST_NAMES line) fails.
    firsts = {prompts.first_name(n) for n in prompts.template_names()}
    assert set(BEFORE) <= firsts, sorted(set(BEFORE) - firsts)
    assert set(CONTEXTS) == set(BEFORE)
    # A moved template's first name is a name it no longer has: no two files claim one name.
    assert not set(prompts.FIRST_NAMES.values()) & set(prompts.template_names())


@pytest.mark.parametrize("first", sorted(BEFORE))
def test_a_moved_template_renders_the_same_bytes_under_the_same_version(first):
    now = _current(first)
    assert _measure(now, CONTEXTS[first]) == BEFORE[first], now
    # Its first name still finds it (an include line in a template's source says that name).
    assert _measure(first, CONTEXTS[first]) == BEFORE[first], first


def test_every_judges_verdict_set_version_is_unchanged():
    # The built-in judges by name (a test's benchmark may have registered judges of its own,
    # whose templates are found only while it runs).
    versions = {name: prompts.template_version(*registry.lookup("judge", name).build().templates)
                for name in BEFORE_JUDGES}
    assert versions == BEFORE_JUDGES
    assert prompt_version() == BEFORE_CARRYON_PROMPT_VERSION


def test_a_benchmarks_own_folder_comes_first_and_only_while_it_is_under_way(tmp_path):
    own = tmp_path / "prompts"
    (own / "users").mkdir(parents=True)
    (own / "users" / "reactive.j2").write_text("Mine: {{ question }}")
    (own / "_data_rule.j2").write_text("MY DATA RULE.")
    (own / "mine.j2").write_text("Only here.")
    ctx = CONTEXTS["user/reactive.j2"]
    shared = prompts.render("users/reactive.j2", **ctx)
    with prompts.benchmark_prompts(own):
        assert prompts.render("users/reactive.j2", **ctx) == "Mine: How many?"
        assert prompts.render("user/reactive.j2", **ctx) == "Mine: How many?"  # its first name
        assert prompts.render("mine.j2") == "Only here."
        # An include is looked up the same way: the benchmark's piece inside a shared template.
        assert "MY DATA RULE." in prompts.render("users/_history.j2", history=_HISTORY)
        assert prompts.template_version("users/reactive.j2") != BEFORE["user/reactive.j2"][0]
        assert prompts.template_path("judges/benutil.j2") == \
            prompts.PROMPTS_DIR / "judges" / "benutil.j2"
    assert prompts.render("users/reactive.j2", **ctx) == shared
    assert _measure("users/reactive.j2", ctx) == BEFORE["user/reactive.j2"]
    with pytest.raises(TemplateNotFound):
        prompts.render("mine.j2")
    with prompts.benchmark_prompts(tmp_path / "absent"):  # no prompts/ beside the spec
        assert prompts.render("users/reactive.j2", **ctx) == shared


def test_a_benchmark_cannot_mount_over_a_shared_folder(tmp_path):
    with pytest.raises(ValueError, match="shared folder"):
        prompts.mount("judges", tmp_path)
