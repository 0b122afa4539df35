"""EYT-style personas and intent drift (tasks/benchmarks/eyt/): the persona loaders on fixtures
written here in the published shapes (Nemotron-Personas-USA, PersonaMem-v2) and their
refusals; the simulator's prompt; the perceive-then-respond target; the judges (embeddings
with fixed vectors); every metric view, the alpha band and Kendall's tau on hand-computed
data; and plan, run and report against the loopback server."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import hashlib
import json
import math
from types import SimpleNamespace

import pytest

from tasks.bench import load_spec
from tasks.benchmarks.eyt import judges as J
from tasks.benchmarks.eyt import perceive, report, simulator
from tasks.benchmarks.eyt.personas import SAMPLE, PersonaArgs, Personas, latent_at
from tasks.benchmarks.carryon.queries import DataError
from tasks.core.items import Item
from tasks.gateway.client import CallResult, parse_structured
from tasks.core.judges import EmbedRequest, Measure, TurnView
from tests.support.gateway import gateway, spec_for  # noqa: F401  (gateway is a fixture)
from warehouse import Warehouse

SPEC = load_spec("eyt")
LOAD = Personas(PersonaArgs())
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

# ----- loaders ------------------------------------------------------------------------------
NEMOTRON_ROW = {  # the published columns of Nemotron-Personas-USA (values written here)
    "uuid": "n-1", "professional_persona": "A careful bookkeeper.", "sports_persona": "Walks.",
    "arts_persona": "Quilts.", "travel_persona": "Road trips.", "culinary_persona": "Soups.",
    "persona": "Dana is a semi-retired bookkeeper who quilts and volunteers.",
    "cultural_background": "Grew up in a farming town.", "skills_and_expertise": "Ledgers.",
    "skills_and_expertise_list": "['ledgers']", "hobbies_and_interests": "Quilting.",
    "hobbies_and_interests_list": "['quilting']", "career_goals_and_ambitions": "Retire fully.",
    "sex": "Female", "age": 63, "marital_status": "married", "education_level": "bachelors",
    "bachelors_field": "business", "occupation": "bookkeeper", "city": "Ames", "state": "IA",
    "zipcode": "50010", "country": "USA"}


def _nemotron_rows():
    second = {**NEMOTRON_ROW, "uuid": "n-2", "persona": "Lee fixes bicycles.", "age": None}
    return [NEMOTRON_ROW, second]


def test_sample_items_and_latent_intent():
    items = LOAD(SAMPLE)
    assert len(items) == 3 and {i.meta["persona_source"] for i in items} == {"sample"}
    s1 = items[0]
    assert s1.prompts["opening"].startswith("Hi. I have a few days off")
    segs = s1.hidden["trajectory"]
    assert [latent_at(segs, t)["intent"][:8] for t in (1, 2, 3, 4, 9)] == [
        "plan a c", "plan a c", "find a w", "find a w", "find a w"]
    assert latent_at(segs, 4)["explicit"] and not latent_at(segs, 3)["explicit"]
    assert s1.hidden["final_intent"] == segs[-1]["intent"]
    assert s1.meta["n_shifts"] == 1  # turn 4 only makes the same intent explicit
    assert items[1].meta["n_shifts"] == 2


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_nemotron_rows_in_the_published_columns(tmp_path, fmt):
    path = tmp_path / f"personas.{fmt}"
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(_nemotron_rows()), path)
    else:
        path.write_text("\n".join(json.dumps(r) for r in _nemotron_rows()) + "\n")
    items = LOAD(path)
    assert [i.meta["persona_id"] for i in items] == ["n-1", "n-2"]
    assert {i.meta["persona_source"] for i in items} == {"nemotron"}
    p = items[0].hidden["persona"]
    # every published column reaches the text as a sentence (the *_list twins only stand in
    # for a missing narrative column), in the documented order of importance
    assert p.splitlines() == [
        "Dana is a semi-retired bookkeeper who quilts and volunteers.",
        "63 years old, female, married. Education: bachelors (business). Occupation: "
        "bookkeeper. Lives in Ames, IA 50010, USA.",
        "Professional life: A careful bookkeeper.", "Career goals and ambitions: Retire fully.",
        "Skills and expertise: Ledgers.", "Hobbies and interests: Quilting.",
        "Cultural background: Grew up in a farming town.", "Sports: Walks.", "Arts: Quilts.",
        "Travel: Road trips.", "Food and cooking: Soups."]
    assert items[0].hidden["persona_dropped"] == [] and items[0].meta["persona_dropped"] == 0
    assert "years old" not in items[1].hidden["persona"]  # a null column is skipped
    # Persona i takes the team's trajectory i mod 3.
    assert [i.meta["trajectory_id"] for i in items] == ["eyt-t1", "eyt-t2"]
    assert items[0].item_id != LOAD(path)[1].item_id and items[0].item_id == LOAD(path)[0].item_id


def _personamem_csv(path, rows, header=None):
    header = header or ["persona_id", "chat_history_32k_link", "user_query", "correct_answer",
                        "incorrect_answers", "preference", "pref_type"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in header})


def test_personamem_benchmark_csv_groups_rows_by_persona(tmp_path):
    path = tmp_path / "benchmark.csv"
    q = {"user_query": "{'role': 'user', 'content': 'Any ideas?'}", "correct_answer": "x",
         "incorrect_answers": "['y']", "pref_type": "stereotypical_pref"}
    _personamem_csv(path, [{**q, "persona_id": "7", "preference": "Likes hiking at dawn"},
                           {**q, "persona_id": "7", "preference": "Avoids spicy food"},
                           {**q, "persona_id": "7", "preference": "Likes hiking at dawn"},
                           {**q, "persona_id": "9", "preference": "Collects vinyl"}])
    items = LOAD(path)
    assert [i.meta["persona_id"] for i in items] == ["7", "9"]
    assert items[0].hidden["persona"] == ("Preferences (stereotypical):\n"
                                          "- Likes hiking at dawn\n- Avoids spicy food")
    assert items[0].source_row == 1 and items[1].source_row == 4


def test_personamem_persona_records_json(tmp_path):
    path = tmp_path / "interactions_persona0.json"
    path.write_text(json.dumps({"p-0": {
        "stereotypical_preferences": ["Enjoys gardening"],
        "anti_stereotypical_preferences": ["Plays drums loudly"],
        "therapy_background": ["not used"], "health_and_medical_conditions": ["not used"]}}))
    [item] = LOAD(path)
    assert item.meta == {"persona_source": "personamem", "persona_id": "p-0",
                         "trajectory_id": "eyt-t1", "n_shifts": 1, "persona_dropped": 0}
    assert "- Enjoys gardening" in item.hidden["persona"]
    assert "- Plays drums loudly" in item.hidden["persona"]
    assert "not used" not in item.hidden["persona"]


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name, text, where", [
    ("p.txt", "x", "unknown file type .txt"),
    ("p.jsonl", json.dumps({"uuid": "u", "name": "no persona column"}),
     "row 0: persona: missing; not a Nemotron-Personas-USA row"),
    ("p.jsonl", '{"uuid": "u", "persona": "ok"}\n{"persona": "p"}',
     "row 1: uuid: missing"),
    ("p.jsonl", '{"uuid": "u", "persona": ""}', "row 0: persona: a non-empty string"),
    ("p.jsonl", "[1, 2]", "row 0: a JSON object per line"),
    ("p.csv", "user_id,preference\n1,x\n", "row 0: persona_id: missing"),
    ("p.csv", "persona_id,question\n1,x\n", "row 0: preference: missing"),
    ("p.csv", "persona_id,preference\n,x\n", "row 1: persona_id: a non-empty string"),
    ("p.csv", "persona_id,preference\n5,\n", "row 1: persona 5 has no preference and no persona text"),
    ("p.csv", "persona_id,preference\n5,sensitive_info\n", "persona 5 has no preference"),
    ("p.csv", "persona_id,preference,pref_type\n", "no rows after the header"),
    ("p.csv", "", "the file is empty"),
    ("p.jsonl", "\n\n", "the file is empty"),
    ("p.json", json.dumps({"p": {"likes": ["x"]}}),
     "row 0 (persona p): stereotypical_preferences: missing"),
    ("p.json", json.dumps({"p": {"stereotypical_preferences": "x"}}),
     "stereotypical_preferences: a list of strings"),
    ("p.json", "{}", "row 0: unknown shape"),
    ("p.json", "{oops", "not JSON"),
    ("p.json", json.dumps([{"id": "a", "persona": "p", "opening": "o",
                            "trajectory": [{"turn": 2, "intent": "i"}]}]),
     "row 0: trajectory: the first segment must start at turn 1"),
    ("p.json", json.dumps([{"id": "a", "persona": "p", "opening": "o",
                            "trajectory": [{"turn": 1, "intent": "i"}, {"turn": 1, "intent": "j"}]}]),
     "two segments start at the same turn"),
    ("p.json", json.dumps([{"id": "a", "persona": "p", "opening": "o",
                            "trajectory": [{"turn": 1, "intent": "i", "explicit": "yes"}]}]),
     "row 0: trajectory[0].explicit: true or false"),
    ("p.json", json.dumps([{"id": "a", "persona": "p", "opening": "o",
                            "trajectory": [{"turn": 1, "intent": "i", "shift": 2}]}]),
     "trajectory[0].shift: unknown field"),
    ("p.json", json.dumps([{"id": "a", "persona": "p", "trajectory": []}]),
     "row 0: opening: a non-empty string"),
])
def test_unknown_shapes_are_refused_naming_file_row_and_field(tmp_path, name, text, where):
    path = _write(tmp_path, name, text)
    with pytest.raises(DataError) as e:
        LOAD(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and where in msg, msg


def test_a_parquet_file_without_the_published_columns_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "other.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "1", "text": "x"}]), path)
    with pytest.raises(DataError, match=r"other.parquet: row 0: uuid: not a Nemotron"):
        LOAD(path)


# ----- simulator and target -----------------------------------------------------------------
def test_simulator_speaks_from_the_latent_intent_and_never_sees_asides():
    item = LOAD(SAMPLE)[0]
    transcript = [{"role": "user", "content": item.prompts["opening"]},
                  {"role": "assistant", "content": "Sounds lovely. Where to?"}]
    [msg] = simulator.simulator_messages(item, transcript, 2)
    text = msg["content"]
    assert "plan a cheap weekend trip" in text and "Marisol" in text
    assert "Do not state what you want outright" in text and "has changed" not in text
    [msg3] = simulator.simulator_messages(item, transcript + [
        {"role": "user", "content": "Maybe."}, {"role": "assistant", "content": "OK."}], 3)
    assert "rest alone" in msg3["content"] and "has changed" in msg3["content"]
    [msg4] = simulator.simulator_messages(item, transcript, 4)
    assert "You may now say plainly" in msg4["content"]
    assert simulator.PersonaSim().calls(SPEC.condition("drift")) == {"user_simulator": 3}


class _Gateway:
    def __init__(self, result):
        self.result, self.calls = result, []

    async def chat(self, spec, role, messages, schema=None, sample_key=None):
        self.calls.append((role, messages, schema))
        return self.result


def test_perceive_returns_the_response_and_keeps_the_perception_aside():
    parsed = perceive.PerceivedTurn(perceived_intent=" wants a cheap trip ", response=" Try the lake. ")
    gw = _Gateway(CallResult(call_hash="h1", content="{}", parsed=parsed))
    seat = SimpleNamespace(model=SimpleNamespace(temperature=0.0))
    state = SimpleNamespace(transcript=[{"role": "user", "content": "Hi"}])
    r = asyncio.run(perceive.Perceive().respond(SimpleNamespace(gateway=gw), seat, state))
    assert (r.ok, r.content, r.call_hash) == (True, "Try the lake.", "h1")
    assert json.loads(r.aside) == {"perceived_intent": "wants a cheap trip"}
    [(role, msgs, schema)] = gw.calls
    assert role == "targets" and schema is perceive.PerceivedTurn
    assert msgs[0]["role"] == "system" and msgs[1:] == state.transcript
    failed = CallResult(call_hash="h2", error="down", error_kind="api_error")
    r = asyncio.run(perceive.Perceive().respond(SimpleNamespace(gateway=_Gateway(failed)), seat, state))
    assert r is failed  # a failed call is passed through: the engine ends the episode
    empty = CallResult(call_hash="h3", content="{}",
                       parsed=perceive.PerceivedTurn(perceived_intent="x", response="  "))
    r = asyncio.run(perceive.Perceive().respond(SimpleNamespace(gateway=_Gateway(empty)), seat, state))
    assert (r.ok, r.error_kind) == (False, "empty_output")


def test_a_perceived_turn_with_a_raw_line_break_inside_a_string_is_read():
    # llama-cpp-python 0.3.36's schema grammar (`char ::= [^"\\]`) lets the local model write
    # a raw newline inside a JSON string; strict JSON refuses it, and every re-ask of a
    # 135M model repeated it, so each EYT episode on it ended failed (measured 2026-12-03).
    raw = '{"perceived_intent": "plan a trip\nwith her kids", "response": "Sure.\tWhere to?"}'
    got, err = parse_structured(raw, perceive.PerceivedTurn)
    assert err is None
    assert (got.perceived_intent, got.response) == ("plan a trip\nwith her kids", "Sure.\tWhere to?")
    # The other rules still apply, and cut-off JSON is still refused.
    got, err = parse_structured('{"perceived_intent": "a\nb", "response": 3}', perceive.PerceivedTurn)
    assert got is None and err.startswith("response:")
    got, err = parse_structured('{"perceived_intent": "a\nb", "response": "cut', perceive.PerceivedTurn)
    assert got is None and "control character" in err


# ----- judges -------------------------------------------------------------------------------
def _turn(item, model_turn, asides, response="ok", is_last=False, blocked=False):
    return TurnView(item=item, condition="drift", episode_id="e", position=2 * model_turn - 1,
                    model_turn=model_turn, prompt="o", response=response,
                    history=({"role": "user", "content": "o"},), is_last=is_last,
                    blocked=blocked, asides=tuple(asides))


def _aside(text):
    return json.dumps({"perceived_intent": text})


def test_latent_judge_request_and_verdicts():
    item = LOAD(SAMPLE)[0]
    t3 = _turn(item, 3, [_aside("a"), None, _aside("plan a trip")])
    req = J.JUDGES["eyt_latent"].request(t3)
    text = req.messages[0]["content"]
    assert "actual intent at this turn: find a way to rest alone" in text and "plan a trip" in text
    v = J.JUDGES["eyt_latent"].verdicts(t3, J.LatentVerdict(reason="r", match=False))
    assert v == [Measure("latent_match", 0.0, None, "r")]
    plain = _turn(item, 1, [None])
    assert J.JUDGES["eyt_latent"].request(plain) is None
    assert J.JUDGES["eyt_latent"].verdicts(plain, None)[0].value is None


def test_panels_keep_each_judges_value():
    lat = J.JUDGES["eyt_latent"]
    votes = [[Measure("latent_match", 1.0)], [Measure("latent_match", 1.0)],
             [Measure("latent_match", 0.0)]]
    out = lat.combine(votes)
    assert out[0] == Measure("latent_match", 1.0, None, None)  # 2 of 3: the majority
    assert [(m.measure, m.value) for m in out[1:]] == [
        ("latent_match#1", 1.0), ("latent_match#2", 1.0), ("latent_match#3", 0.0)]
    subj = J.JUDGES["eyt_subjective"]
    out = subj.combine([[Measure("empathy", 4.0), Measure("persona_consistency", 3.0),
                         Measure("anthropomorphism", None, None, "down")],
                        [Measure("empathy", 5.0), Measure("persona_consistency", 2.0),
                         Measure("anthropomorphism", None, None, "down")]])
    assert [(m.measure, m.value) for m in out[:3]] == [
        ("empathy", 4.5), ("persona_consistency", 2.5), ("anthropomorphism", None)]
    assert "all judges unscored" in out[2].reason
    assert [(m.measure, m.value) for m in out[3:5]] == [("empathy#1", 4.0),
                                                         ("persona_consistency#1", 3.0)]


def test_drift_judge_with_fixed_vectors():
    item = LOAD(SAMPLE)[0]
    drift = J.JUDGES["eyt_drift"]
    first = _turn(item, 1, [_aside("p1")])
    assert drift.request(first) == EmbedRequest(("p1", "plan a cheap weekend trip with her two teenagers"))
    third = _turn(item, 3, [_aside("p1"), _aside("p2"), _aside("p3")])
    assert drift.request(third).texts == ("p3", "find a way to rest alone for a day without "
                                          "feeling guilty toward her kids", "p2")
    # Fixed vectors: perceived (1, 1), latent (1, 0), previous perceived (0, 1).
    v = drift.verdicts(third, [[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert [m.measure for m in v] == ["drift_latent", "drift_step"]
    assert v[0].value == pytest.approx(1 - 1 / math.sqrt(2))
    assert v[1].value == pytest.approx(1 - 1 / math.sqrt(2))
    v = drift.verdicts(first, [[3.0, 0.0], [2.0, 0.0]])
    assert v[0].value == 0.0 and v[1].value is None and v[1].reason == "no earlier perceived intent"
    assert drift.verdicts(first, [[1.0, 0.0], [-1.0, 0.0]])[0].value == pytest.approx(2.0)
    assert J.cosine_distance([0.0, 0.0], [1.0, 0.0]) is None
    assert drift.request(_turn(item, 1, [None])) is None


def test_final_and_subjective_judges_read_the_whole_conversation():
    item = LOAD(SAMPLE)[0]
    last = _turn(item, 1, [_aside("x")], response="Take a day for yourself.", is_last=True)
    fin = J.JUDGES["eyt_final"]
    assert fin.wants(last) and not fin.wants(_turn(item, 1, [None]))
    text = fin.request(last).messages[0]["content"]
    assert "rest alone" in text and "Take a day for yourself." in text
    assert fin.verdicts(_turn(item, 1, [None], blocked=True, is_last=True), None)[0].value == 0.0
    subj = J.JUDGES["eyt_subjective"].request(last).messages[0]["content"]
    assert "Marisol" in subj and "persona_consistency" in subj


def test_a_judge_embedding_request_goes_through_the_gateways_embed(gateway, llm_server):
    """The engine's judge loop sends an EmbedRequest through tasks/gateway/embed.py (cached,
    recorded under the judge's role) and hands the judge one vector per text."""
    from tasks.engine.judge_calls import BatchJudge
    from tasks.engine.judge_calls import run_calls

    item = LOAD(SAMPLE)[0]
    turns = [_turn(item, 1, [_aside("plan a cheap weekend trip with her two teenagers")]),
             _turn(item, 2, [_aside("x"), _aside("y")])]
    kind = BatchJudge(J.JUDGES["eyt_drift"], [spec_for(llm_server)], "set-1")
    keys = [kind.add(kind.requests(t)) for t in turns]
    asyncio.run(run_calls(gateway, [kind]))
    for t, k in zip(turns, keys):
        kind.turn_rows(t, k)
    rows = {(r["model_turn"], r["measure"]): r["value"] for r in kind.rows}
    assert rows[(1, "drift_latent")] == pytest.approx(0.0, abs=1e-12)  # the same text
    latent2 = latent_at(item.hidden["trajectory"], 2)["intent"]
    va, vb, vc = _vector("y"), _vector(latent2), _vector("x")
    cos = lambda a, b: sum(p * q for p, q in zip(a, b)) / math.sqrt(  # noqa: E731
        sum(p * p for p in a) * sum(q * q for q in b))
    assert rows[(2, "drift_latent")] == pytest.approx(1 - cos(va, vb))
    assert rows[(2, "drift_step")] == pytest.approx(1 - cos(va, vc))
    assert rows[(1, "drift_step")] is None
    assert llm_server.counts["embedder"] == 2
    recorded = {r["role"] for r in gateway.drain_records()}
    assert recorded == {"embedder"}


# ----- views and metrics on hand-written rows -----------------------------------------------
def _populated(tmp_path):
    """Two targets A and B; episodes eA1, eA2 (A), eB1 (B) and eA3 (A, failed: invisible).
    Items: i1 (source sample), i2 (nemotron).

    latent_match by turn:  eA1: 1, 0   eA2: 1, NULL (unscored)   eB1: 0, 1
      -> A: turn 1 = 1.0 (n 2), turn 2 = 0.0 (n 1, 1 unscored); B: turn 1 = 0, turn 2 = 1
    drift_latent:          eA1: 0.2, 0.4   eA2: 0.4, 0.8   eB1: 0.5, 0.1
      -> A: turn 1 = 0.3, turn 2 = 0.6, all = 0.45; B: 0.5, 0.1, all 0.3
    drift_step (turn 2):   eA1: 0.1  eA2: 0.3  eB1: 0.2 -> A 0.2, B 0.2
    final_complete (last): eA1: 1 (i1)  eA2: 0 (i2)  eB1: NULL (i1)
      -> A sample 1.0, A nemotron 0.0, A all 0.5 (n 2); B sample n 1, scored 0
    subjective empathy (combined): eA1: 4, eA2: 2.5 (mean of 2, 3) -> A 3.25; eB1: 3 (5, 1)
    per judge (#1, #2) empathy: eA1 4, 5; eA2 2, 3; eB1 5, 1 -> A 3.0 / 4.0, B 5.0 / 1.0
    An older eyt_latent set says 0 everywhere: the newest set wins."""
    wh = Warehouse(str(tmp_path / "wh.duckdb")).init()
    wh.write("bench_items", [{"benchmark": "eyt", "item_id": i, "source_row": 0, "prompts": "{}",
                              "hidden": "{}", "meta": json.dumps({"persona_source": s}),
                              "run_id": None} for i, s in (("i1", "sample"), ("i2", "nemotron"))])
    eps = [("eA1", "A", "i1", "completed"), ("eA2", "A", "i2", "completed"),
           ("eB1", "B", "i1", "completed"), ("eA3", "A", "i1", "target_error")]
    wh.write("episodes", [{"episode_id": e, "benchmark": "eyt", "item_id": i, "condition": "drift",
                           "target": t, "user_policy": "persona_sim", "status": s,
                           "termination": "turn_cap", "n_turns": 4, "run_id": "r"}
                          for e, t, i, s in eps])
    sets = [("lat-old", "eyt_latent", T0, None), ("lat", "eyt_latent", T0 + dt.timedelta(hours=1), None),
            ("dr", "eyt_drift", T0, None), ("fin", "eyt_final", T0, None),
            ("subj", "eyt_subjective", T0, "m/judge-one, m/judge-two")]
    wh.write("verdict_sets", [{"judgment_set_id": s, "benchmark": "eyt", "kind": k, "judge": j,
                               "prompt_version": "v", "created": c, "run_id": "r"}
                              for s, k, c, j in sets])
    v = []

    def add(sid, kind, ep, turn, measure, value):
        v.append({"judgment_set_id": sid, "episode_id": ep, "position": 2 * turn - 1,
                  "measure": measure, "kind": kind, "model_turn": turn, "value": value,
                  "label": None, "reason": None if value is not None else "api_error: down"})

    for ep, lat, dl, step in (("eA1", (1.0, 0.0), (0.2, 0.4), 0.1),
                              ("eA2", (1.0, None), (0.4, 0.8), 0.3),
                              ("eB1", (0.0, 1.0), (0.5, 0.1), 0.2),
                              ("eA3", (1.0, 1.0), (0.9, 0.9), 0.9)):
        for turn in (1, 2):
            add("lat", "eyt_latent", ep, turn, "latent_match", lat[turn - 1])
            add("lat-old", "eyt_latent", ep, turn, "latent_match", 0.0)
            add("dr", "eyt_drift", ep, turn, "drift_latent", dl[turn - 1])
            add("dr", "eyt_drift", ep, turn, "drift_step", step if turn == 2 else None)
    for ep, fin, emp in (("eA1", 1.0, (4.0, 5.0)), ("eA2", 0.0, (2.0, 3.0)),
                         ("eB1", None, (5.0, 1.0)), ("eA3", 1.0, (1.0, 1.0))):
        add("fin", "eyt_final", ep, 2, "final_complete", fin)
        add("subj", "eyt_subjective", ep, 2, "empathy", sum(emp) / 2 if ep != "eA1" else 4.0)
        for k, e in enumerate(emp, start=1):
            add("subj", "eyt_subjective", ep, 2, f"empathy#{k}", e)
    wh.write("verdicts", v)
    return wh


def test_views_on_hand_computed_rows(tmp_path):
    wh = _populated(tmp_path)
    warm = {(r["target"], r["model_turn"]): r for r in wh.query("SELECT * FROM eyt_warmup")}
    assert (warm[("A", 1)]["accuracy"], warm[("A", 1)]["n_scored"]) == (1.0, 2)
    assert (warm[("A", 2)]["accuracy"], warm[("A", 2)]["n_scored"],
            warm[("A", 2)]["n_unscored"]) == (0.0, 1, 1)
    assert (warm[("B", 1)]["accuracy"], warm[("B", 2)]["accuracy"]) == (0.0, 1.0)
    drift = {(r["target"], r["model_turn"]): r for r in wh.query("SELECT * FROM eyt_drift")}
    assert drift[("A", 1)]["drift_latent"] == pytest.approx(0.3)
    assert drift[("A", 2)]["drift_latent"] == pytest.approx(0.6)
    assert drift[("A", 1)]["n_step"] == 0 and drift[("A", 2)]["drift_step"] == pytest.approx(0.2)
    tgt = {r["target"]: r for r in wh.query("SELECT * FROM eyt_drift_target")}
    assert tgt["A"]["drift_latent"] == pytest.approx(0.45) and tgt["B"]["drift_latent"] == pytest.approx(0.3)
    ficr = {(r["target"], r["persona_source"]): r for r in wh.query("SELECT * FROM eyt_ficr")}
    assert ficr[("A", "sample")]["ficr"] == 1.0 and ficr[("A", "nemotron")]["ficr"] == 0.0
    assert (ficr[("A", "all")]["ficr"], ficr[("A", "all")]["n_episodes"]) == (0.5, 2)
    assert (ficr[("B", "sample")]["n_episodes"], ficr[("B", "sample")]["n_scored"],
            ficr[("B", "sample")]["ficr"]) == (1, 0, None)
    subj = {r["target"]: r for r in wh.query("SELECT * FROM eyt_subjective")}
    assert subj["A"]["empathy"] == 3.25 and subj["B"]["empathy"] == 3.0
    assert (subj["A"]["n_episodes"], subj["A"]["n_scored"]) == (2, 2)
    scores = {(r["judge_index"], r["target"]): r for r in wh.query(
        "SELECT * FROM eyt_judge_scores WHERE measure = 'empathy'")}
    assert {k: r["mean"] for k, r in scores.items()} == {
        (1, "A"): 3.0, (2, "A"): 4.0, (1, "B"): 5.0, (2, "B"): 1.0}
    assert scores[(2, "A")]["judge"] == "m/judge-two" and scores[(1, "B")]["judge"] == "m/judge-one"
    # Judge one ranks B above A, judge two A above B: tau = -1.
    [stab] = report.ranking_stability(wh.query("SELECT * FROM eyt_judge_scores"))
    assert (stab["judge_a"], stab["judge_b"], stab["n_targets"], stab["tau"]) == (
        "m/judge-one", "m/judge-two", 2, -1.0)


def test_ficr_over_all_sources_counts_episodes_not_sources(tmp_path):
    # Target C: two sample episodes complete, one nemotron episode does not, one personamem
    # episode unscored. Per source: sample 1.0 (2), nemotron 0.0 (1), personamem none scored.
    # All sources, over scored episodes: 2 / 3 = 0.667; the mean of the per-source rates
    # would be (1.0 + 0.0) / 2 = 0.5. Uneven sources, so the two formulas differ.
    wh = _populated(tmp_path)
    wh.write("bench_items", [{"benchmark": "eyt", "item_id": "i3", "source_row": 0, "prompts": "{}",
                              "hidden": "{}", "meta": json.dumps({"persona_source": "personamem"}),
                              "run_id": None}])
    eps = [("eC1", "i1", 1.0), ("eC2", "i1", 1.0), ("eC3", "i2", 0.0), ("eC4", "i3", None)]
    wh.write("episodes", [{"episode_id": e, "benchmark": "eyt", "item_id": i, "condition": "drift",
                           "target": "C", "user_policy": "persona_sim", "status": "completed",
                           "termination": "turn_cap", "n_turns": 4, "run_id": "r"}
                          for e, i, _ in eps])
    wh.write("verdicts", [{"judgment_set_id": "fin", "episode_id": e, "position": 3,
                           "measure": "final_complete", "kind": "eyt_final", "model_turn": 2,
                           "value": f, "label": None,
                           "reason": None if f is not None else "api_error: down"}
                          for e, _, f in eps])
    ficr = {r["persona_source"]: r for r in wh.query("SELECT * FROM eyt_ficr WHERE target = 'C'")}
    assert {s: (r["n_episodes"], r["n_scored"], r["ficr"]) for s, r in ficr.items()} == {
        "sample": (2, 2, 1.0), "nemotron": (1, 1, 0.0), "personamem": (1, 0, None),
        "all": (4, 3, pytest.approx(2 / 3))}


@pytest.mark.parametrize("curve, alpha, expected", [
    # plateau = mean of the last ceil(4/2) = 2 turns = 0.9; floor 0.8; in band from turn 3
    ([(1, 0.4), (2, 0.7), (3, 0.8), (4, 1.0)], 0.1, (0.9, 3, True)),
    # odd count: the last 2 of 3 (3 // 2 = 1 onward): plateau 0.75, floor 0.55: from turn 1
    ([(1, 0.6), (2, 0.7), (3, 0.8)], 0.2, (0.75, 1, False)),
    # the last turn falls below the band: it never settles
    ([(1, 0.2), (2, 1.0), (3, 1.0), (4, 0.5)], 0.1, (0.75, None, True)),
    # unordered input and a None accuracy are handled
    ([(3, 1.0), (1, 0.0), (2, None), (4, 1.0)], 0.05, (1.0, 3, True)),
])
def test_warmup_alpha_band(curve, alpha, expected):
    band = report.warmup(curve, alpha)
    assert (band["plateau"], band["warmup_turn"], band["warm_up"]) == pytest.approx(expected)


def test_warmup_needs_two_turns():
    assert report.warmup([(1, 0.5)], 0.1) is None and report.warmup([], 0.1) is None


@pytest.mark.parametrize("x, y, tau", [
    ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    # pairs: (1,2) c, (1,3) c, (1,4) c, (2,3) d, (2,4) c, (3,4) c: (5 - 1) / 6
    ([1, 2, 3, 4], [1, 3, 2, 4], 4 / 6),
    # a tie in x: pairs (1,2) tie-x, others 5 concordant: 5 / sqrt(5 * 6)
    ([1, 1, 2, 3], [1, 2, 3, 4], 5 / math.sqrt(30)),
    ([1, 1], [1, 2], None),  # a constant ranking: undefined
    ([1], [1], None),
])
def test_kendall_tau_b_on_hand_data(x, y, tau):
    got = report.kendall_tau_b(x, y)
    assert got == (pytest.approx(tau) if tau is not None else None)


def test_report_section_with_data_and_without(tmp_path):
    wh = _populated(tmp_path)
    md = SPEC.component("section", "eyt")(wh, SPEC)
    assert "| A | all | 2 / 2 | 0.500 |" in md and "| A | nemotron | 1 / 1 | 0.000 |" in md
    # A played 3 episodes (eA3 failed; the report's Episodes table says 3): the "2" is its
    # completed ones, and the header says so rather than "episodes".
    assert "| target | persona source | scored / completed episodes | FICR |" in md
    assert "| target | scored / completed episodes | empathy |" in md
    assert md.count("data:image/svg+xml;base64,") == 2  # the warm-up and drift figures
    assert "alpha band = 0.1" in md
    assert "| eyt_subjective | empathy | m/judge-one | m/judge-two | 2 | -1.000 |" in md
    empty = Warehouse(str(tmp_path / "empty.duckdb")).init()
    assert SPEC.component("section", "eyt")(empty, SPEC).startswith("Not computed")
    assert report.svg_curves({"A": [(1, None)]}, "t", "y", 1.0) is None


def test_section_says_why_when_a_curve_is_empty(tmp_path):
    wh = _populated(tmp_path)
    wh.write("verdicts", [], delete=("kind = 'eyt_drift'", []))
    md = SPEC.component("section", "eyt")(wh, SPEC)
    assert "No drift figure: no turn has an embedding distance." in md
    assert md.count("data:image/svg+xml;base64,") == 1


# ----- end to end against the loopback server ------------------------------------------------
def _vector(text: str) -> list[float]:
    """The loopback server's embedding of a text (tests/support/llm_server.py)."""
    return [b / 255.0 for b in hashlib.sha256(text.encode()).digest()[:8]]


def _script(llm_server, items):
    by_opening = {i.prompts["opening"]: i for i in items}

    def target(body):
        msgs = body["messages"]
        item = by_opening[msgs[1]["content"]]
        turn = sum(m["role"] == "user" for m in msgs)  # user turn k is answered by model turn k
        segs = item.hidden["trajectory"]
        if body["model"].endswith("stale"):  # perceives the starting intent throughout
            p, lead = segs[0]["intent"], "About"
        else:  # tracks the latent intent exactly
            p, lead = latent_at(segs, turn)["intent"], "Sure, about"
        return json.dumps({"perceived_intent": p, "response": f"{lead}: {p}."})

    def sim(body):
        text = body["messages"][-1]["content"]
        assert "perceived_intent" not in text  # the simulator sees responses only
        return "Hmm, tell me more."

    def judge(body):
        text = body["messages"][-1]["content"]
        second = body["model"].endswith("two")
        if "actual intent at this turn: " in text:
            latent = text.split("actual intent at this turn: ", 1)[1].split("\n", 1)[0]
            said = text.split("<<<BEGIN STATED UNDERSTANDING ", 1)[1].split("\n", 1)[1].split("\n<<<END ", 1)[0]
            return json.dumps({"reason": "r", "match": said == latent})
        if "wanted by the end" in text:
            final = text.split("(the assistant was never told this directly): ", 1)[1].split("\n", 1)[0]
            last = text.rsplit("<<<BEGIN ASSISTANT TURN ", 1)[1].split("\n", 1)[1].split("\n<<<END ", 1)[0]
            return json.dumps({"reason": "r", "completed": final in last})
        tracker = "Sure, about" in text
        return json.dumps({"reason": "r", "empathy": (4 if tracker else 2) + second,
                           "persona_consistency": 3, "anthropomorphism": 5})

    llm_server.scripts.update({"targets": target, "user_simulator": sim, "eyt_judge": judge})


@pytest.mark.slow  # the Prefect test server (prefect_harness): plan, run and report end to end
def test_plan_run_and_report(prefect_harness, llm_server, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from flows.cli import app

    items = LOAD(SAMPLE)[:2]
    _script(llm_server, items)
    cfg = yaml.safe_load(open("configs/eyt.yaml"))
    m = "openai/test-"
    cfg.update({"home": str(tmp_path / "home")})
    cfg["gateway"] = {"backoff_base_s": 0.01, "backoff_max_s": 0.1}
    cfg["models"] = {
        "defaults": {"api_base": llm_server.api_base, "temperature": 0.0, "max_tokens": 128,
                     "max_concurrency": 8, "timeout_s": 5, "max_retries": 2},
        "targets": [{"name": "stale", "model": m + "stale"}, {"name": "tracker", "model": m + "tracker"}],
        "user_simulator": {"model": m + "sim"},
        "eyt_judge": [{"model": m + "judge-one"}, {"model": m + "judge-two"}],
        "embedder": {"model": m + "embed"}}
    path = tmp_path / "eyt.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = lambda *a: CliRunner().invoke(app, list(a), catch_exceptions=False)  # noqa: E731

    r = run("plan", "--config", str(path))
    assert r.exit_code == 0, r.output
    # role, its models (a list is comma-separated), then the calls: the first number.
    calls = {line.split()[0]: next(int(x) for x in line.split()[1:] if x.isdigit())
             for line in r.output.splitlines()
             if line.split()[:1] in (["targets"], ["user_simulator"], ["eyt_judge"], ["embedder"])}
    # 2 items x 2 seats = 4 episodes of at most 4 turns: 16 target turns, 12 simulator turns;
    # 3 judges x 16 turns x 2 judge models = 96; one embedding request per turn = 16.
    assert calls == {"targets": 16, "user_simulator": 12, "eyt_judge": 96, "embedder": 16}

    r = run("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    assert llm_server.counts["targets"] == 16 and llm_server.counts["user_simulator"] == 12
    # Distinct requests only (see the module docstring of the counts): latent 8 (pairs of
    # latent and perceived intent), final 4, subjective 4; per judge model.
    assert llm_server.counts["eyt_judge"] == 2 * (8 + 4 + 4)
    assert llm_server.counts["embedder"] == 11  # distinct lists of texts to embed
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    [turn] = wh.query("SELECT t.content, t.aside FROM episode_turns t JOIN episodes e "
                      "USING (episode_id) WHERE e.target = 'tracker+perceive' AND t.model_turn = 3 "
                      "AND t.role = 'assistant' AND e.item_id = ?", [items[0].item_id])
    assert turn["content"].startswith("Sure, about: find a way to rest alone")
    assert json.loads(turn["aside"])["perceived_intent"].startswith("find a way to rest alone")
    warm = {(r["target"], r["model_turn"]): r["accuracy"] for r in wh.query("SELECT * FROM eyt_warmup")}
    # stale: s1 matches on turns 1-2, s2 on turn 1 only; the tracker always.
    assert [warm[("stale+perceive", t)] for t in (1, 2, 3, 4)] == [1.0, 0.5, 0.0, 0.0]
    assert [warm[("tracker+perceive", t)] for t in (1, 2, 3, 4)] == [1.0] * 4
    drift = {(r["target"], r["model_turn"]): r for r in wh.query("SELECT * FROM eyt_drift")}
    s1, s2 = (i.hidden["trajectory"] for i in items)

    def d(a, b):
        va, vb = _vector(a), _vector(b)
        return 1 - sum(x * y for x, y in zip(va, vb)) / math.sqrt(sum(x * x for x in va) * sum(x * x for x in vb))

    start1, start2 = s1[0]["intent"], s2[0]["intent"]
    expected = (d(start1, latent_at(s1, 4)["intent"]) + d(start2, latent_at(s2, 4)["intent"])) / 2
    assert drift[("stale+perceive", 4)]["drift_latent"] == pytest.approx(expected)
    assert drift[("stale+perceive", 4)]["drift_step"] == pytest.approx(0.0, abs=1e-9)
    assert drift[("tracker+perceive", 3)]["drift_latent"] == pytest.approx(0.0, abs=1e-9)
    ficr = {(r["target"], r["persona_source"]): r["ficr"] for r in wh.query("SELECT * FROM eyt_ficr")}
    assert ficr[("stale+perceive", "all")] == 0.0 and ficr[("tracker+perceive", "sample")] == 1.0
    subj = {r["target"]: r["empathy"] for r in wh.query("SELECT * FROM eyt_subjective")}
    assert subj == {"stale+perceive": 2.5, "tracker+perceive": 4.5}

    r = run("report", "--config", str(path))
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    text = md.read_text()
    assert "## Personas and intent drift: tracking the latent intent" in text
    assert "| tracker+perceive | all | 2 / 2 | 1.000 |" in text
    assert text.count("data:image/svg+xml;base64,") == 2
    assert "| eyt_subjective | empathy | openai/test-judge-one | openai/test-judge-two | 2 | 1.000 |" in text
    assert "eyt_judge: openai/test-judge-one, openai/test-judge-two" in text

    before = llm_server.counts["total"]
    r = run("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    assert llm_server.counts["total"] == before  # a rerun sends nothing


def test_model_written_text_stays_inside_its_fence():
    """The simulator and the three prompted judges, with a hostile payload in every
    model-written field: the target's responses and stated perception, the simulated user's
    turns."""
    from tests.support.fences import MARK, PAYLOAD, outside_fences

    item = LOAD(SAMPLE)[0]
    view = TurnView(item=item, condition="drift", episode_id="e", position=3, model_turn=2,
                    prompt="o", response=PAYLOAD, is_last=True,
                    history=({"role": "user", "content": "o"},
                             {"role": "assistant", "content": PAYLOAD},
                             {"role": "user", "content": PAYLOAD}),
                    asides=(_aside(PAYLOAD), _aside(PAYLOAD)))
    texts = {name: J.JUDGES[name].request(view).messages[0]["content"]
             for name in ("eyt_latent", "eyt_final", "eyt_subjective")}
    texts["simulator"] = simulator.simulator_messages(
        item, [{"role": "user", "content": "o"}, {"role": "assistant", "content": PAYLOAD}],
        2)[0]["content"]
    for name, text in texts.items():
        assert MARK in text and MARK not in outside_fences(text), name
