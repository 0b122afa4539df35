"""Clarification as a policy (RegretBench style): the reference planner's choices and R_ref on
hand-built graphs, the CIG loader on fixtures in the published layouts and its refusals, the
responder, the planner seat, the regret judge, every metric view on hand-written rows with
hand-computed numbers, the report section, and plan + run + report of configs/regret.yaml
against the loopback server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tasks.benchmarks.regret import cig
from tasks.bench import load_spec
from tasks.benchmarks.regret.cig import Graph, Intent, Rules
from tasks.benchmarks.carryon.queries import DataError
from tasks.benchmarks.regret.loader import SAMPLE, CigArgs, CigLoader, read_graphs
from tasks.core.items import Item
from tasks.gateway.client import CallResult
from tasks.judges import act
from tasks.benchmarks.regret import judge as regret_judge
from tasks.core.judges import TurnView
from tasks.benchmarks.regret import planner as planner_mod
from tasks.benchmarks.regret import responder as responder_mod
from tasks.core.users import ANSWERED, EpisodeState, PolicyEnv, Stop, UserTurn
from tests.support.factories import FakeGateway, by_role
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[3]


def graph(*intents, cig_id="g") -> Graph:
    """graph(({"colour": "red"}, "Alpha|A1"), ...)"""
    return Graph(cig_id, "Which one?", tuple(Intent(tuple(s.items()), tuple(a.split("|")))
                                             for s, a in intents))


# Four products: colour tells all four apart, size only halves them.
FOUR = graph(({"colour": "red", "size": "small"}, "Alpha"),
             ({"colour": "blue", "size": "small"}, "Bravo"),
             ({"colour": "green", "size": "large"}, "Charlie"),
             ({"colour": "black", "size": "large"}, "Delta"))


# --------------------------------------------------------------------------- the planner

def test_the_planner_asks_the_facet_that_settles_most():
    r = Rules()  # U 1, c 0.1, lambda 0.1, cap 5, depth 4
    everyone = frozenset(range(4))
    # colour: 2 bits (every reply leaves one intent); size: 1 bit (two left)
    assert cig.info_gain(FOUR, everyone, "colour") == pytest.approx(2.0)
    assert cig.info_gain(FOUR, everyone, "size") == pytest.approx(1.0)
    assert cig.decide(FOUR, [], 1, r) == ("ask", "colour")
    assert cig.question_text(FOUR, "colour", everyone) == \
        "Which colour do you mean: red, blue, green or black?"
    # After "blue" one intent remains: answer it.
    assert cig.decide(FOUR, [("colour", ("blue",))], 2, r) == ("answer", 1)
    # Each hidden intent: ask colour, answer right: R = 1 - 2 * 0.1 = 0.8 for all four.
    for h in range(4):
        out = cig.simulate(FOUR, h, r)
        assert out.steps == (("ask", "colour", (FOUR.intents[h].value("colour"),)), ("answer", h))
        assert (out.correct, out.turns, out.ineffective) == (1.0, 2, 0)
        assert out.reward == pytest.approx(0.8)
    assert cig.r_ref(FOUR, r) == pytest.approx(0.8)


def test_the_planner_answers_when_asking_costs_more_than_it_can_gain():
    two = graph(({"city": "Paris"}, "France"), ({"city": "Lyon"}, "Rhone"))
    # c = 0.6: answering now = -0.6 + 1/2 = -0.1; asking = -0.6 + (-0.6 + 1) = -0.2.
    costly = Rules(turn_cost=0.6)
    assert cig.decide(two, [], 1, costly) == ("answer", 0)
    assert cig.r_ref(two, costly) == pytest.approx((0.4 + -0.6) / 2)  # right for one of two
    # c = 0.1: asking = -0.1 + 0.9 = 0.8 beats answering -0.1 + 0.5 = 0.4.
    assert cig.decide(two, [], 1, Rules()) == ("ask", "city")
    # No depth to search, or the turn cap reached: answer.
    assert cig.decide(two, [], 1, Rules(depth=0)) == ("answer", 0)
    assert cig.decide(two, [], 5, Rules()) == ("answer", 0)
    # One intent: answer at once (R = U - c).
    one = graph(({"city": "Paris"}, "France"))
    assert cig.decide(one, [], 1, Rules()) == ("answer", 0)
    assert cig.r_ref(one, Rules()) == pytest.approx(0.9)


def test_shared_answers_and_useless_facets_are_not_asked_about():
    # Volleyball and ice hockey both field 6: answering "6" is right for either.
    six = graph(({"sport": "volleyball", "venue": "court"}, "6|six"),
                ({"sport": "ice hockey", "venue": "rink"}, "6|six"))
    assert cig.decide(six, [], 1, Rules()) == ("answer", 0)
    assert cig.r_ref(six, Rules()) == pytest.approx(0.9)
    # "shape" is the same for every intent: it can never narrow anything.
    flat = graph(({"shape": "round", "size": "S"}, "Small"), ({"shape": "round", "size": "L"}, "Large"))
    assert cig.decide(flat, [], 1, Rules()) == ("ask", "size")


def test_a_two_step_graph_needs_the_lookahead():
    # Phones: system then size; either first question leaves two, so two questions: R = 0.7.
    phones = graph(({"system": "Android", "size": "compact"}, "P1"),
                   ({"system": "Android", "size": "large"}, "P2"),
                   ({"system": "iOS", "size": "compact"}, "P3"),
                   ({"system": "iOS", "size": "large"}, "P4"))
    r = Rules()
    assert cig.decide(phones, [], 1, r) == ("ask", "system")  # a tie with size: facet order
    assert cig.simulate(phones, 3, r).steps == (("ask", "system", ("iOS",)),
                                                ("ask", "size", ("large",)), ("answer", 3))
    assert cig.r_ref(phones, r) == pytest.approx(0.7)
    # c = 0.3. Answer now: -0.3 + 1/4 = -0.05. One question, then a guess between two:
    # -0.3 + (-0.3 + 1/2) = -0.1. Two questions: -0.3 - 0.3 + (-0.3 + 1) = 0.1. Looking one
    # question ahead the planner answers; looking two ahead it asks.
    assert cig.decide(phones, [], 1, Rules(turn_cost=0.3, depth=1)) == ("answer", 0)
    assert cig.decide(phones, [], 1, Rules(turn_cost=0.3, depth=2)) == ("ask", "system")
    assert cig.r_ref(phones, Rules(turn_cost=0.3)) == pytest.approx(0.1)


def test_regret_of_the_planner_against_itself_is_zero():
    # The search's expected value (a truthful user) equals the mean reward of the episodes
    # the planner plays against each hidden intent: its own regret is 0 on every sample graph.
    for raw in read_graphs(SAMPLE):
        g = Graph.from_hidden({"cig_id": raw["cig_id"], "prompt": raw["prompt"],
                               "intents": raw["intents"]})
        value = cig._value(g, frozenset(range(len(g.intents))), frozenset(), 4, Rules())[0]
        played = [cig.simulate(g, h, Rules()).reward for h in range(len(g.intents))]
        assert value == pytest.approx(sum(played) / len(played)) == pytest.approx(cig.r_ref(g, Rules()))


DUNE = graph(({"medium": "novel", "year": "1965"}, "Frank Herbert|Herbert"),
             ({"medium": "film", "year": "1984"}, "David Lynch|Lynch"),
             ({"medium": "film", "year": "2021"}, "Denis Villeneuve|Villeneuve"),
             cig_id="qa-dune-creator")


def test_user_behaviours_and_r_ref_by_hand():
    vague, contra = Rules(behaviour="vague", rate=0.5), Rules(behaviour="contradictory", rate=0.3)
    # The draws (hashes of graph, hidden intent, facet, behaviour), pinned:
    assert [cig.reply_values(DUNE, h, "year", vague) for h in range(3)] == [
        ("1965", "1984"), ("1984", "1965"), ("2021", "1984")]
    assert [cig.reply_values(DUNE, h, "medium", vague) for h in range(3)] == [
        ("novel",), ("novel", "film"), ("film",)]
    assert [cig.reply_values(DUNE, h, "year", contra) for h in range(3)] == [
        ("1984",), ("2021",), ("2021",)]
    assert cig.reply_values(DUNE, 0, "year", Rules()) == ("1965",)
    assert cig.reply_values(DUNE, 0, cig.UNSUPPORTED, Rules()) is None
    # Vague: h0: year -> {0,1}; medium "novel" -> {0}: right in 3 turns, R 0.7.
    # h1: year -> {0,1}; medium "novel or film" changes nothing (ineffective); guess 0:
    #     wrong, 3 turns, R = -0.3 - 0.1 = -0.4.  h2: year "2021 or 1984" -> {1,2}; medium
    #     cannot split two films: guess 1, wrong, R -0.2.  R_ref = (0.7 - 0.4 - 0.2) / 3.
    assert [cig.simulate(DUNE, h, vague).reward for h in range(3)] == pytest.approx([0.7, -0.4, -0.2])
    assert cig.simulate(DUNE, 1, vague).ineffective == 1
    assert cig.r_ref(DUNE, vague) == pytest.approx(0.1 / 3)
    # Contradictory: year says 1984 for h0 (wrong), 2021 for h1 (wrong) and h2 (right).
    assert cig.r_ref(DUNE, contra) == pytest.approx((-0.2 - 0.2 + 0.8) / 3)


def test_belief_consistent_set_and_its_fallback():
    obs = [("medium", ("film",))]
    assert cig.consistent(DUNE, obs) == {1, 2}
    assert cig.belief(DUNE, obs) == {1: 0.5, 2: 0.5}
    # A contradiction empties the set: the intents agreeing with the most replies remain.
    both = obs + [("year", ("1965",))]
    assert cig.consistent(DUNE, both) == frozenset()
    assert cig.belief(DUNE, both) == {0: 1 / 3, 1: 1 / 3, 2: 1 / 3}
    assert cig.belief(DUNE, both + [("medium", ("film",))]) == {1: 0.5, 2: 0.5}
    # A non-answer rules nothing out; an intent without the facet stays possible.
    assert cig.admitted(DUNE, "medium", None) == {0, 1, 2}
    coffee = graph(({"brew": "espresso", "milk": "frother"}, "Duo"), ({"brew": "filter"}, "Drip"))
    assert cig.admitted(coffee, "milk", ("frother",)) == {0, 1}
    assert cig.reply_values(coffee, 1, "milk", Rules()) is None
    assert cig.mask({0, 2}) == 5


def test_reading_replies_and_answers():
    assert cig.parse_reply(DUNE, "year", "I mean 2021, I think.") == ("2021",)
    assert cig.parse_reply(DUNE, "year", "Maybe 1984, or perhaps 1965; I'm not sure.") == ("1965", "1984")
    assert cig.parse_reply(DUNE, "year", "No idea.") is None
    assert cig.parse_reply(DUNE, "year", "the 20210 one") is None  # whole tokens only
    nested = graph(({"city": "Paris"}, "a"), ({"city": "Paris Texas"}, "b"))
    assert cig.parse_reply(nested, "city", "Paris, Texas.") == ("Paris Texas",)
    # Correct: an alias of the hidden intent, no answer of a competing one.
    assert cig.alias_correct(DUNE, 2, "It was Denis Villeneuve.") == (1.0, "match")
    # Another intent's answer (a wrong pick, or a list of every candidate) is "competing";
    # only an answer naming no intent is "no_match" (the equivalence fallback may apply).
    assert cig.alias_correct(DUNE, 2, "Frank Herbert") == (0.0, "competing")
    assert cig.alias_correct(DUNE, 2, "Christopher Nolan") == (0.0, "no_match")
    assert cig.alias_correct(DUNE, 2, "Villeneuve, Lynch or Herbert") == (0.0, "competing")
    cities = graph(({"c": "x"}, "Paris, Texas"), ({"c": "y"}, "Paris"))
    assert cig.alias_correct(cities, 0, "Paris, Texas!") == (1.0, "match")  # its own alias holds "Paris"
    assert cig.alias_correct(cities, 1, "Paris, Texas") == (0.0, "competing")


# --------------------------------------------------------------------------- the loader

GRAPH = {"cig_id": "q1", "prompt": "Who made Dune?",
         "intents": [{"slots": {"medium": "novel"}, "answer_aliases": "Frank Herbert|Herbert"},
                     {"slots": {"medium": "film", "year": 1984}, "answer_aliases": ["David Lynch"],
                      "description": "an extra field, ignored"}]}


def _folder(tmp_path, graphs: dict) -> Path:
    root = tmp_path / "data"
    for rel, obj in graphs.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(obj))
    return root


def test_loader_reads_the_published_folder_layout(tmp_path):
    other = {**GRAPH, "cig_id": "p1", "prompt": "Recommend a tent."}
    root = _folder(tmp_path, {"OpenDomainQA/test/q1.json": GRAPH,
                              "ProductRecommendation/test/p1.json": other})
    load = CigLoader(CigArgs())
    items = load(root)
    assert len(items) == 2 * 2 * 3  # graphs x intents x behaviours
    first = items[0]
    assert first.prompts == {"prompt": "Who made Dune?"}
    assert first.meta == {"domain": "OpenDomainQA", "split": "test", "cig_id": "q1",
                          "behaviour": "cooperative", "hidden_index": 0, "n_intents": 2}
    assert first.hidden["answers"] == ["Frank Herbert", "Herbert"]
    assert first.hidden["intents"][1] == {"slots": {"medium": "film", "year": "1984"},
                                          "aliases": ["David Lynch"]}
    assert first.hidden["rules"] == {"utility": 1.0, "turn_cost": 0.1, "ineffective_cost": 0.1,
                                     "max_turns": 5, "depth": 4, "behaviour": "cooperative",
                                     "rate": 0.0}
    assert [i.meta["behaviour"] for i in items[:6]] == ["cooperative"] * 2 + ["vague"] * 2 + \
        ["contradictory"] * 2
    assert items[2].hidden["rules"]["rate"] == 0.5 and items[4].hidden["rules"]["rate"] == 0.3
    assert {i.meta["domain"] for i in items} == {"OpenDomainQA", "ProductRecommendation"}
    # The same graphs from a sub-folder (one domain) and ids that follow identity, not rows.
    sub = load(root / "OpenDomainQA")
    assert [i.item_id for i in sub] == [i.item_id for i in items[:6]]
    assert len({i.item_id for i in items}) == 12


def test_loader_reads_one_json_list_and_the_sample(tmp_path):
    p = tmp_path / "graphs.json"
    p.write_text(json.dumps([{**GRAPH, "domain": "QA"}, {**GRAPH, "cig_id": "q2"}]))
    items = CigLoader(CigArgs(behaviours=["vague"], utility=2.0))(p)
    assert len(items) == 4 and items[0].meta["domain"] == "QA" and items[2].meta["domain"] is None
    assert items[0].hidden["rules"]["utility"] == 2.0
    sample = read_graphs(SAMPLE)
    assert len(sample) == 10
    assert {g["domain"] for g in sample} == {"OpenDomainQA", "ProductRecommendation"}
    with pytest.raises(ValueError, match="'shy' is not one of"):
        CigArgs(behaviours=["shy"])


def _bad(**change):
    g = json.loads(json.dumps(GRAPH))
    for k, v in change.items():
        if v is None:
            g.pop(k)
        else:
            g[k] = v
    return g


@pytest.mark.parametrize("obj, field", [
    (_bad(cig_id=None), "'cig_id'"),
    (_bad(prompt="  "), "'prompt'"),
    (_bad(intents=[]), "'intents'"),
    (_bad(intents={"a": 1}), "'intents'"),
    (_bad(intents=[{"slots": ["medium"], "answer_aliases": "x"}]), "(intents[0]): field 'slots'"),
    (_bad(intents=[{"slots": {"medium": True}, "answer_aliases": "x"}]), "'slots.medium'"),
    (_bad(intents=[{"slots": {"medium": "a"}}]), "(intents[0]): field 'answer_aliases'"),
    (_bad(intents=[{"slots": {"medium": "a"}, "answer_aliases": 3}]), "'answer_aliases'"),
    (_bad(intents=[{"slots": {"medium": "a"}, "answer_aliases": " | "}]), "'answer_aliases': no alias"),
    (_bad(intents=[{"slots": {"m": str(i)}, "answer_aliases": "x"} for i in range(51)]), "at most 50"),
    (_bad(domain=7), "'domain'"),
    ("a string", "a graph is a JSON object"),
])
def test_loader_refuses_unknown_shapes_naming_file_and_field(tmp_path, obj, field):
    p = tmp_path / "list.json"
    p.write_text(json.dumps([GRAPH, obj]))
    with pytest.raises(DataError) as e:
        CigLoader(CigArgs())(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: row 1") and field in msg, msg
    root = _folder(tmp_path, {"QA/dev/bad.json": obj})
    with pytest.raises(DataError) as e:
        CigLoader(CigArgs())(root)
    assert str(e.value).startswith(f"{root / 'QA/dev/bad.json'}: row 0") and field in str(e.value)


def test_loader_refuses_unreadable_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(DataError, match="bad.json: not JSON: line 1"):
        CigLoader(CigArgs())(bad)
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps("a graph"))
    with pytest.raises(DataError, match="obj.json: expected a folder of graph files, one graph object or a"):
        CigLoader(CigArgs())(obj)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no graph file in the folder"):
        CigLoader(CigArgs())(tmp_path / "empty")
    root = _folder(tmp_path, {"QA/dev/two.json": [GRAPH]})
    with pytest.raises(DataError, match="two.json: row 0: a per-item file holds one graph object"):
        CigLoader(CigArgs())(root)
    with pytest.raises(DataError, match="missing.json"):
        CigLoader(CigArgs())(tmp_path / "missing.json")


# --------------------------------------------------------------------------- responder, planner seat, judge

def _item(behaviour="cooperative", hidden=2, rate=0.0, max_turns=5) -> Item:
    items = CigLoader(CigArgs(behaviours=[behaviour], max_turns=max_turns,
                              vague_rate=rate or 0.5, contradict_rate=rate or 0.3))(SAMPLE)
    return next(i for i in items if i.meta["cig_id"] == "qa-dune-creator"
                and i.meta["hidden_index"] == hidden)


def _gateway(**answers) -> FakeGateway:
    """Each role answers what ``answers`` gives it; a call for another role is a KeyError."""
    return FakeGateway(by_role(**answers))


def _env(gw, temperature=0.0):
    spec = SimpleNamespace(temperature=temperature)
    return PolicyEnv(gateway=gw, config=SimpleNamespace(role_spec=lambda r: spec))


def _state(item, *turns, max_turns=5):
    spec = load_spec("regret")
    cond = spec.condition("converse").model_copy(update={"max_turns": max_turns})
    transcript = [{"role": "user", "content": item.prompts["prompt"]}]
    for k, t in enumerate(turns):
        transcript.append({"role": "assistant" if k % 2 == 0 else "user", "content": t})
    return EpisodeState(item=item, condition=cond, target="t", transcript=transcript,
                        model_turns=(len(turns) + 1) // 2)


def _act(label):
    return CallResult(call_hash="h-act", content="{}", parsed=act.ActVerdict(reason="r", act=label))


def _facet(name):
    return CallResult(call_hash="h-map", content="{}",
                      parsed=regret_judge.FacetMapping(reason="r", facet=name))


def _responder(verbaliser):
    return responder_mod.Responder(responder_mod.ResponderArgs(verbaliser=verbaliser))


def test_responder_answers_the_mapped_facet_from_the_hidden_intent():
    item = _item(hidden=2)  # film, 2021
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet("Year"),
                  user_simulator=CallResult(call_hash="h-sim", content=" It's 2021. "))
    out = asyncio.run(_responder("llm").next(_env(gw), _state(item, "Which year do you mean?")))
    assert out == UserTurn("It's 2021.", "h-sim", act="clarifying_question", act_call_hash="h-act")
    assert [c.role for c in gw.calls] == ["act_judge", "facet_mapper", "user_simulator"]
    mapper = gw.calls[1].messages[0]["content"]
    assert "- medium: novel; film" in mapper and "- year: 1965; 1984; 2021" in mapper
    assert "Villeneuve" not in mapper  # no answer reaches the mapper
    sim = gw.calls[2].messages[0]["content"]
    assert 'Say that it is "2021".' in sim and "Villeneuve" not in sim and "film" not in sim
    # The template needs no simulator call.
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet("year"))
    out = asyncio.run(_responder("template").next(_env(gw), _state(item, "Which year?")))
    assert out.content == "It's 2021." and out.call_hash is None
    assert _responder("template").calls(load_spec("regret").condition("converse")) == {
        "act_judge": 4, "facet_mapper": 4}
    assert _responder("llm").calls(load_spec("regret").condition("converse")) == {
        "act_judge": 4, "facet_mapper": 4, "user_simulator": 4}


def test_responder_behaviours_non_answers_and_stops():
    vague = _item("vague", hidden=1)  # medium: "novel or film" (pinned above)
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet("medium"))
    out = asyncio.run(_responder("template").next(_env(gw), _state(vague, "Book or film?")))
    assert out.content == "Maybe novel, or perhaps film; I'm not sure."
    contra = _item("contradictory", hidden=0)  # year: says 1984 for the 1965 novel
    out = asyncio.run(_responder("template").next(_env(gw := _gateway(
        act_judge=_act("clarifying_question"), facet_mapper=_facet("year"))), _state(contra, "Year?")))
    assert out.content == "It's 1984."
    for named in ("UNSUPPORTED", "genre"):  # a facet the graph lacks is UNSUPPORTED
        gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet(named))
        out = asyncio.run(_responder("llm").next(_env(gw), _state(_item(), "Which genre?")))
        assert out.content == responder_mod.NON_ANSWER and len(gw.calls) == 2
    for label in ("direct_answer", "hedge", "refusal"):
        gw = _gateway(act_judge=_act(label))
        out = asyncio.run(_responder("llm").next(_env(gw), _state(_item(), "Herbert.")))
        assert out == Stop(ANSWERED, act=label, act_call_hash="h-act") and len(gw.calls) == 1


def test_responder_failures_are_errors_never_answers():
    bad = CallResult(call_hash="h-bad", error="down", error_kind="api_error")
    out = asyncio.run(_responder("llm").next(_env(_gateway(act_judge=bad)), _state(_item(), "?")))
    assert out.content is None and "act judge" in out.error and out.error_kind == "api_error"
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=bad)
    out = asyncio.run(_responder("llm").next(_env(gw), _state(_item(), "?")))
    assert "facet mapper" in out.error and out.act == "clarifying_question"
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet("year"),
                  user_simulator=CallResult(call_hash="h", content="  "))
    out = asyncio.run(_responder("llm").next(_env(gw), _state(_item(), "?")))
    assert out.error_kind == "empty_output"
    # Rules written for a cap of 5 under a condition capped at 3: refused, no call.
    gw = _gateway()
    out = asyncio.run(_responder("llm").next(_env(gw), _state(_item(), "?", max_turns=3)))
    assert out.error_kind == "invalid_input" and "max_turns 5" in out.error and gw.calls == []


def _view(item, response, history=(), act_label=None, is_last=False, position=1):
    hist = ({"role": "user", "content": item.prompts["prompt"]},) + tuple(history)
    return TurnView(item=item, condition="converse", episode_id="e", position=position,
                    model_turn=(position + 1) // 2, prompt=item.prompts["prompt"],
                    response=response, history=hist, is_last=is_last, act=act_label)


def test_the_judge_sends_the_responders_request_and_scores_turns():
    item = _item(hidden=2)
    gw = _gateway(act_judge=_act("clarifying_question"), facet_mapper=_facet("year"),
                  user_simulator=CallResult(call_hash="h", content="2021"))
    asyncio.run(_responder("llm").next(_env(gw), _state(item, "Which year do you mean?")))
    j = regret_judge.JUDGE
    q = _view(item, "Which year do you mean?", act_label="clarifying_question")
    assert j.request(q).messages == gw.calls[1].messages  # one cached call for both
    assert j.request(_view(item, "Villeneuve.", act_label="direct_answer")) is None
    got = {m.measure: m for m in j.verdicts(q, regret_judge.FacetMapping(reason="r", facet="year"))}
    assert (got["facet"].value, got["facet"].label) == (1.0, "year")
    assert (got["admitted"].value, got["admitted"].label) == (4.0, "2")  # only intent 2: 2021
    assert got["r_ref"].label == "not_applicable" and got["r_ref"].value is None
    un = {m.measure: m for m in j.verdicts(q, regret_judge.FacetMapping(reason="r", facet="plot"))}
    assert (un["facet"].value, un["facet"].label) == (0.0, "UNSUPPORTED")
    assert "not a facet" in un["facet"].reason and un["admitted"].value == 7.0  # rules out nothing
    last = {m.measure: m for m in j.verdicts(_view(item, "Denis Villeneuve", is_last=True,
                                                   position=3), None)}
    assert last["facet"].label == "not_applicable" and last["alias_correct"].value == 1.0
    # The planner on hidden intent 2 (cooperative): ask year, answer: 1 - 0.2.
    assert last["r_ref"].value == pytest.approx(0.8) and last["r_ref"].label == "ask year > answer 2"
    assert last["r_ref_expected"].value == pytest.approx(0.8)


def test_r_ref_is_the_planners_reward_on_the_items_own_hidden_intent():
    # On the vague Dune graph the planner's reward differs by hidden intent (worked by hand
    # in test_user_behaviours_and_r_ref_by_hand): 0.7, -0.4, -0.2, mean 0.1 / 3. The item's
    # r_ref is its own intent's value; only r_ref_expected is the graph's mean. (A judge
    # storing the mean as r_ref passes the cooperative case above, where all three are 0.8.)
    j = regret_judge.JUDGE
    for hidden, own in ((0, 0.7), (1, -0.4), (2, -0.2)):
        item = _item("vague", hidden=hidden)
        last = {m.measure: m for m in j.verdicts(_view(item, "Frank Herbert", is_last=True,
                                                       position=3), None)}
        assert last["r_ref"].value == pytest.approx(own), hidden
        assert last["r_ref_expected"].value == pytest.approx(0.1 / 3), hidden


def test_the_planner_seat_replays_its_questions_from_the_transcript():
    seat = planner_mod.Planner()
    item = _item("vague", hidden=1)  # planner: year ("1984 or 1965"), medium (vague), guess
    first = asyncio.run(seat.respond(None, None, _state(item)))
    assert first.content == "Which year do you mean: 1965, 1984 or 2021?"
    second = asyncio.run(seat.respond(None, None, _state(
        item, first.content, "Maybe 1984, or perhaps 1965; I'm not sure.")))
    assert second.content == "Which medium do you mean: novel or film?"
    third = asyncio.run(seat.respond(None, None, _state(
        item, first.content, "Maybe 1984, or perhaps 1965; I'm not sure.", second.content,
        "Maybe novel, or perhaps film; I'm not sure.")))
    assert third.content == "Frank Herbert"  # as simulate() says: a wrong guess
    assert [s[0] for s in cig.simulate(DUNE, 1, Rules(behaviour="vague", rate=0.5)).steps] == [
        "ask", "ask", "answer"]
    # A reply naming nothing rules nothing out; at the cap it must answer.
    capped = asyncio.run(seat.respond(None, None, _state(_item(hidden=0), "Q?", "No idea.",
                                                         max_turns=2)))
    assert capped.content == "Frank Herbert"


# --------------------------------------------------------------------------- views and report

T0 = dt.datetime(2026, 1, 1)
RULES = {"utility": 2.0, "turn_cost": 0.1, "ineffective_cost": 0.2, "max_turns": 5, "depth": 4}
DUNE_HIDDEN = {"cig_id": "d", "prompt": "Who made Dune?", "intents": [
    {"slots": {"medium": "novel", "year": "1965"}, "aliases": ["Herbert"]},
    {"slots": {"medium": "film", "year": "1984"}, "aliases": ["Lynch"]},
    {"slots": {"medium": "film", "year": "2021"}, "aliases": ["Villeneuve"]}]}

# item: (hidden intent, behaviour, domain)
ITEMS = {"A": (1, "cooperative", "QA"), "B": (2, "vague", "QA"), "B2": (0, "contradictory", "QA"),
         "C": (0, "cooperative", "Shop"), "D": (0, "cooperative", "QA")}
# Per episode: target, item, status, assistant turns as (content, act, facet, admitted mask,
# alias (value, label), equivalent, r_ref). facet None: not a replied question.
EPISODES = {
    # Q medium -> {1,2}; Q medium again (repeated); Q year -> {1}; right answer.
    # 4 turns, 1 ineffective: R = 2 - 0.4 - 0.2 = 1.4; regret 1.8 - 1.4 = 0.4
    "E1": ("m", "A", "completed", [("Q1?", "clarifying_question", "medium", 6, (0, "no_match"), None, None),
                                   ("again?", "clarifying_question", "medium", 6, (0, "no_match"), None, None),
                                   ("year?", "clarifying_question", "year", 2, (0, "no_match"), None, None),
                                   ("Lynch", "direct_answer", None, None, (1, "match"), None, 1.8)]),
    # Q UNSUPPORTED (ineffective); a hedge no alias matches, the equivalence judge accepts:
    # correct by equivalence, too early (3 consistent). R = 2 - 0.2 - 0.2 = 1.6; regret -1.1
    "E2": ("m", "B", "completed", [("huh?", "clarifying_question", "UNSUPPORTED", 7, (0, "no_match"), None, None),
                                   ("maybe V", "hedge", None, None, (0, "no_match"), 1.0, 0.5)]),
    # Q year -> {1}; then a question after one intent remained, at the cap (no reply):
    # too late, not answered. R = 0 - 0.2 = -0.2; regret 1.8 + 0.2 = 2.0
    "E3": ("p", "A", "completed", [("year?", "clarifying_question", "year", 2, (0, "no_match"), None, None),
                                   ("sure?", "clarifying_question", None, None, (0, "no_match"), None, 1.8)]),
    # An answer naming a competing intent: wrong even though the equivalence judge says yes.
    # R = -0.1; regret 1.0 + 0.1 = 1.1; too early (3 consistent)
    "E4": ("m", "C", "completed", [("Lynch", "direct_answer", None, None, (0, "competing"), 1.0, 1.0)]),
    # The act judge failed on its only turn: left out, counted.
    "E5": ("m", "D", "completed", [("Q?", None, None, None, (0, "no_match"), None, 0.9)]),
    # A failed episode: invisible.
    "E6": ("m", "B", "target_error", [("x", "direct_answer", None, None, (1, "match"), None, 0.5)]),
    # Contradictory: medium -> {1,2}; year 1965 -> {0}: the consistent set is empty; right
    # answer anyway. R = 2 - 0.3 = 1.7; regret 0.8 - 1.7 = -0.9
    "E7": ("m", "B2", "completed", [("m?", "clarifying_question", "medium", 6, (0, "no_match"), None, None),
                                    ("y?", "clarifying_question", "year", 1, (0, "no_match"), None, None),
                                    ("Herbert", "direct_answer", None, None, (1, "match"), None, 0.8)]),
}


def _populated(tmp_path, only=None) -> Warehouse:
    wh = Warehouse(str(tmp_path / "wh.duckdb")).init()
    wh.write("bench_items", [{
        "benchmark": "regret", "item_id": iid, "source_row": 0, "prompts": "{}",
        "hidden": json.dumps({**DUNE_HIDDEN, "hidden_index": h,
                              "rules": {**RULES, "behaviour": b, "rate": 0.0}}),
        "meta": json.dumps({"domain": d, "behaviour": b, "cig_id": "d", "hidden_index": h}),
        "run_id": None} for iid, (h, b, d) in ITEMS.items()])
    wh.write("verdict_sets", [{"judgment_set_id": k, "benchmark": "regret", "kind": k, "judge": None,
                               "prompt_version": "v", "created": T0, "run_id": "r"}
                              for k in ("act", "regret", "equivalence")])
    eps, turns, v = [], [], []

    def add(kind, ep, pos, measure, value, label=None, reason=None):
        v.append({"judgment_set_id": kind, "episode_id": ep, "position": pos, "measure": measure,
                  "kind": kind, "model_turn": (pos + 1) // 2, "value": value, "label": label,
                  "reason": reason})

    for eid, (target, item, status, ts) in EPISODES.items():
        if only is not None and eid not in only:
            continue
        eps.append({"episode_id": eid, "benchmark": "regret", "item_id": item,
                    "condition": "converse", "target": target, "user_policy": "responder",
                    "status": status, "termination": "answered", "n_turns": 2 * len(ts),
                    "run_id": "r"})
        for k, (content, act_label, facet, adm, alias, equiv, ref) in enumerate(ts):
            pos = 2 * k + 1
            turns += [{"episode_id": eid, "position": pos - 1, "role": "user", "model_turn": k + 1,
                       "content": "u"},
                      {"episode_id": eid, "position": pos, "role": "assistant", "model_turn": k + 1,
                       "content": content}]
            add("act", eid, pos, "act", None if act_label is None else act.ACT_CODES[act_label],
                act_label, None if act_label else "api_error: down")
            if facet is None:
                add("regret", eid, pos, "facet", None, "not_applicable")
                add("regret", eid, pos, "admitted", None, "not_applicable")
            else:
                add("regret", eid, pos, "facet", float(facet != "UNSUPPORTED"), facet)
                add("regret", eid, pos, "admitted", float(adm))
            add("regret", eid, pos, "alias_correct", float(alias[0]), alias[1])
            last = k == len(ts) - 1
            add("regret", eid, pos, "r_ref", ref if last else None, None if last else "not_applicable")
            if equiv is not None:
                add("equivalence", eid, pos, "equivalent", equiv)
    wh.write("episodes", eps)
    wh.write("episode_turns", turns)
    wh.write("verdicts", v)
    return wh


def test_turn_view_tracks_the_consistent_set_and_belief(tmp_path):
    wh = _populated(tmp_path)
    rows = {(r["episode_id"], r["position"]): r for r in wh.query("SELECT * FROM regret_turns")}
    assert not any(e == "E6" for e, _ in rows)  # a failed episode is invisible
    e1 = [rows[("E1", p)] for p in (1, 3, 5, 7)]
    assert [r["consistent_before"] for r in e1] == [7, 6, 6, 2]
    assert [r["n_consistent_before"] for r in e1] == [3, 2, 2, 1]
    assert [r["n_consistent_after"] for r in e1[:3]] == [2, 2, 1]
    assert [r["p_hidden_after"] for r in e1[:3]] == [0.5, 0.5, 1.0]  # hidden intent 1
    assert [r["ineffective_reason"] for r in e1] == [None, "repeated", None, None]
    assert [r["is_last"] for r in e1] == [False, False, False, True]
    assert rows[("E2", 1)]["ineffective_reason"] == "unsupported"
    e3 = rows[("E3", 3)]
    assert e3["too_late"] and not e3["replied"] and e3["ineffective_reason"] is None
    # Contradictions empty the set: no belief on the hidden intent.
    e7 = rows[("E7", 3)]
    assert (e7["n_consistent_after"], e7["p_hidden_after"], e7["ineffective_reason"]) == (0, None, None)
    assert rows[("E7", 5)]["n_consistent_before"] == 0


def test_episode_view_reward_regret_and_timing(tmp_path):
    wh = _populated(tmp_path)
    eps = {r["episode_id"]: r for r in wh.query("SELECT * FROM regret_episodes")}
    assert set(eps) == {"E1", "E2", "E3", "E4", "E5", "E7"}
    e1 = eps["E1"]
    assert (e1["turns"], e1["n_questions"], e1["n_replied"], e1["n_ineffective"]) == (4, 3, 3, 1)
    assert e1["tokens"] == 1 + 2 + 2 + 2  # ceil(chars / 4): 3, 6, 5, 5 characters
    assert (e1["correct"], e1["correct_by"], e1["too_early"], e1["too_late"]) == (1.0, "alias", False, False)
    assert e1["reward"] == pytest.approx(1.4) and e1["regret"] == pytest.approx(0.4)
    e2 = eps["E2"]
    assert (e2["correct"], e2["correct_by"], e2["too_early"]) == (1.0, "equivalence", True)
    assert e2["reward"] == pytest.approx(1.6) and e2["regret"] == pytest.approx(-1.1)
    e3 = eps["E3"]
    assert (e3["answered"], e3["correct"], e3["too_late"], e3["too_early"]) == (False, 0.0, True, False)
    assert e3["reward"] == pytest.approx(-0.2) and e3["regret"] == pytest.approx(2.0)
    e4 = eps["E4"]
    assert (e4["correct"], e4["correct_by"], e4["alias_label"]) == (0.0, None, "competing")
    assert e4["reward"] == pytest.approx(-0.1) and e4["regret"] == pytest.approx(1.1)
    e5 = eps["E5"]
    assert (e5["scored"], e5["unscored_reason"], e5["reward"], e5["regret"]) == (
        False, "act unscored", None, None)
    e7 = eps["E7"]
    assert (e7["correct"], e7["n_ineffective"], e7["too_early"]) == (1.0, 0, False)
    assert e7["reward"] == pytest.approx(1.7) and e7["regret"] == pytest.approx(-0.9)


def test_summary_and_target_views(tmp_path):
    wh = _populated(tmp_path)
    s = {(r["target"], r["behaviour"], r["domain"]): r for r in wh.query("SELECT * FROM regret_summary")}
    coop = s[("m", "cooperative", "QA")]  # E1 scored, E5 unscored
    assert (coop["n_episodes"], coop["n_scored"], coop["n_unscored"]) == (2, 1, 1)
    assert (coop["success"], coop["turns"], coop["tokens"]) == (1.0, 4.0, 7.0)
    assert coop["ineffective_rate"] == pytest.approx(1 / 3)
    assert (coop["reward"], coop["r_ref"], coop["regret"]) == pytest.approx((1.4, 1.8, 0.4))
    assert (coop["too_early_rate"], coop["too_late_rate"]) == (0.0, 0.0)
    vague = s[("m", "vague", "QA")]
    assert (vague["success"], vague["ineffective_rate"], vague["too_early_rate"]) == (1.0, 1.0, 1.0)
    assert vague["n_correct_by_equivalence"] == 1
    shop = s[("m", "cooperative", "Shop")]
    assert (shop["success"], shop["ineffective_rate"], shop["regret"]) == (0.0, None, pytest.approx(1.1))
    p = s[("p", "cooperative", "QA")]
    assert (p["too_late_rate"], p["ineffective_rate"], p["regret"]) == (1.0, 0.0, pytest.approx(2.0))
    t = {r["target"]: r for r in wh.query("SELECT * FROM regret_targets")}
    # m: E1, E2, E4, E7 scored (E5 counted only): success 3/4, turns (4+2+1+3)/4,
    # R (1.4 + 1.6 - 0.1 + 1.7)/4, regret (0.4 - 1.1 + 1.1 - 0.9)/4
    assert (t["m"]["n_episodes"], t["m"]["n_scored"], t["m"]["success"]) == (5, 4, 0.75)
    assert t["m"]["turns"] == 2.5
    assert (t["m"]["reward"], t["m"]["regret"]) == pytest.approx((1.15, -0.125))


def test_report_section(tmp_path):
    from tasks.benchmarks.regret import report as sec

    spec = load_spec("regret")
    empty = Warehouse(str(tmp_path / "empty.duckdb")).init()
    assert sec.section(empty, spec).startswith("Not computed:")
    md = sec.section(_populated(tmp_path), spec)
    assert ("| m | cooperative | QA | 1 / 2 | 100.0% | 4.00 | 7.00 | 33.3% | +1.400 | +1.800 "
            "| +0.400 | 0.0% | 0.0% |") in md
    # p: "year?" and "sure?" are 5 characters: 2 + 2 tokens
    assert ("| p | cooperative | QA | 1 / 1 | 0.0% | 2.00 | 4.00 | 0.0% | -0.200 | +1.800 | +2.000 "
            "| 0.0% | 100.0% |") in md
    assert "1 answer(s) counted correct by the equivalence judge's fallback" in md
    assert "- A = m (2.50 turns, 75.0% success)" in md and "- B = p (2.00 turns, 0.0% success)" in md
    grid = md.split("```")[1].splitlines()[1:]
    # 11 rows (100% .. 0%), 41 columns for 1 .. 5 turns: m at 2.5 turns -> column 15,
    # 75% -> row 10 - round(7.5) = 2; p at 2 turns -> column 10, 0% -> the bottom row.
    assert grid[2][8 + 15] == "A" and grid[10][8 + 10] == "B"


def test_report_section_without_scored_episodes_draws_no_figure(tmp_path):
    from tasks.benchmarks.regret import report as sec

    md = sec.section(_populated(tmp_path, only={"E5"}), load_spec("regret"))
    assert "| m | cooperative | QA | 0 / 1 | n/a |" in md
    assert "No figure: no target has a scored episode yet" in md and "```" not in md
    assert md.rstrip().endswith("- not placed: m (0 of 1 completed episodes scored)")


def test_a_target_whose_episodes_all_failed_keeps_its_row_with_count_and_reasons(tmp_path):
    from tasks.benchmarks.regret import report as sec
    from tasks.report.episodes import coverage_md, failed_targets_md

    wh = _populated(tmp_path)
    wh.write("episodes", [{"episode_id": f"F{k}", "benchmark": "regret", "item_id": "A",
                           "condition": "converse", "target": "down", "user_policy": "responder",
                           "status": "simulator_error", "termination": "error",
                           "error": "api_error: connection refused", "n_turns": 1, "run_id": "r"}
                          for k in range(6)])
    md = sec.section(wh, load_spec("regret"))
    # The column counts completed episodes in every row (m's vague row is 1 / 1: E2, not its
    # failed E6): "down" has none, its 6 failed ones are named beside it, not as the denominator.
    assert "| target | behaviour | domain | scored / completed episodes |" in md
    assert "| m | vague | QA | 1 / 1 |" in md
    assert ("| down | all | all | 0 / 0 (6 failed: simulator_error (api_error) x 6) | n/a | n/a |"
            in md)
    # The scatter cannot place it: it is named under the figure with its counts.
    assert md.rstrip().endswith(
        "- not placed: down (0 of 6 episodes completed: simulator_error (api_error) x 6)")
    assert "= down" not in md
    cov = coverage_md(wh, "regret")
    assert "| down | converse | 6 | 0 | 6 |" in cov and "simulator_error (api_error) x 6 |" in cov
    # m's failed E6 is named beside m's completed ones; only "down" has no completed episode.
    assert "target_error x 1" in cov and "ended_not_asking" in cov and "n_answered" not in cov
    lines = failed_targets_md(wh, "regret")
    assert len([x for x in lines if x.startswith("- **")]) == 1
    assert "- **down**: 0 of 6 episodes completed (simulator_error (api_error) x 6)" in lines[-1]


def test_the_act_judge_is_checked_against_the_planners_known_acts(tmp_path):
    # The planner's episodes on item A: P1 asks (its template) and answers, both read right;
    # P2 asks, read right, then answers "Lynch", read as a refusal; P3 answers at once, read as
    # a clarifying question. 3 of 5 turns agree (60.0 %); the planner's one row (cooperative,
    # QA) rests on 2 episodes with a disagreement. The planner's regret rows are not changed.
    from tasks.benchmarks.regret import report as sec

    wh = _populated(tmp_path)
    q = "Which medium do you mean: novel or film?"
    eps = {"P1": [(q, "clarifying_question"), ("Lynch", "direct_answer")],
           "P2": [(q, "clarifying_question"), ("Lynch", "refusal")],
           "P3": [("Lynch", "clarifying_question")]}
    wh.write("episodes", [{"episode_id": e, "benchmark": "regret", "item_id": "A",
                           "condition": "converse", "target": "planner", "user_policy": "responder",
                           "status": "completed", "termination": "answered", "n_turns": 2 * len(ts),
                           "run_id": "r"} for e, ts in eps.items()])
    wh.write("episode_turns", [{"episode_id": e, "position": pos, "role": role, "model_turn": k + 1,
                                "content": text}
                               for e, ts in eps.items() for k, (content, _) in enumerate(ts)
                               for pos, role, text in ((2 * k, "user", "u"),
                                                       (2 * k + 1, "assistant", content))])
    wh.write("verdicts", [{"judgment_set_id": "act", "episode_id": e, "position": 2 * k + 1,
                           "measure": "act", "kind": "act", "model_turn": k + 1,
                           "value": act.ACT_CODES[a], "label": a, "reason": None}
                          for e, ts in eps.items() for k, (_, a) in enumerate(ts)])
    md = sec.section(wh, load_spec("regret"))
    assert "it agrees on 3 of 5 planner turns (60.0%)" in md
    assert "Disagreements: answers read as clarifying_question 1; answers read as refusal 1." in md
    assert "| planner (**judge disagreed** in 2 episodes) | cooperative | QA | 0 / 3 |" in md
    # report.html sets the mark in bold too (its Markdown subset has no italics).
    from tasks.report.episode_page import md_html
    html = "".join(md_html(md))
    assert "<td>planner (<strong>judge disagreed</strong> in 2 episodes)</td>" in html
    assert "marked <strong>judge disagreed</strong> rest on" in html and "*judge" not in html
    # Without a planner seat there is nothing to check: no line.
    (tmp_path / "x").mkdir()
    assert "known acts" not in sec.section(_populated(tmp_path / "x"), load_spec("regret"))


def test_run_exits_1_when_every_episode_of_a_target_failed(tmp_path):
    import typer

    from flows.cli.run import _exit_if_a_target_failed
    from tasks.config import load_config

    cfg = yaml.safe_load((ROOT / "configs" / "regret.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    (tmp_path / "regret.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp_path / "regret.yaml")
    wh = Warehouse(config.home_path / "warehouse.duckdb").init()
    summary = {"home": str(config.home_path)}

    def episode(eid, target, status):
        return {"episode_id": eid, "benchmark": "regret", "item_id": "A", "condition": "converse",
                "target": target, "user_policy": "responder", "status": status,
                "termination": "error" if status != "completed" else "answered",
                "error": None if status == "completed" else "api_error: down", "n_turns": 1,
                "run_id": "r"}

    # "gone" is no seat of this config: an earlier run's target does not fail this one.
    wh.write("episodes", [episode("a", "smollm2-135m", "completed"),
                          episode("b", "planner", "simulator_error"),
                          episode("c", "gone", "simulator_error")])
    with pytest.raises(typer.Exit) as e:
        _exit_if_a_target_failed(config, summary)
    assert e.value.exit_code == 1
    wh.write("episodes", [episode("d", "planner", "completed")])
    _exit_if_a_target_failed(config, summary)  # one completed episode: the run stands


# --------------------------------------------------------------------------- end to end

def _fenced(text: str, label: str) -> str:
    return text.split(f"<<<BEGIN {label}", 1)[1].split(">>>", 1)[1].split(f"<<<END {label}", 1)[0].strip()


def _script(llm_server):
    def target(body):  # asks book or film once, then picks by the reply
        msgs = body["messages"]
        if len(msgs) == 1:
            return "Do you mean the book or the movie?"
        return "Frank Herbert." if "novel" in msgs[-1]["content"] else "David Lynch."

    def act_judge(body):
        response = _fenced(body["messages"][-1]["content"], "RESPONSE")
        label = "clarifying_question" if response.endswith("?") else "direct_answer"
        return json.dumps({"reason": "r", "act": label, "on_target": None})

    def facet_mapper(body):
        q = _fenced(body["messages"][-1]["content"], "QUESTION")
        facet = "medium" if "book or the movie" in q else q.split("Which ", 1)[1].split(" do you", 1)[0]
        return json.dumps({"reason": "r", "facet": facet})

    def simulator(body):
        text = body["messages"][-1]["content"]
        said = text.split("Say that it is ", 1)[1].split("\n", 1)[0]
        values = said.split('"')[1::2]
        assert "Herbert" not in text and "Lynch" not in text  # no answer reaches the user
        return f"{values[0]} or maybe {values[1]}, not sure." if len(values) > 1 else f"It is {values[0]}."

    llm_server.scripts.update({"targets": target, "act_judge": act_judge,
                               "facet_mapper": facet_mapper, "user_simulator": simulator})


@pytest.mark.slow  # the Prefect test server (prefect_harness): plan, run and report end to end
def test_plan_run_and_report_of_the_shipped_config(prefect_harness, llm_server, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    cfg = yaml.safe_load((ROOT / "configs" / "regret.yaml").read_text())
    cfg["home"] = str(tmp_path / "home")
    cfg["models"]["defaults"].update(api_base=llm_server.api_base, timeout_s=5, max_retries=2)
    cfg["gateway"] = {**cfg.get("gateway", {}), "backoff_base_s": 0.01, "backoff_max_s": 0.1}
    path = tmp_path / "regret.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _script(llm_server)
    runner = CliRunner()

    r = runner.invoke(app, ["plan", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    # 6 items (Dune: 3 hidden intents x cooperative, vague) x 2 seats (the model, the
    # planner). Upper bounds: the model answers at most 5 times in 6 episodes; the responder
    # reads at most 4 turns of each of 12 episodes; the judges every turn (60), sharing the
    # responder's requests.
    assert "1 conditions, 2 target(s): 12 episodes" in r.output
    calls = {line.split()[0]: int(line.split()[2]) for line in r.output.splitlines()
             if line.split()[:1] in (["targets"], ["act_judge"], ["facet_mapper"], ["user_simulator"])}
    assert calls == {"targets": 30, "act_judge": 60, "facet_mapper": 60, "user_simulator": 48}

    r = runner.invoke(app, ["run", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    s = {(x["target"], x["behaviour"]): x for x in wh.query("SELECT * FROM regret_summary")}
    model = "smollm2-135m"
    # The model asks about the medium, then answers Herbert for "novel", Lynch otherwise.
    # Cooperative: h0 novel -> right (R 0.8); h1 film -> Lynch, right (0.8) but with two films
    # still possible (too early); h2 film -> Lynch, wrong (-0.2, too early). The planner asks
    # the year and is right every time: R_ref 0.8, regret (0 + 0 + 1) / 3.
    coop = s[(model, "cooperative")]
    assert (coop["n_scored"], coop["success"], coop["turns"]) == (3, pytest.approx(2 / 3), 2.0)
    assert (coop["reward"], coop["r_ref"], coop["regret"]) == pytest.approx((1.4 / 3, 0.8, 1 / 3))
    assert (coop["too_early_rate"], coop["ineffective_rate"]) == (pytest.approx(2 / 3), 0.0)
    # Vague (medium: h0 "novel", h1 "novel or film", h2 "film"): h0 right (0.8); h1 reads
    # "novel": wrong, and the reply narrowed nothing (ineffective): -0.3; h2 wrong: -0.2.
    # The planner: 0.7, -0.4, -0.2 (test_user_behaviours_and_r_ref_by_hand).
    vague = s[(model, "vague")]
    assert (vague["success"], vague["ineffective_rate"]) == pytest.approx((1 / 3, 1 / 3))
    assert (vague["reward"], vague["r_ref"], vague["regret"]) == pytest.approx(
        (0.1, 0.1 / 3, (-0.1 - 0.1 + 0.0) / 3))
    # The planner's own episodes: exactly its simulated ones, so its regret is 0.
    for b in ("cooperative", "vague"):
        assert s[("planner", b)]["regret"] == pytest.approx(0.0)
        assert s[("planner", b)]["n_scored"] == 3
    assert s[("planner", "vague")]["turns"] == pytest.approx(8 / 3)
    turns = wh.query("SELECT content FROM episode_turns t JOIN episodes e USING (episode_id) "
                     "WHERE e.target = 'planner' AND t.role = 'assistant' ORDER BY position LIMIT 1")
    assert turns[0]["content"] == "Which year do you mean: 1965, 1984 or 2021?"
    # The mapper's request holds the graph and the question only: one call per distinct
    # question across items and behaviours, and the verdicts stage sent none of its own.
    [asked] = wh.query("SELECT count(DISTINCT content) AS n FROM episode_turns "
                       "WHERE role = 'assistant' AND act = 'clarifying_question'")
    assert llm_server.counts["facet_mapper"] == asked["n"] <= 4

    r = runner.invoke(app, ["report", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    text = md.read_text()
    assert "## Clarification as a policy: regret against the reference planner" in text
    assert "| planner | cooperative | OpenDomainQA | 3 / 3 | 100.0% | 2.00 |" in text
    # The planner's turns: 2 in each cooperative episode, 8 in the vague ones; the scripted
    # act judge reads each right.
    assert "it agrees on 14 of 14 planner turns (100.0%)" in text and "judge disagreed" not in text
    assert "facet_mapper: openai/local-smollm2" in text

    before = llm_server.counts["total"]
    r = runner.invoke(app, ["run", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert llm_server.counts["total"] == before  # a rerun sends nothing


def test_model_written_text_stays_inside_its_fence():
    from tests.support.fences import MARK, PAYLOAD, outside_fences

    item = _item()
    for text in (regret_judge.facet_messages(item, PAYLOAD)[0]["content"],
                 responder_mod.reply_messages(item, PAYLOAD, ("2021",))[0]["content"]):
        assert MARK in text and MARK not in outside_fences(text)
    from tasks import untrusted

    untrusted.configure(untrusted.LimitsConfig(prompt_turn_chars=1000))
    try:
        long = regret_judge.facet_messages(item, "x" * 5000)[0]["content"]
    finally:
        untrusted.configure(None)
    assert "4,000 more characters not shown" in long and "x" * 1001 not in long
