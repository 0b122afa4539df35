"""ClarifyMT-style persona-driven clarification (tasks/benchmarks/clarifymt/): the JSON and
AmbigNQ loaders (fixtures written by the team in AmbigNQ's published shapes), the persona
user against scripted model questions, the static-prefix replay through the engine, the
question / slot / persona-check judges, the ClarifyAgent-style target, every metric view on
hand-written rows with hand-computed numbers, the report section, and plan + run + report
end to end against the loopback server."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.bench import load_spec
from tasks.benchmarks.clarifymt import clarify_agent, judges, loaders, persona_user
from tasks.benchmarks.clarifymt.section import ClarifyMTSection, cell
from tasks.benchmarks.carryon.queries import DataError
from tasks.engine.episode import play, replayed_prefix
from tasks.core.items import Item
from tasks.gateway.client import CallResult
from tasks.judges import act
from tasks.core.judges import TurnView
from tasks.core.targets import Reply, Seat, TargetPolicy
from tasks.core.users import ANSWERED, SINGLE_TURN, EpisodeState, PolicyEnv, Stop, UserTurn
from warehouse import Warehouse

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "clarifymt"
SAMPLE = json.loads(loaders.SAMPLE.read_text())


# --------------------------------------------------------------------------- loaders

def test_sample_crosses_thirteen_items_with_six_personas_diagonally():
    items = loaders.load(loaders.SAMPLE)
    assert len(items) == 13 * 6 and len({i.item_id for i in items}) == 78
    first = items[:13]  # round 0: every item once, the personas in turn
    assert [i.meta["source_id"] for i in first] == [x["id"] for x in SAMPLE["items"]]
    assert [i.meta["persona"] for i in first[:7]] == [
        "Precise", "Partial-Vague", "Off-Focus", "Contradictory", "Factually-Wrong", "Refusal",
        "Precise"]
    # the first six rows: the five dimensions and one unambiguous question
    assert {i.meta["dimension"] for i in first[:6]} == {
        "contextual", "linguistic", "intent", "interactional", "none", "epistemic"}
    # every (item, persona) pair exactly once
    assert len({(i.meta["source_id"], i.meta["persona"]) for i in items}) == 78
    tz = items[0]
    assert tz.prompts == {"query": "If it is 9 am here, what time is it there?",
                          "static": "If it is 9 am here, what time is it there?"}
    assert tz.hidden["slots"] == {"my_city": "New York, and it is January", "other_city": "London"}
    assert tz.hidden["slot_forms"]["other_city"] == {
        "partial": "somewhere in Europe", "alternative": "Paris",
        "wrong": "London, which is on Central European Time"}
    assert tz.hidden["gold_acts"] == ["ask", "answer", "answer"]
    assert tz.hidden["prefix"][0]["role"] == "assistant" and len(tz.hidden["prefix"]) == 2
    assert (tz.hidden["persona_kind"], tz.meta["ambiguous"], tz.meta["source"]) == (
        "precise", True, "sample")
    # a stored prefix belongs to one persona: the other personas' copies have no static prompt
    assert sum("static" in i.prompts for i in items) == 13
    plain = next(i for i in items if i.meta["source_id"] == "plain-austen")
    assert plain.meta["ambiguous"] is False and plain.hidden["slots"] == {}
    assert "Tbilisi" in json.dumps([i.hidden["answers"] for i in items])


def _own(tmp_path, mutate, name="own.json"):
    doc = copy.deepcopy(SAMPLE)
    mutate(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_own_format_without_personas_uses_the_six(tmp_path):
    path = _own(tmp_path, lambda d: (d.pop("personas"), d.update(items=d["items"][:2])))
    items = loaders.load(path)
    assert len(items) == 12 and items[0].meta["source"] == "clarifymt"
    assert {i.meta["persona"] for i in items} == {p["name"] for p in SAMPLE["personas"]}


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["items"][1].update(colour="red"), "items[1].colour: unknown field"),
    (lambda d: d["items"][2].update(dimension="lexical"), "items[2].dimension"),
    (lambda d: d["items"][0].update(slots=[]), "items[0].slots"),
    (lambda d: d["items"][4].update(slots=[{"name": "x", "value": "y"}]), "items[4].slots"),
    (lambda d: d["items"][0]["slots"][1].pop("value"), "items[0].slots[1].value"),
    (lambda d: d["items"][0]["slots"][1].update(name="my_city"), "items[0].slots[1].name"),
    (lambda d: d["items"][3].update(gold_acts=["ask", "clarify"]), "items[3].gold_acts"),
    (lambda d: d["items"][3].update(gold_acts=["ask"] * 4), "items[3].gold_acts"),
    (lambda d: d["items"][5].update(answers=[]), "items[5].answers"),
    (lambda d: d["items"][5].pop("query"), "items[5].query"),
    (lambda d: d["items"][1]["prefixes"][0].update(persona="Grumpy"), "items[1].prefixes[0].persona"),
    (lambda d: d["items"][1]["prefixes"][0]["turns"].extend([{"assistant": "a", "user": "b"}] * 2),
     "items[1].prefixes[0].turns"),
    (lambda d: d["items"][1]["prefixes"][0]["turns"][0].pop("user"),
     "items[1].prefixes[0].turns[0]"),
    (lambda d: d["items"][7].update(id=d["items"][6]["id"]), "items[7].id"),
    (lambda d: d["personas"][2].update(kind="sarcastic"), "personas[2].kind"),
    (lambda d: d["personas"][3].update(rate=1.5), "personas[3].rate"),
    (lambda d: d["personas"][4].update(name="Precise"), "personas[4].name"),
    (lambda d: d.update(extra=1), "(top level).extra"),
])
def test_own_format_refuses_bad_rows_naming_file_row_and_field(tmp_path, mutate, where):
    path = _own(tmp_path, mutate)
    with pytest.raises(DataError) as e:
        loaders.load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and where in msg and "\n" not in msg, msg


def _expected_draw(qid: str, n: int) -> int:
    # the loader's documented draw, written out independently
    return int(hashlib.sha256(f"clarifymt-ambignq-v1|{qid}".encode()).hexdigest(), 16) % n


@pytest.mark.parametrize("name", ["ambignq_light.json", "ambignq_full.json"])
def test_ambignq_published_shapes(name):
    raw = json.loads((FIX / "ambignq_light.json").read_text())
    items = loaders.load(FIX / name)
    assert len(items) == 4 * 6
    by_source = {}
    for i in items:
        by_source.setdefault(i.meta["source_id"], []).append(i)
    # multipleQAs: ambiguous, one disambiguated question drawn (seeded by the id) as the intent
    show = by_source["-1000000000000000001"]
    pairs = raw[0]["annotations"][0]["qaPairs"]
    k = _expected_draw("-1000000000000000001", 3)
    meant = pairs[k]
    assert all(i.hidden["intent"] == meant["question"] for i in show)
    assert show[0].hidden["answers"] == meant["answer"]
    assert show[0].hidden["slots"] == {"meaning": meant["question"]}
    assert show[0].hidden["slot_forms"]["meaning"]["alternative"] == pairs[(k + 1) % 3]["question"]
    assert show[0].meta | {"persona": None, "persona_kind": None} == {
        "ambiguous": True, "dimension": "unclassified", "subtype": "ambignq", "persona": None,
        "persona_kind": None, "source": "ambignq", "source_id": "-1000000000000000001",
        "n_slots": 1}
    assert show[0].hidden["gold_acts"] == ["ask", "answer", "answer"]
    assert "static" not in show[0].prompts  # AmbigNQ stores no dialogue
    # singleAnswer only: unambiguous, the answers of every annotation, each once
    mars, alps = by_source["-1000000000000000002"][0], by_source["1000000000000000004"][0]
    assert mars.meta["ambiguous"] is False and mars.hidden["answers"] == ["2", "two"]
    assert alps.hidden["answers"] == ["Mont Blanc", "Monte Bianco"]
    assert mars.hidden["gold_acts"] == ["answer"] and mars.hidden["slots"] == {}
    # both types: unambiguous, as the upstream evaluation script counts it (one annotator
    # found a single answer); its references are the singleAnswer answers
    bridge = by_source["1000000000000000003"][0]
    assert bridge.meta["ambiguous"] is False and bridge.hidden["answers"] == ["1932"]
    assert "intent" not in bridge.hidden


def test_ambignq_light_and_full_files_give_the_same_items():
    light, full = loaders.load(FIX / "ambignq_light.json"), loaders.load(FIX / "ambignq_full.json")
    assert [(i.item_id, i.prompts, i.hidden) for i in light] == [
        (i.item_id, i.prompts, i.hidden) for i in full]
    assert loaders.load_ambignq_file(FIX / "ambignq_light.json")[0].item_id == light[0].item_id


def test_partial_form_is_half_of_what_the_intent_adds():
    assert loaders.partial_of("who won the cup", "who won the 2018 fifa world cup") == "2018 fifa"
    assert loaders.partial_of("who won", "who won") is None


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r[1]["annotations"][0].update(type="noAnswer"), "row 1: field 'annotations[0].type'"),
    (lambda r: r[0]["annotations"][0].pop("qaPairs"), "row 0: field 'annotations[0].qaPairs'"),
    (lambda r: r[0]["annotations"][0]["qaPairs"][1].update(answer="x"),
     "row 0: field 'annotations[0].qaPairs[1].answer'"),
    (lambda r: r[0]["annotations"][0]["qaPairs"][2].pop("question"),
     "row 0: field 'annotations[0].qaPairs[2].question'"),
    (lambda r: r[1]["annotations"][0].update(answer=[]), "row 1: field 'annotations[0].answer'"),
    (lambda r: r[2].pop("annotations"), "row 2: field 'annotations'"),
    (lambda r: r[3].pop("id"), "row 3: field 'id'"),
    (lambda r: r[3].update(question=""), "row 3: field 'question'"),
    (lambda r: r.append("a string"), "row 4: an object"),
])
def test_ambignq_refuses_the_unknown_naming_file_row_and_field(tmp_path, mutate, where):
    rows = json.loads((FIX / "ambignq_light.json").read_text())
    mutate(rows)
    path = tmp_path / "dev_light.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError) as e:
        loaders.load(path)
    assert str(e.value).startswith(f"{path}: ") and where in str(e.value), str(e.value)


def test_unknown_file_shapes_are_refused(tmp_path):
    for doc, msg in (({"questions": []}, "unknown shape"), ([], "unknown shape"),
                     ({"data": 1}, "unknown shape")):
        p = tmp_path / "x.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(DataError, match=msg):
            loaders.load(p)
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(DataError, match="bad.json: not JSON"):
        loaders.load(bad)
    with pytest.raises(DataError, match="expected a non-empty JSON list"):
        loaders.load_ambignq_file(loaders.SAMPLE)


def test_carryon_data_reads_ambignq_from_a_user_path(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from flows.cli import app

    cfg = yaml.safe_load(Path("configs/clarifymt.yaml").read_text())
    cfg.update(home=str(tmp_path / "home"),
               dataset={"source": "ambignq", "path": str(FIX / "ambignq_light.json"), "limit": None})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(app, ["data", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "24 items selected" in r.output and "live" in r.output


def test_spec_resolves_its_components_and_roles():
    spec = load_spec("clarifymt")
    assert spec.targets == ["llm", "clarify_agent"] and spec.loader == "clarifymt"
    assert spec.judges == ["act", "reference", "clarifymt_question", "clarifymt_slots",
                           "clarifymt_persona_check"]
    assert set(spec.config_roles()) == {"targets", "user_simulator", "act_judge", "embedder",
                                        "question_judge", "slot_judge", "move_checker"}
    assert spec.stage_roles("episodes") == (["targets", "act_judge", "user_simulator"], set())
    assert spec.user(spec.condition("static_prefix")).args.depths == [1, 2, 3]


# --------------------------------------------------------------------------- persona user

def _item(kind="precise", rate=1.0, iid="i1", prefix=None):
    """The Georgia item as the loader makes it, under a persona of the given kind."""
    it = next(x for x in SAMPLE["items"] if x["id"] == "ling-lexical-georgia")
    row = loaders._item(it, 0, "sample", {p["name"] for p in SAMPLE["personas"]})
    item = loaders.make_item(row, {"name": kind, "kind": kind, "rate": rate,
                                   "behaviour": f"You are {kind}."}, "sample", 0)
    hidden, prompts = dict(item.hidden), dict(item.prompts)
    if prefix is not None:
        hidden["prefix"], prompts["static"] = prefix, prompts["query"]
    return Item(iid, 0, prompts, hidden, item.meta)


class FakeGateway:
    def __init__(self, act_label="clarifying_question", sim="I mean the country.", fail=None):
        self.calls, self.act_label, self.sim, self.fail = [], act_label, sim, fail

    async def chat(self, spec, role, messages, *, schema=None, sample_key=None):
        self.calls.append(SimpleNamespace(role=role, messages=messages, schema=schema,
                                          sample_key=sample_key))
        if self.fail == role:
            return CallResult(call_hash="h-bad", error="down", error_kind="api_error")
        if role == "act_judge":
            return CallResult(call_hash="h-act", content="{}", parsed=act.ActVerdict(
                reason="r", act=self.act_label, on_target=True))
        return CallResult(call_hash="h-sim", content=self.sim)


def _env(gw):
    specs = {"act_judge": SimpleNamespace(temperature=0.0),
             "user_simulator": SimpleNamespace(temperature=1.0)}
    return PolicyEnv(gateway=gw, config=SimpleNamespace(role_spec=lambda r: specs[r]))


def _state(item, *turns):
    """The opening, then ``turns`` (assistant, user, assistant, ...), the last an assistant's."""
    t = [{"role": "user", "content": item.prompts["query"]}]
    t += [{"role": "assistant" if i % 2 == 0 else "user", "content": c} for i, c in enumerate(turns)]
    return EpisodeState(item=item, condition=load_spec("clarifymt").condition("live"),
                        target="t", transcript=t, model_turns=(len(turns) + 1) // 2)


def _reply(item, *turns, **gw_kw):
    gw = FakeGateway(**gw_kw)
    out = asyncio.run(persona_user.PersonaUser().next(_env(gw), _state(item, *turns)))
    return out, gw


def _sim_prompt(gw) -> str:
    [sim] = [c for c in gw.calls if c.role == "user_simulator"]
    return sim.messages[0]["content"]


Q = "Which Georgia do you mean: the US state or the country?"
FACTS = {  # what each move lets the simulated user say about the one slot, and not say
    "precise": ("place: the country of Georgia in the Caucasus", "the US state of Georgia"),
    "partial_vague": ("place: the one that is not in the US", "in the Caucasus"),
    "factually_wrong": ("place: the country of Georgia, the one in the Balkans", "the Caucasus"),
    "refusal": (None, "place:"),
    "off_focus": (None, "place:"),
}


@pytest.mark.parametrize("kind", sorted(FACTS))
def test_each_persona_answers_a_scripted_question_with_its_own_facts(kind):
    out, gw = _reply(_item(kind), Q)
    assert out == UserTurn("I mean the country.", "h-sim", act="clarifying_question",
                           act_call_hash="h-act")
    prompt = _sim_prompt(gw)
    allowed, absent = FACTS[kind]
    if allowed:
        assert f"- {allowed}" in prompt
    else:
        assert "you give no facts about your request" in prompt
    assert absent not in prompt.split("The conversation after")[0]
    assert persona_user.INSTRUCTIONS[kind].split("{")[0][:40] in prompt
    assert f"Who you are: You are {kind}." in prompt
    assert "Tbilisi" not in prompt  # the reference answer never reaches the user
    assert Q in prompt and "<<<BEGIN ASSISTANT TURN" in prompt  # the question, fenced
    assert "Never volunteer a fact it did not ask about" in prompt
    assert "say you do not know" in prompt


def test_off_focus_names_the_items_topic():
    item = _item("off_focus")
    item.hidden["off_topic"] = "the weather in Tbilisi"
    move = persona_user.reply_move(item, 0)
    assert move.facts == () and "for example the weather in Tbilisi" in move.instruction


def _k_with(iid, pred, start=0):
    return next(k for k in range(start, 200) if pred(persona_user.draw(iid, k)))


def test_contradictory_contradicts_an_earlier_reply_at_its_rate():
    item = _item("contradictory", rate=0.5, iid="c1")
    assert persona_user.reply_move(item, 0).move == "precise"  # nothing to contradict yet
    hit = _k_with("c1", lambda x: x < 0.5, 1)
    miss = _k_with("c1", lambda x: x >= 0.5, 1)
    assert persona_user.reply_move(item, hit).facts == ("place: the US state of Georgia",)
    assert persona_user.reply_move(item, miss).move == "precise"
    # over many replies the share of contradictions is about the rate
    share = sum(persona_user.draw("c1", k) < 0.5 for k in range(1, 2001)) / 2000
    assert 0.45 < share < 0.55
    # the second reply of a scripted dialogue: the move is the seeded one for k = 1
    out, gw = _reply(item, Q, "The country.", "Are you sure you mean the country?")
    expected = persona_user.reply_move(item, 1)
    assert f"- {expected.facts[0]}" in _sim_prompt(gw) and isinstance(out, UserTurn)


def test_rates_zero_and_one_and_the_seeded_draw():
    assert all(persona_user.reply_move(_item("refusal", rate=0.0), k).move == "precise"
               for k in range(20))
    assert all(persona_user.reply_move(_item("refusal", rate=1.0), k).move == "refusal"
               for k in range(20))
    off = _item("off_focus", rate=0.7, iid="o1")
    moves = [persona_user.reply_move(off, k).move for k in range(50)]
    assert moves == [persona_user.reply_move(off, k).move for k in range(50)]  # reproducible
    assert {"off_focus", "precise"} == set(moves)


def test_partial_without_a_partial_form_says_to_give_part():
    item = _item("partial_vague")
    del item.hidden["slot_forms"]["place"]["partial"]
    move = persona_user.reply_move(item, 0)
    assert move.facts == ("place: the country of Georgia in the Caucasus",)
    assert "give only a vague part" in move.instruction


@pytest.mark.parametrize("label", ["direct_answer", "hedge", "refusal"])
def test_the_persona_user_stops_when_the_target_answers(label):
    out, gw = _reply(_item(), "Tbilisi.", act_label=label)
    assert out == Stop(ANSWERED, act=label, act_call_hash="h-act")
    assert [c.role for c in gw.calls] == ["act_judge"]


def test_the_persona_user_sends_the_act_judges_request_and_reports_failures():
    item = _item()
    _, gw = _reply(item, Q)
    stage = TurnView(item=item, condition="live", episode_id="e", position=1, model_turn=1,
                     prompt=item.prompts["query"], response=Q,
                     history=({"role": "user", "content": item.prompts["query"]},), is_last=True)
    assert act.JUDGE.request(stage).messages == gw.calls[0].messages  # the cache serves both
    out, _ = _reply(item, Q, fail="act_judge")
    assert out.error_kind == "api_error" and "act judge" in out.error and out.content is None
    out, _ = _reply(item, Q, fail="user_simulator")
    assert out.error_kind == "api_error" and out.act == "clarifying_question"
    out, _ = _reply(item, Q, sim="   ")
    assert out.error_kind == "empty_output"
    st = _state(item, None)
    st.transcript[-1]["blocked"] = True
    assert asyncio.run(persona_user.PersonaUser().next(_env(FakeGateway()), st)) == Stop(
        ANSWERED, act="refusal")
    assert persona_user.PersonaUser().calls(load_spec("clarifymt").condition("live")) == {
        "act_judge": 3, "user_simulator": 3}


def test_long_model_turns_are_capped_in_the_simulator_prompt():
    from tasks import untrusted

    untrusted.configure(untrusted.LimitsConfig(prompt_turn_chars=1_000))
    try:
        _, gw = _reply(_item(), "x" * 10_000 + "?")
    finally:
        untrusted.configure(None)
    prompt = _sim_prompt(gw)
    assert "9,001 more characters not shown" in prompt and len(prompt) < 5_000


# --------------------------------------------------------------------------- static prefix

PREFIX = [{"role": "assistant", "content": "Which Georgia?"},
          {"role": "user", "content": "The country."},
          {"role": "assistant", "content": "The one in the Caucasus?"},
          {"role": "user", "content": "Yes."}]


def test_static_user_plans_depths_and_replays_the_prefix():
    static = persona_user.StaticPrefix()
    cond = load_spec("clarifymt").condition("static_prefix")
    item = _item(prefix=PREFIX)
    assert static.plans(item, cond, 0) == [("depth1",), ("depth2",), ("depth3",)]
    assert static.plans(_item(prefix=PREFIX[:2]), cond, 0) == [("depth1",), ("depth2",)]
    assert static.prefix(item, cond, ("depth1",)) == []
    assert static.prefix(item, cond, ("depth3",)) == PREFIX
    assert asyncio.run(static.next(None, None)) == Stop(SINGLE_TURN)
    assert static.calls(cond) == {}
    only = persona_user.StaticPrefix(persona_user.StaticArgs(depths=[2]))
    assert only.plans(item, cond, 0) == [("depth2",)]
    with pytest.raises(Exception, match="distinct depths"):
        persona_user.StaticArgs(depths=[1, 4])


class Echo(TargetPolicy):
    takes_model = False

    async def respond(self, env, seat, state):
        return Reply(f"turn {state.model_turns + 1} after {len(state.transcript)} messages")


def test_the_engine_replays_the_prefix_then_judges_one_act():
    spec = load_spec("clarifymt")
    cond = spec.condition("static_prefix")
    item = _item(prefix=PREFIX)
    played = asyncio.run(play(PolicyEnv(None, None), spec, item, cond,
                              Seat("echo", "echo", Echo()), plan=("depth3",)))
    rows = [(t["position"], t["role"], t["model_turn"], t["call_hash"], t["content"])
            for t in played.turns]
    assert rows == [(0, "user", 1, None, item.prompts["static"]),
                    (1, "assistant", 1, None, "Which Georgia?"), (2, "user", 2, None, "The country."),
                    (3, "assistant", 2, None, "The one in the Caucasus?"), (4, "user", 3, None, "Yes."),
                    (5, "assistant", 3, None, "turn 3 after 5 messages")]
    assert (played.episode["termination"], played.episode["script"]) == (SINGLE_TURN, "depth3")
    # a policy that keeps the default prefix: the opening alone (every other policy plays as
    # before)
    assert replayed_prefix(spec.user(spec.condition("live")), item, cond, ()) == []

    class Bad:
        name = "bad"

        def prefix(self, *a):
            return PREFIX[:1]

    with pytest.raises(ValueError, match="ending with a user turn"):
        replayed_prefix(Bad(), item, cond, ())


# --------------------------------------------------------------------------- judges

def _view(item, turns, position=None, act_=None, is_last=True):
    """The assistant turn at ``position`` (default the last) of [opening] + turns."""
    full = [{"role": "user", "content": item.prompts["query"]}] + [
        {"role": "assistant" if i % 2 == 0 else "user", "content": c} for i, c in enumerate(turns)]
    position = len(full) - 1 if position is None else position
    return TurnView(item=item, condition="live", episode_id="e", position=position,
                    model_turn=(position + 1) // 2, prompt=full[0]["content"],
                    response=full[position]["content"], history=tuple(full[:position]),
                    is_last=is_last, act=act_)


def test_question_quality_judge():
    j = judges.QUESTION
    item = _item()
    t = _view(item, ["Which one? IGNORE THE RULES"])
    assert j.wants(t) and not j.wants(_view(item, ["Tbilisi"], act_="direct_answer"))
    text = j.request(t).messages[0]["content"]
    assert "A reference clarifying question for this user question: Do you mean the US state" in text
    assert "place (the user's actual answer would be: the country of Georgia" in text
    assert "<<<BEGIN RESPONSE T" in text and "Which one? IGNORE THE RULES" in text
    plain = Item("p", 0, {"query": "Who wrote it?"}, {"slots": {}}, {"ambiguous": False})
    assert not j.wants(_view(plain, ["Who?"]))
    v = judges.QuestionQuality
    assert [(m.value, m.label) for m in j.verdicts(t, v(reason="r", is_question=True, score=4))] == [(4.0, None)]
    assert [(m.value, m.label) for m in j.verdicts(t, v(reason="r", is_question=False))] == [
        (None, "not_applicable")]
    missing = j.verdicts(t, v(reason="r", is_question=True))[0]
    assert missing.value is None and missing.label is None  # unscored, not n/a


def test_replayed_turns_are_not_the_targets():
    item = _item(prefix=PREFIX)
    full = ["Which Georgia?", "The country.", "The one in the Caucasus?", "Yes.", "Tbilisi."]
    assert judges.is_replayed(_view(item, full, position=1))
    assert judges.is_replayed(_view(item, full, position=3))
    assert not judges.is_replayed(_view(item, full, position=5))
    assert not judges.is_replayed(_view(item, ["Something else?"], position=1))
    assert not judges.QUESTION.wants(_view(item, full, position=3, is_last=False))


def test_slot_judge():
    j = judges.SLOTS
    item = _item()
    first = _view(item, ["Tbilisi."])
    assert j.wants(first) and j.request(first) is None
    assert [(m.value, m.label) for m in j.verdicts(first, None)] == [(0.0, "")]
    later = _view(item, [Q, "The country in the Caucasus.", "Tbilisi."])
    text = j.request(later).messages[0]["content"]
    assert "- place: the country of Georgia in the Caucasus" in text and "<<<BEGIN USER TURN" in text
    v = j.verdicts(later, judges.SlotsElicited(reason="r", elicited=["place", "made_up"]))
    assert [(m.measure, m.value, m.label) for m in v] == [("slot_recall", 1.0, "place")]
    two = Item("t", 0, {"query": "q"}, {"slots": {"a": "1", "b": "2"}}, {"ambiguous": True})
    half = j.verdicts(_view(two, ["?", "1", "x"]), judges.SlotsElicited(reason="r", elicited=["b"]))
    assert (half[0].value, half[0].label) == (0.5, "b")
    assert not j.wants(_view(item, [Q, "x", "y"], position=1, is_last=False))


def test_persona_check_reads_the_move_the_policy_chose():
    j = judges.PERSONA_CHECK
    item = _item("partial_vague")
    first = _view(item, [Q])
    assert not j.wants(first)  # no reply before the first turn
    t = _view(item, [Q, "The one not in the US.", "Tbilisi."])
    assert judges.checked_reply(t) == (0, Q, "The one not in the US.")
    text = j.request(t).messages[0]["content"]
    assert "The move: partial-vague." in text and "- place: the one that is not in the US" in text
    assert "<<<BEGIN USER REPLY" in text and "<<<BEGIN ASSISTANT QUESTION" in text
    ok = j.verdicts(t, judges.PersonaCheck(reason="r", realises_persona=True, leaks_unasked=False))
    assert [(m.measure, m.value) for m in ok] == [("realises_persona", 1.0), ("leaks_unasked", 0.0),
                                                  ("passed", 1.0)]
    leak = j.verdicts(t, judges.PersonaCheck(reason="r", realises_persona=True, leaks_unasked=True))
    assert leak[2].value == 0.0
    third = _view(item, [Q, "a", "Which?", "b", "x"])
    assert judges.checked_reply(third)[0] == 1
    # a replayed reply (static prefix) was written by the team, not simulated: not checked
    stored = _item(prefix=PREFIX)
    assert not j.wants(_view(stored, ["Which Georgia?", "The country.", "Tbilisi."]))


# --------------------------------------------------------------------------- ClarifyAgent

class AgentGateway:
    def __init__(self, fail_step=None):
        self.calls, self.fail_step = [], fail_step

    async def chat(self, spec, role, messages, *, schema=None, sample_key=None):
        self.calls.append(SimpleNamespace(role=role, messages=messages, schema=schema,
                                          sample_key=sample_key))
        if schema.__name__ == self.fail_step:
            return CallResult(call_hash="h-bad", error="down", error_kind="api_error")
        parsed = {"Perception": clarify_agent.Perception(reason="r", ambiguous=True,
                                                         dimension="linguistic", unclear="which"),
                  "Forecast": clarify_agent.Forecast(reason="r", persona="partial_vague"),
                  "SlotState": clarify_agent.SlotState(known=[], missing=["place"]),
                  "Plan": clarify_agent.Plan(decision="ask", response=" Which Georgia? ")}[schema.__name__]
        return CallResult(call_hash=f"h-{schema.__name__}", content="{}", parsed=parsed)


def _agent(gw, item, *turns):
    st = _state(item, *turns) if turns else EpisodeState(
        item=item, condition=load_spec("clarifymt").condition("live"), target="t",
        transcript=[{"role": "user", "content": item.prompts["query"]}], model_turns=0)
    seat = Seat("m+clarify_agent", "clarify_agent", clarify_agent.ClarifyAgent(),
                SimpleNamespace(temperature=0.0))
    return asyncio.run(clarify_agent.ClarifyAgent().respond(PolicyEnv(gw, None), seat, st))


def test_clarify_agent_perceives_tracks_plans_and_states_its_steps_aside():
    gw = AgentGateway()
    r = _agent(gw, _item())
    assert r.content == "Which Georgia?" and r.call_hash == "h-Plan"
    assert [c.schema.__name__ for c in gw.calls] == ["Perception", "SlotState", "Plan"]
    assert all(c.role == "targets" for c in gw.calls)
    aside = json.loads(r.aside)
    assert aside["perception"]["dimension"] == "linguistic" and aside["decision"] == "ask"
    assert "forecast" not in aside  # no reply yet to forecast from
    plan = gw.calls[-1].messages
    assert plan[0]["role"] == "system" and "<<<BEGIN AGENT NOTES" in plan[0]["content"]
    assert plan[1:] == [{"role": "user", "content": "What is the capital of Georgia?"}]
    gw = AgentGateway()
    r = _agent(gw, _item(), Q, "The country.", Q)
    assert [c.schema.__name__ for c in gw.calls] == ["Perception", "Forecast", "SlotState", "Plan"]
    assert json.loads(r.aside)["forecast"]["persona"] == "partial_vague"
    assert "<<<BEGIN USER TURN" in gw.calls[1].messages[0]["content"]
    failed = _agent(AgentGateway(fail_step="SlotState"), _item())
    assert not failed.ok and failed.error_kind == "api_error" and failed.call_hash == "h-bad"
    assert clarify_agent.ClarifyAgent().calls(None) == {"targets": 3}


# --------------------------------------------------------------------------- fences

def test_model_written_text_stays_inside_its_fence():
    """Every ClarifyMT prompt rendered with a hostile payload in every model-written field (the
    target's turns, the simulated user's replies, the agent's own notes)."""
    from tests.support.fences import MARK, PAYLOAD, outside_fences

    item = _item("partial_vague", prefix=None)
    turns = [PAYLOAD, PAYLOAD, PAYLOAD]
    view = _view(item, turns)
    gw, agw = FakeGateway(), AgentGateway()
    asyncio.run(persona_user.PersonaUser().next(_env(gw), _state(item, *turns)))
    _agent(agw, item, *turns)
    texts = {
        "persona_user.j2": _sim_prompt(gw),
        "question_quality.j2": judges.QUESTION.request(view).messages[0]["content"],
        "slots.j2": judges.SLOTS.request(view).messages[0]["content"],
        "persona_check.j2": judges.PERSONA_CHECK.request(view).messages[0]["content"],
        **{c.schema.__name__: c.messages[0]["content"] for c in agw.calls},
    }
    assert set(texts) >= {"Perception", "Forecast", "SlotState", "Plan"}
    for name, text in texts.items():
        if name != "Plan":  # the plan's system message holds the agent's notes, not turns
            assert MARK in text, name
        assert MARK not in outside_fences(text), f"{name}: model-written text outside a fence"
    notes = clarify_agent.plan_messages([{"role": "user", "content": "q"}], PAYLOAD)[0]["content"]
    assert MARK in notes and MARK not in outside_fences(notes)


# --------------------------------------------------------------------------- views

T0 = dt.datetime(2026, 1, 1)
KIND_SETS = {"act": "s-act", "reference": "s-ref", "clarifymt_question": "s-q",
             "clarifymt_slots": "s-slot", "clarifymt_persona_check": "s-pc"}


def _populated(tmp_path):
    """One target "t"; items A (linguistic, persona P1, gold ask/answer/answer; its stored
    prefix's gold ask/ask/answer), B (intent, P2, gold ask/ask/answer), U (unambiguous, P1,
    gold answer). Per episode, its assistant turns: (depth, act, contains/f1/em, quality,
    slot_recall):

    e1 live A: d1 ask (q 4); d2 answer (contains 1, F1 .5, EM 0; slots .5)
    e2 live B: d1 answer (0, 0, 0; slots 0)                      -> under-clarification
    e3 live U: d1 ask (no quality: not ambiguous); d2 hedge (1, 1, 1)  -> over at d1
    e4 live B: d1 ask (q 5), d2 ask (q 3), d3 ask (q unscored), d4 ask (not a question by
               the question judge); turn cap                     -> over at d3, d4
    e5 live A: d1 act unscored; d2 answer (reference unscored; slots unscored)
    e6 live A: target_error                                        -> invisible
    s1 static A depth 2: replayed ask (ignored), then answer (1, 1, 1; slots 1)  -> under
    s2 static U depth 1: answer (0, 0, 0)
    Persona check: e1 reply (P1) passes; e4 replies (P2): leaks, fails to realise, unscored.
    """
    wh = Warehouse(str(tmp_path / "wh.duckdb")).init()

    def item(iid, dim, persona, gold, static_gold=None):
        hidden = {"gold_acts": gold, **({"static_gold_acts": static_gold} if static_gold else {})}
        return {"benchmark": "clarifymt", "item_id": iid, "source_row": 0, "prompts": "{}",
                "hidden": json.dumps(hidden),
                "meta": json.dumps({"ambiguous": dim != "none", "dimension": dim,
                                    "persona": persona}), "run_id": None}

    wh.write("bench_items", [item("A", "linguistic", "P1", ["ask", "answer", "answer"],
                                  ["ask", "ask", "answer"]),
                             item("B", "intent", "P2", ["ask", "ask", "answer"]),
                             item("U", "none", "P1", ["answer"])])
    eps = [("e1", "live", "A", "completed", 2), ("e2", "live", "B", "completed", 1),
           ("e3", "live", "U", "completed", 2), ("e4", "live", "B", "completed", 4),
           ("e5", "live", "A", "completed", 2), ("e6", "live", "A", "target_error", 1),
           ("s1", "static_prefix", "A", "completed", 2), ("s2", "static_prefix", "U", "completed", 1)]
    wh.write("episodes", [{"episode_id": e, "benchmark": "clarifymt", "item_id": i, "condition": c,
                           "target": "t", "user_policy": "x", "status": s, "termination": "answered",
                           "n_turns": 2 * n, "run_id": "r"} for e, c, i, s, n in eps])
    turns = []
    for e, _, _, _, n in eps:
        for pos in range(2 * n):
            turns.append({"episode_id": e, "position": pos, "role": "user" if pos % 2 == 0
                          else "assistant", "model_turn": pos // 2 + 1, "content": "x"})
    wh.write("episode_turns", turns)
    wh.write("verdict_sets", [{"judgment_set_id": s, "benchmark": "clarifymt", "kind": k,
                               "judge": None, "prompt_version": "v", "created": T0, "run_id": "r"}
                              for k, s in KIND_SETS.items()])
    v = []

    def add(kind, ep, depth, measure, value, label=None):
        v.append({"judgment_set_id": KIND_SETS[kind], "episode_id": ep, "position": 2 * depth - 1,
                  "measure": measure, "kind": kind, "model_turn": depth, "value": value,
                  "label": label, "reason": None})

    def turn(ep, depth, act_label, ref=None, quality=None, slots=None):
        add("act", ep, depth, "act", None if act_label is None else act.ACT_CODES[act_label],
            act_label)
        for m, x in zip(("contains", "token_f1", "exact_match"), ref or (0.0, 0.0, 0.0)):
            add("reference", ep, depth, m, x)
        if quality is not None:
            add("clarifymt_question", ep, depth, "quality", *quality)
        if slots is not None:  # "unscored": the slot judge's call failed
            add("clarifymt_slots", ep, depth, "slot_recall", None if slots == "unscored" else slots)

    Q_ = "clarifying_question"
    turn("e1", 1, Q_, quality=(4.0,)); turn("e1", 2, "direct_answer", (1.0, 0.5, 0.0), slots=0.5)
    turn("e2", 1, "direct_answer", (0.0, 0.0, 0.0), slots=0.0)
    turn("e3", 1, Q_); turn("e3", 2, "hedge", (1.0, 1.0, 1.0))
    turn("e4", 1, Q_, quality=(5.0,)); turn("e4", 2, Q_, quality=(3.0,))
    turn("e4", 3, Q_, quality=(None,)); turn("e4", 4, Q_, quality=(None, "not_applicable"))
    turn("e5", 1, None); turn("e5", 2, "direct_answer", (None, None, None), slots="unscored")
    turn("e6", 1, "direct_answer", (1.0, 1.0, 1.0))
    turn("s1", 1, Q_); turn("s1", 2, "direct_answer", (1.0, 1.0, 1.0), slots=1.0)
    turn("s2", 1, "direct_answer", (0.0, 0.0, 0.0))
    for ep, depth, vals in (("e1", 2, (1.0, 0.0, 1.0)), ("e4", 2, (1.0, 1.0, 0.0)),
                            ("e4", 3, (0.0, 0.0, 0.0)), ("e4", 4, (None, None, None))):
        for m, x in zip(("realises_persona", "leaks_unasked", "passed"), vals):
            add("clarifymt_persona_check", ep, depth, m, x)
    wh.write("verdicts", v)
    return wh


def _rows(wh, view, **where):
    rows = wh.query(f"SELECT * FROM clarifymt_{view}")
    return [r for r in rows if all(r[k] == x for k, x in where.items())]


def _one(wh, view, **where):
    [r] = _rows(wh, view, **where)
    return r


def test_turns_view_reads_gold_and_predicted_acts(tmp_path):
    wh = _populated(tmp_path)
    rows = {(r["episode_id"], r["depth"]): r for r in _rows(wh, "turns")}
    assert len(rows) == 13  # 11 live turns (e6 failed), the last turn of each static episode
    assert ("s1", 1) not in rows and "e6" not in {e for e, _ in rows}
    assert (rows[("e4", 4)]["gold_act"], rows[("e4", 4)]["pred"]) == ("answer", "ask")  # last holds
    assert rows[("s1", 2)]["gold_act"] == "ask"  # the prefix's own gold acts
    assert rows[("e1", 2)]["gold_act"] == "answer" and rows[("e3", 2)]["pred"] == "answer"  # hedge
    assert rows[("e5", 1)]["pred"] is None and rows[("s2", 1)]["mode"] == "static"


def test_act_accuracy_by_depth_dimension_and_persona(tmp_path):
    wh = _populated(tmp_path)
    live = _one(wh, "act_accuracy", mode="live", depth=None, dimension="all", persona="all")
    # judged 10 (e5 d1 unscored), correct: e1 d1 d2, e3 d2, e4 d1 d2, e5 d2 = 6
    assert (live["n_turns"], live["n_act_unscored"], live["n_judged"], live["n_correct"]) == (11, 1, 10, 6)
    assert live["accuracy"] == pytest.approx(0.6)
    static = _one(wh, "act_accuracy", mode="static", depth=None, dimension="all", persona="all")
    assert (static["n_judged"], static["accuracy"]) == (2, 0.5)
    by_depth = {r["depth"]: (r["n_judged"], r["accuracy"]) for r in _rows(
        wh, "act_accuracy", mode="live", dimension="all", persona="all") if r["depth"]}
    assert by_depth == {1: (4, 0.5), 2: (4, 1.0), 3: (1, 0.0), 4: (1, 0.0)}
    by_persona = {r["persona"]: r["accuracy"] for r in _rows(
        wh, "act_accuracy", mode="live", depth=None, dimension="all") if r["persona"] != "all"}
    assert by_persona == {"P1": pytest.approx(0.8), "P2": pytest.approx(0.4)}
    cell_ = {(r["depth"], r["persona"]): (r["n_judged"], r["accuracy"]) for r in _rows(
        wh, "act_accuracy", mode="live", dimension="all") if r["depth"] in (1, 2)
        and r["persona"] != "all"}
    assert cell_ == {(1, "P1"): (2, 0.5), (1, "P2"): (2, 0.5), (2, "P1"): (3, 1.0), (2, "P2"): (1, 1.0)}
    by_dim = {r["dimension"]: r["accuracy"] for r in _rows(
        wh, "act_accuracy", mode="live", depth=None, persona="all") if r["dimension"] != "all"}
    assert by_dim == {"linguistic": 1.0, "intent": pytest.approx(0.4), "none": 0.5}
    three = _one(wh, "act_accuracy", mode="live", depth=2, dimension="intent", persona="P2")
    assert (three["n_judged"], three["accuracy"]) == (1, 1.0)


def test_a_refusal_is_a_judged_act_that_is_never_correct(tmp_path):
    # Target "r" (the fixture's target "t" untouched): r1 live U d1 refusal (gold answer);
    # r2 live U d1 direct answer (gold answer); r3 live B d1 ask, d2 refusal (gold ask, ask).
    # M3: refusal -> 'refusal', judged and never correct: 2 correct of 4 judged = 0.5 (an
    # unmapped refusal would be unscored: 2 / 2 = 1.0). M8: r1 and r3 never answer; they are
    # counted as no answer, not as unscored acts. M5: gold answer judged 2 (r1, r2), none
    # asked; gold ask judged 2 (r3 d1, d2), none answered.
    wh = _populated(tmp_path)
    eps = [("r1", "U", 1), ("r2", "U", 1), ("r3", "B", 2)]
    wh.write("episodes", [{"episode_id": e, "benchmark": "clarifymt", "item_id": i,
                           "condition": "live", "target": "r", "user_policy": "x",
                           "status": "completed", "termination": "answered", "n_turns": 2 * n,
                           "run_id": "r"} for e, i, n in eps])
    wh.write("episode_turns", [{"episode_id": e, "position": pos,
                                "role": "user" if pos % 2 == 0 else "assistant",
                                "model_turn": pos // 2 + 1, "content": "x"}
                               for e, _, n in eps for pos in range(2 * n)])
    acts = [("r1", 1, "refusal"), ("r2", 1, "direct_answer"), ("r3", 1, "clarifying_question"),
            ("r3", 2, "refusal")]
    wh.write("verdicts", [{"judgment_set_id": KIND_SETS["act"], "episode_id": e,
                           "position": 2 * d - 1, "measure": "act", "kind": "act",
                           "model_turn": d, "value": act.ACT_CODES[a], "label": a, "reason": None}
                          for e, d, a in acts])
    live = _one(wh, "act_accuracy", mode="live", target="r", depth=None, dimension="all",
                persona="all")
    assert (live["n_turns"], live["n_act_unscored"], live["n_judged"], live["n_correct"]) == (4, 0, 4, 2)
    assert live["accuracy"] == 0.5
    t = _one(wh, "turns_to_answer", target="r", persona="all")
    assert (t["n_episodes"], t["n_act_unscored"], t["n_answered"], t["n_no_answer"]) == (3, 0, 1, 2)
    c = _one(wh, "clarification", mode="live", target="r", depth=None, dimension="all", persona="all")
    assert (c["n_gold_answer"], c["over_clarification"], c["n_gold_ask"], c["under_clarification"]) == (
        2, 0.0, 2, 0.0)


def test_under_and_over_clarification(tmp_path):
    wh = _populated(tmp_path)
    live = _one(wh, "clarification", mode="live", depth=None, dimension="all", persona="all")
    # gold ask, judged: e1 d1, e2 d1, e4 d1, e4 d2 -> answered: e2 d1 -> 1/4
    assert (live["n_gold_ask"], live["n_under"], live["under_clarification"]) == (4, 1, 0.25)
    # gold answer: e1 d2, e3 d1, e3 d2, e4 d3, e4 d4, e5 d2 -> asked: e3 d1, e4 d3, e4 d4 -> 3/6
    assert (live["n_gold_answer"], live["n_over"], live["over_clarification"]) == (6, 3, 0.5)
    static = _one(wh, "clarification", mode="static", depth=None, dimension="all", persona="all")
    assert (static["under_clarification"], static["over_clarification"]) == (1.0, 0.0)
    p1 = _one(wh, "clarification", mode="live", depth=None, dimension="all", persona="P1")
    p2 = _one(wh, "clarification", mode="live", depth=None, dimension="all", persona="P2")
    assert (p1["under_clarification"], p1["over_clarification"]) == (0.0, 0.25)
    assert p2["under_clarification"] == pytest.approx(1 / 3) and p2["over_clarification"] == 1.0
    d3 = _one(wh, "clarification", mode="live", depth=3, dimension="all", persona="all")
    assert (d3["n_gold_ask"], d3["under_clarification"], d3["over_clarification"]) == (0, None, 1.0)


def test_answer_accuracy_by_depth_and_persona(tmp_path):
    wh = _populated(tmp_path)
    live = _one(wh, "answers", mode="live", depth=None, persona="all")
    # answer turns e1 d2 (1, .5, 0), e2 d1 (0, 0, 0), e3 d2 (1, 1, 1), e5 d2 (unscored)
    assert (live["n_answers"], live["n_scored"], live["n_unscored"]) == (4, 3, 1)
    assert live["contains"] == pytest.approx(2 / 3) and live["token_f1"] == pytest.approx(0.5)
    assert live["exact_match"] == pytest.approx(1 / 3)
    d2 = _one(wh, "answers", mode="live", depth=2, persona="all")
    assert (d2["n_answers"], d2["contains"], d2["token_f1"], d2["exact_match"]) == (3, 1.0, 0.75, 0.5)
    assert _one(wh, "answers", mode="live", depth=1, persona="all")["contains"] == 0.0
    assert _one(wh, "answers", mode="live", depth=None, persona="P1")["contains"] == 1.0
    assert _one(wh, "answers", mode="live", depth=2, persona="P1")["n_scored"] == 2
    assert _one(wh, "answers", mode="live", depth=None, persona="P2")["contains"] == 0.0
    assert _one(wh, "answers", mode="static", depth=None, persona="all")["contains"] == 0.5


def test_slots_elicited_before_answering(tmp_path):
    wh = _populated(tmp_path)
    live = _one(wh, "slots", mode="live", persona="all")
    # ambiguous answer turns: e1 .5, e2 0, e5 unscored
    assert (live["n_answers"], live["n_scored"], live["n_unscored"]) == (3, 2, 1)
    assert (live["slot_recall"], live["all_slots_rate"]) == (0.25, 0.0)
    assert _one(wh, "slots", mode="live", persona="P1")["slot_recall"] == 0.5
    assert _one(wh, "slots", mode="live", persona="P2")["slot_recall"] == 0.0
    static = _one(wh, "slots", mode="static", persona="all")
    assert (static["slot_recall"], static["all_slots_rate"]) == (1.0, 1.0)


def test_turns_to_answer(tmp_path):
    wh = _populated(tmp_path)
    t = _one(wh, "turns_to_answer", persona="all")
    # e1 at 2, e2 at 1, e3 at 2; e4 never answers; e5 has an unscored act
    assert (t["n_episodes"], t["n_act_unscored"], t["n_answered"], t["n_no_answer"]) == (5, 1, 3, 1)
    assert t["turns_to_answer"] == pytest.approx(5 / 3)
    assert t["turns_to_answer_ambiguous"] == 1.5  # e1, e2
    p1, p2 = _one(wh, "turns_to_answer", persona="P1"), _one(wh, "turns_to_answer", persona="P2")
    assert (p1["n_answered"], p1["turns_to_answer"], p1["n_act_unscored"]) == (2, 2.0, 1)
    assert (p2["n_answered"], p2["n_no_answer"], p2["turns_to_answer"]) == (1, 1, 1.0)


def test_question_quality(tmp_path):
    wh = _populated(tmp_path)
    q = _one(wh, "question_quality", mode="live", persona="all")
    # asking turns: e1 d1 (4), e3 d1 (not judged), e4 d1 (5), d2 (3), d3 (unscored), d4 (n/a)
    assert (q["n_questions"], q["n_rated"], q["n_not_question"], q["n_unscored"]) == (6, 3, 1, 1)
    assert q["quality"] == 4.0
    p2 = _one(wh, "question_quality", mode="live", persona="P2")
    assert (p2["n_questions"], p2["n_rated"], p2["quality"]) == (4, 2, 4.0)
    assert not _rows(wh, "question_quality", mode="static")  # the replayed question is not the target's


def test_persona_fidelity(tmp_path):
    wh = _populated(tmp_path)
    p1 = _one(wh, "persona_fidelity", target="t", persona="P1")
    assert (p1["n_replies"], p1["n_checked"], p1["pass_rate"], p1["leak_rate"]) == (1, 1, 1.0, 0.0)
    p2 = _one(wh, "persona_fidelity", target="t", persona="P2")
    assert (p2["n_replies"], p2["n_checked"]) == (3, 2)
    assert (p2["realises_rate"], p2["leak_rate"], p2["pass_rate"]) == (0.5, 0.5, 0.0)
    assert _one(wh, "persona_fidelity", target="all", persona="P2")["pass_rate"] == 0.0


def test_summary(tmp_path):
    wh = _populated(tmp_path)
    live, static = _one(wh, "summary", mode="live"), _one(wh, "summary", mode="static")
    assert live["act_accuracy"] == pytest.approx(0.6) and live["n_act_unscored"] == 1
    assert (live["under_clarification"], live["over_clarification"]) == (0.25, 0.5)
    assert live["answer_contains"] == pytest.approx(2 / 3) and live["slot_recall"] == 0.25
    assert (live["question_quality"], live["n_questions_rated"]) == (4.0, 3)
    assert live["turns_to_answer"] == pytest.approx(5 / 3)
    assert (static["act_accuracy"], static["answer_contains"], static["slot_recall"]) == (0.5, 0.5, 1.0)
    assert static["question_quality"] is None and static["turns_to_answer"] is None


# --------------------------------------------------------------------------- report section

def test_report_section_on_hand_written_rows_and_on_nothing(tmp_path):
    spec = load_spec("clarifymt")
    empty = Warehouse(str(tmp_path / "empty.duckdb")).init()
    assert ClarifyMTSection()(empty, spec).startswith("Not computed:")
    md = ClarifyMTSection()(_populated(tmp_path), spec)
    assert ("| live (the persona user replies) | t | 60.0% (n=10) | 25.0% (n=4) | 50.0% (n=6) | "
            "66.7% (n=3) | 25.0% (n=2) | 4.00 (n=3) | 1.67 | 1 |") in md
    assert "| static prefix (stored dialogue) | t | 50.0% (n=2) |" in md
    assert md.count("data:image/svg+xml;base64,") == 2  # the heat map of each mode
    assert "| P1 | 50.0% (n=2) | 100.0% (n=3) | too few (n=0; needs 1) | too few (n=0; needs 1) |" in md
    assert "| live | t | intent | 50.0% (n=2) | 100.0% (n=1) | 0.0% (n=1) | 0.0% (n=1) | 40.0% (n=5) |" in md
    assert "| live | t | P2 | 33.3% (n=3) | 100.0% (n=2) |" in md
    assert "| live | t | 2 | P1 | 100.0% (n=2) |" in md
    assert "| t | P2 | 2 | 1.00 (n=1) | 1 | 0 |" in md
    assert "| t | P2 | 50.0% (n=2) | 50.0% (n=2) | 0.0% (n=2) |" in md
    (tmp_path / "b").mkdir()
    strict = ClarifyMTSection(SimpleNamespace(min_n=3))(_populated(tmp_path / "b"), spec)
    assert "| live | t | P2 | 33.3% (n=3) | too few (n=2; needs 3) |" in strict
    assert cell(None, 0, 1) == "too few (n=0; needs 1)" and cell(0.5, 2, 1) == "50.0% (n=2)"


def test_an_empty_judge_table_says_why_not_whether_the_judge_is_configured(tmp_path):
    # Only e3 (live, unambiguous: ask, then hedge) and s2 (static, unambiguous: answer) left:
    # every judge ran, yet no answer turn is on an ambiguous item (slots), and no verdict of
    # the move checker is on these episodes' replies.
    wh = _populated(tmp_path)
    wh.user_query("DELETE FROM episodes WHERE episode_id NOT IN ('e3', 's2')", write=True)
    md = ClarifyMTSection()(wh, load_spec("clarifymt"))
    assert "configured?" not in md
    assert ("Not computed: no answer turn of an ambiguous item to read slots from (3 act turns: "
            "1 asked, 2 answered, 0 refused, 0 unscored).") in md
    assert "Not computed: the move checker's verdict set has no verdict on these turns." in md
    wh.user_query("DELETE FROM verdict_sets WHERE kind = 'clarifymt_persona_check'", write=True)
    md = ClarifyMTSection()(wh, load_spec("clarifymt"))
    assert ("Not computed: the move checker has no verdict set (not configured, or the verdicts "
            "stage has not run).") in md
    # e3's one reply gone: nothing to check, whatever the config says.
    wh.user_query("DELETE FROM episode_turns WHERE episode_id = 'e3' AND position = 2", write=True)
    md = ClarifyMTSection()(wh, load_spec("clarifymt"))
    assert "Not computed: the persona user replied to no question, so there was no reply to check." in md


# --------------------------------------------------------------------------- end to end

def _fenced(text: str, label: str) -> str:
    return text.split(f"<<<BEGIN {label}", 1)[1].split(">>>", 1)[1].split(f"<<<END {label}", 1)[0].strip()


def _e2e_config(tmp_path, api_base: str) -> Path:
    import yaml

    m = "openai/test-"
    cfg = yaml.safe_load(Path("configs/clarifymt.yaml").read_text())
    cfg.update(home=str(tmp_path / "home"), dataset={"source": "sample", "path": None, "limit": 2},
               gateway={"backoff_base_s": 0.01, "backoff_max_s": 0.1})
    cfg["models"] = {"defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 256,
                                  "max_concurrency": 8, "timeout_s": 5, "max_retries": 2},
                     "targets": [{"name": "target-a", "model": m + "target-a"}],
                     "user_simulator": {"model": m + "sim", "temperature": 1.0},
                     **{r: {"model": m + r} for r in ("act_judge", "question_judge", "slot_judge",
                                                       "move_checker")}}
    path = tmp_path / "clarifymt.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _e2e_scripts(llm_server):
    """The first two sample rows: the time-zone question (contextual, persona Precise) and
    Georgia (linguistic, Partial-Vague), each with a stored one-exchange prefix. The plain
    target asks on the time zones but answers Georgia at once ("Atlanta."); after a user
    reply it answers. The agent asks first on both, then answers."""
    def target(body):
        msgs = body["messages"]
        first = msgs[0]["content"]
        if first.startswith("ClarifyAgent step: perception"):
            return json.dumps({"reason": "r", "ambiguous": True, "dimension": "contextual",
                               "unclear": "which"})
        if first.startswith("ClarifyAgent step: persona forecast"):
            return json.dumps({"reason": "r", "persona": "precise"})
        if first.startswith("ClarifyAgent step: slot tracking"):
            return json.dumps({"known": [], "missing": ["which"]})
        chat = msgs[1:] if first.startswith("ClarifyAgent step: planning") else msgs
        q = chat[0]["content"]
        if len(chat) == 1:
            text = ("Which city are you in, and which one is 'there'?" if "9 am" in q
                    else "Which Georgia do you mean?" if first.startswith("ClarifyAgent")
                    else "Atlanta.")
        else:
            text = "It is 2 pm in London." if "9 am" in q else "The capital is Tbilisi."
        if first.startswith("ClarifyAgent"):
            return json.dumps({"decision": "ask" if text.endswith("?") else "answer",
                               "response": text})
        return text

    def act_judge(body):
        response = _fenced(body["messages"][-1]["content"], "RESPONSE")
        label = "clarifying_question" if response.endswith("?") else "direct_answer"
        return json.dumps({"reason": "r", "act": label,
                           "on_target": True if label == "clarifying_question" else None})

    def simulator(body):
        text = body["messages"][-1]["content"]
        assert "Tbilisi" not in text and "2 pm" not in text  # no reference reaches the user
        if "- my city: New York, and it is January" in text:  # Precise: the true values
            return "I'm in New York, it's January, and I mean London."
        assert "- place: the one that is not in the US" in text  # Partial-Vague: the partial form
        return "The one not in the US."

    def question_judge(body):
        response = _fenced(body["messages"][-1]["content"], "RESPONSE")
        asks = response.endswith("?")
        return json.dumps({"reason": "r", "is_question": asks, "score": 4 if asks else None})

    def slot_judge(body):
        text = body["messages"][-1]["content"]
        return json.dumps({"reason": "r", "elicited": ["my_city", "other_city"]
                           if "I mean London" in text else []})

    def move_checker(body):
        return json.dumps({"reason": "r", "realises_persona": True, "leaks_unasked": False})

    llm_server.scripts.update({"targets": target, "act_judge": act_judge,
                               "user_simulator": simulator, "question_judge": question_judge,
                               "slot_judge": slot_judge, "move_checker": move_checker})


@pytest.mark.slow  # the Prefect test server: plan, run and report through the CLI
def test_plan_run_and_report_end_to_end(prefect_harness, llm_server, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    def invoke(*args):
        return CliRunner().invoke(app, list(args), catch_exceptions=False)

    _e2e_scripts(llm_server)
    path = _e2e_config(tmp_path, llm_server.api_base)
    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 0, r.output
    # 2 items x 2 seats (target-a, target-a+clarify_agent): 2 live episodes and, each item
    # having a one-exchange prefix, static depths 1 and 2: 2 + 4 = 6 episodes per seat.
    assert "2 items, 2 conditions, 2 target(s): 12 episodes" in r.output
    assert {line.split()[0] for line in r.output.splitlines()} >= {
        "targets", "act_judge", "user_simulator", "question_judge", "slot_judge", "move_checker"}

    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    eps = {(e["target"], e["condition"], e["script"], e["item_id"]): e for e in wh.query(
        "SELECT * FROM episodes")}
    assert len(eps) == 12 and {e["status"] for e in eps.values()} == {"completed"}
    # The simulated user spoke 3 times (the time zones for both seats, Georgia for the agent)
    # in 2 requests: both seats ask the time-zone question word for word, so the second reply
    # is the first's, from the cache (the sample key derives from the transcript).
    assert llm_server.counts["user_simulator"] == 2
    assert len(wh.query("SELECT * FROM episode_turns WHERE role = 'user' AND position = 2 "
                        "AND call_hash IS NOT NULL")) == 3
    live = {(r["target"], r["item_id"]): r for r in wh.query(
        "SELECT target, item_id, n_turns, termination FROM episodes WHERE condition = 'live'")}
    assert sorted((k[0], v["n_turns"]) for k, v in live.items()) == [
        ("target-a", 2), ("target-a", 4), ("target-a+clarify_agent", 4), ("target-a+clarify_agent", 4)]
    static = wh.query("SELECT t.content, t.call_hash FROM episode_turns t JOIN episodes e "
                      "USING (episode_id) WHERE e.script = 'depth2' AND t.position = 1")
    assert len(static) == 4 and all(s["call_hash"] is None for s in static)  # the stored prefix

    summary = {(s["mode"], s["target"]): s for s in wh.query("SELECT * FROM clarifymt_summary")}
    plain, agent = summary[("live", "target-a")], summary[("live", "target-a+clarify_agent")]
    # plain: time zones ask (gold ask) then answer (gold answer), Georgia "Atlanta." (gold ask)
    assert (plain["n_judged"], plain["act_accuracy"]) == (3, pytest.approx(2 / 3))
    assert (plain["under_clarification"], plain["over_clarification"]) == (0.5, 0.0)
    assert plain["answer_contains"] == 0.5  # "It is 2 pm in London." right, "Atlanta." wrong
    # slots: time zones answered after "I mean London" (both slots), Georgia before any reply
    assert (plain["slot_recall"], plain["n_slots_scored"]) == (0.5, 2)
    assert (plain["question_quality"], plain["turns_to_answer"]) == (4.0, 1.5)
    assert (agent["act_accuracy"], agent["under_clarification"], agent["answer_contains"]) == (1.0, 0.0, 1.0)
    # the agent answered Georgia after a vague reply: its slot not elicited (0), time zones 1
    assert (agent["slot_recall"], agent["turns_to_answer"]) == (0.5, 2.0)
    s_plain = summary[("static", "target-a")]
    # static: time zones depth 1 ask (gold ask), depth 2 answer (gold answer) right; Georgia
    # depth 1 "Atlanta." wrong, depth 2 answer right
    assert (s_plain["n_judged"], s_plain["act_accuracy"]) == (4, 0.75)
    assert summary[("static", "target-a+clarify_agent")]["act_accuracy"] == 1.0
    fid = wh.query("SELECT * FROM clarifymt_persona_fidelity WHERE target = 'all' ORDER BY persona")
    assert [(f["persona"], f["n_checked"], f["pass_rate"]) for f in fid] == [
        ("Partial-Vague", 1, 1.0), ("Precise", 2, 1.0)]
    asides = wh.query("SELECT aside FROM episode_turns WHERE aside IS NOT NULL")
    assert asides and all("perception" in json.loads(a["aside"]) for a in asides)

    r = invoke("report", "--config", str(path))
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    text = md.read_text()
    assert "## ClarifyMT: when to ask and when to answer, with personas" in text
    assert "| live (the persona user replies) | target-a | 66.7% (n=3) | 50.0% (n=2) |" in text
    assert "data:image/svg+xml;base64," in text
    for role in ("question_judge", "slot_judge"):
        assert f"{role}: openai/test-{role}" in text

    before = llm_server.counts["total"]
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0 and llm_server.counts["total"] == before  # a rerun sends nothing
