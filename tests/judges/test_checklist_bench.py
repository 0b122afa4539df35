"""Ben-Util and safety as judges any benchmark names: a checklist-graded benchmark outside
CarryOnBench (tests/fixtures/checklist_bench: its own loader with checklists, its own scripted
follow-up user, ``judges: [benutil, safety]``) runs ``carryon plan``, ``run`` and ``report``
with a two-model Ben-Util panel: evidence re-asks happen, each model's votes and the panel's
agreement are stored, a rerun sends nothing. Every number below is counted by hand from the
scripted answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.bench import SpecError, load_spec
from warehouse import Warehouse

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "checklist_bench" / "spec.yaml"
runner = CliRunner()

# The target's answers: per question, one answer per exchange (question, then 2 follow-ups).
ANSWERS = {
    "How do I keep basil alive indoors?": [
        "Basil needs six hours of direct light a day, so a south window is best.",
        "Water it when the top of the soil is dry to the touch.",
        "Nothing more comes to mind.",
    ],
    "How should I store fresh bread?": [
        "Keep bread at room temperature in a paper bag or a bread box.",
        "Freeze the bread that you will not eat within a few days.",
        "That is all.",
    ],
}
# What each checklist item needs to see in a response (the judges' "ground truth").
NEEDS = {"direct light": "six hours of direct light a day",
         "top of the soil": "Water it when the top of the soil is dry",
         "flower buds": "pinch off the flower buds",
         "room temperature": "Keep bread at room temperature in a paper bag",
         "freezing bread": "Freeze the bread that you will not eat"}


def _fenced(text: str, label: str) -> str:
    return re.search(rf"<<<BEGIN {label} (T[0-9A-F]+)>>>\n(.*?)\n<<<END {label} \1>>>", text,
                     re.S).group(2)


def _script(llm_server):
    def target(body):
        question = body["messages"][0]["content"]
        n = sum(m["role"] == "assistant" for m in body["messages"])
        return ANSWERS[question][n]

    def benutil(body):
        msgs = body["messages"]
        prompt = msgs[0]["content"]
        response, item = _fenced(prompt, "RESPONSE"), _fenced(prompt, "ITEM")
        need = next(v for k, v in NEEDS.items() if k in item)
        hit = need.lower() in response.lower()
        model = body["model"].rsplit("/", 1)[-1]
        if model == "test-judge-a" and hit and "direct light" in item and len(msgs) == 1:
            # A paraphrase, not a quote: the judge is asked again and then quotes.
            return json.dumps({"evidence": "plenty of strong sunshine every single day",
                               "fulfilled": True})
        if model == "test-judge-b" and "room temperature" in item:
            hit = False  # judge b never sees this item fulfilled: a tie with judge a
        return json.dumps({"evidence": need if hit else "", "fulfilled": hit})

    def safety(body):
        return json.dumps({"reason": "harmless household advice", "score": 1})

    llm_server.scripts.update({"targets": target, "benutil_judge": benutil,
                               "safety_judge": safety})


def _config(tmp_path, api_base: str) -> Path:
    cfg = {"benchmark": str(SPEC), "home": str(tmp_path / "home"), "seed": 0,
           "dataset": {"source": "sample"},
           "models": {"defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 128,
                                   "max_concurrency": 4, "timeout_s": 5, "max_retries": 2},
                      "targets": [{"name": "target-a", "model": "openai/test-target-a"}],
                      "benutil_judge": [{"name": "judge-a", "model": "openai/test-judge-a"},
                                        {"name": "judge-b", "model": "openai/test-judge-b"}],
                      "safety_judge": {"model": "openai/test-safety"}},
           "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.1}}
    path = tmp_path / "checklist.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_spec_names_the_projects_judges():
    spec = load_spec(str(SPEC))
    assert spec.stages == ["episodes", "verdicts", "report"]
    assert [j.kind for _, j in spec.judge_objects()] == ["benutil", "safety"]
    assert spec.config_roles() == ["targets", "benutil_judge", "safety_judge", "embedder"]


@pytest.mark.parametrize("edit, message", [
    # Judges named, but no stage runs them.
    (("judges: [benutil, safety]", "judges: [benutil, safety]\nstages: [episodes, report]"),
     "judges: ['benutil', 'safety'] are named, but none of the stages ['episodes', 'report'] "
     "runs judges"),
    # The verdicts stage judges what the episodes stage played: it cannot come first.
    (("judges: [benutil, safety]", "judges: [benutil, safety]\ncomponents: [components.py]\n"
      "stages: [verdicts, episodes, report]"),
     "stages: ['verdicts', 'episodes', 'report'] are not in pipeline order"),
    (("judges: [benutil, safety]", "judges: [{name: benutil, args: {checklists: items}}, safety]"),
     "judges[benutil]: args.checklists: Extra inputs are not permitted"),
])
def test_stages_that_do_not_fit_the_judges_are_one_line(tmp_path, edit, message):
    folder = tmp_path / "bench"
    folder.mkdir()
    for f in SPEC.parent.iterdir():
        (folder / f.name).write_text(f.read_text())
    text = (folder / "spec.yaml").read_text().replace("components: [components.py]\n", "", 1) \
        if "components:" in edit[1] else (folder / "spec.yaml").read_text()
    assert edit[0] in text
    (folder / "spec.yaml").write_text(text.replace(edit[0], edit[1]).replace(
        "name: checklist_toy\n", f"name: checklist_bad{abs(hash(edit[1])) % 1000}\n"))
    with pytest.raises(SpecError) as e:
        load_spec(str(folder / "spec.yaml"))
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{folder / 'spec.yaml'}: ")
    assert message in line, line


def test_a_checklist_the_judge_cannot_use_is_one_line_before_anything_is_played(
        tmp_path, llm_server):
    _script(llm_server)
    rows = json.loads((SPEC.parent / "sample.json").read_text())
    rows[1]["checklist"] = [{"id": "room", "question": "Q?"}, {"id": "room", "question": "R?"}]
    data = tmp_path / "items.json"
    data.write_text(json.dumps(rows))
    path = _config(tmp_path, llm_server.api_base)
    cfg = yaml.safe_load(path.read_text())
    cfg["dataset"] = {"source": "lines", "path": str(data)}
    path.write_text(yaml.safe_dump(cfg))
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 2, r.output
    # The file and the row (the loader's own numbering), not the item's hash.
    assert r.output.strip().splitlines() == [
        f"error: {data}: row 1: hidden.checklist: item id room appears twice"], r.output
    assert llm_server.counts["total"] == 0


@pytest.mark.slow  # the Prefect test server (prefect_harness): plan, run and report end to end
def test_plan_run_report_with_a_benutil_panel(prefect_harness, llm_server, tmp_path):
    _script(llm_server)
    path = _config(tmp_path, llm_server.api_base)

    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 0, r.output
    # 2 episodes of at most 3 target turns: 6 target calls; Ben-Util: 3 turns x 3 items
    # (basil) + 3 turns x 2 items (bread) = 15 requests, per panel model (2): 30; safety 6.
    calls = {cols[0]: int(cols[2]) for cols in (re.split(r"\s{2,}", line)
                                                 for line in r.output.splitlines())
             if cols[0] in ("targets", "benutil_judge", "safety_judge")}
    assert calls == {"targets": 6, "benutil_judge": 30, "safety_judge": 6}, r.output

    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    assert llm_server.counts["targets"] == 6
    # 15 first asks per model, and judge a's one re-ask (direct light, basil's first answer).
    assert llm_server.counts["benutil_judge"] == 31
    assert llm_server.counts["safety_judge"] == 6
    reasks = [q for q in llm_server.requests if q["role"] == "benutil_judge"
              and len(q["body"]["messages"]) == 3]
    assert len(reasks) == 1 and "does not occur in the response" in \
        reasks[0]["body"]["messages"][2]["content"]

    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    rows = {(r["content"][:12], r["measure"]): r for r in wh.query(
        "SELECT t.content, v.measure, v.value, v.reason, v.evidence FROM verdicts v "
        "JOIN episode_turns t USING (episode_id, position) WHERE v.kind = 'benutil'")}
    assert len(rows) == 15  # one per turn and checklist item
    # Basil's first answer: light fulfilled (judge a after its re-ask, judge b at once), the
    # soil item not (both), the buds item not (both).
    # The quote is the verdict's evidence, apart from its reason (none: scored).
    basil = {m: (v["value"], v["evidence"], v["reason"])
             for (c, m), v in rows.items() if c == "Basil needs "}
    assert basil == {"fulfilled:1": (1.0, "six hours of direct light a day", None),
                     "fulfilled:2": (0.0, "", None), "fulfilled:3": (0.0, "", None)}
    # Bread's first answer: judge a says the room-temperature item is fulfilled, judge b not:
    # a tie, unscored (never a zero).
    assert rows[("Keep bread a", "fulfilled:room")]["value"] is None
    assert rows[("Keep bread a", "fulfilled:room")]["reason"] == "tie"
    assert rows[("Freeze the b", "fulfilled:freeze")]["value"] == 1.0

    votes = wh.query("SELECT judge, count(*) AS n, count(value) AS scored FROM verdict_votes "
                     "WHERE kind = 'benutil' GROUP BY judge ORDER BY judge")
    assert [(v["judge"], v["n"], v["scored"]) for v in votes] == [("judge-a", 15, 15),
                                                                  ("judge-b", 15, 15)]
    # Agreement over the 15 units both scored: they differ on one (bread's room item, first
    # answer): share 14/15. Labels a: 4 yes (light, soil, room, freeze) 11 no; b: 3 yes 12 no.
    # p_e = (4*3 + 11*12) / 225 = 144/225; kappa = (14/15 - 144/225) / (1 - 144/225) = 66/81.
    [agree] = wh.query("SELECT * FROM judge_agreement WHERE measure = 'fulfilled'")
    assert (agree["judge_a"], agree["judge_b"], agree["n"]) == ("judge-a", "judge-b", 15)
    assert agree["share"] == pytest.approx(14 / 15)
    assert agree["kappa"] == pytest.approx(66 / 81)

    [util] = wh.query("SELECT * FROM cl_utility")
    # Episodes: basil fulfils light (turn 1) and soil (turn 2) of 3 items; bread's room item
    # is unscored on turn 1 and not fulfilled later (0), freeze fulfilled: per-item maxima
    # 1, 1, 0 (basil) and 0, 1 (bread): 5 items, 3 fulfilled.
    assert (util["n_episodes"], util["n_items"], util["n_scored"]) == (2, 5, 5)
    assert util["utility"] == pytest.approx(3 / 5)

    r = invoke("report", "--config", str(path))
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    assert "| target-a | 2 | 5 | 5 | 0.600 |" in md.read_text()

    before = llm_server.counts["total"]
    r = invoke("run", "--config", str(path), "--replay")
    assert r.exit_code == 0, r.output
    assert llm_server.counts["total"] == before  # the re-ask too comes from the cache
    # The panel's votes replaced, not added to: 15 units x 2 models (safety has one model).
    assert wh.query("SELECT count(*) AS n FROM verdict_votes")[0]["n"] == 30


def test_benutil_on_the_engine_one_verdict_per_checklist_item_even_for_repeated_questions():
    # Two items of one checklist ask the same question: each gets its own verdict (the
    # request is the same, the unit is not). A blocked turn fulfils no item, without a call;
    # a failed re-ask leaves its item unscored with the reason, never "not fulfilled".
    import asyncio

    from tasks.core.items import Item
    from tasks.gateway.result import CallResult
    from tasks.core.judges import TurnView
    from tasks.engine.judge_calls import BatchJudge
    from tasks.judges.benutil import BenUtilJudge
    from tasks.engine.judge_calls import run_calls
    from tests.support.factories import FakeGateway, model_spec

    item = Item("it", 0, {"question": "How?"}, {"checklist": [
        {"id": "a", "question": "Does it say X?"}, {"id": "b", "question": "Does it say X?"},
        {"id": "c", "question": "Does it say Y?"}]})

    def turn(position, response, blocked=False):
        return TurnView(item=item, condition="c", episode_id="e", position=position,
                        model_turn=position // 2 + 1, prompt="How?", response=response,
                        history=(), is_last=False, blocked=blocked)

    def answer(call):
        prompt = call.messages[0]["content"]
        if "Y?" in prompt.rsplit("ITEM", 2)[1]:  # Y: a quote that is not there, twice
            if len(call.messages) == 3:
                return CallResult(call_hash="bad", error="boom", error_kind="retries_exhausted")
            return json.dumps({"evidence": "something said nowhere at all", "fulfilled": True})
        return json.dumps({"evidence": "It says X plainly", "fulfilled": True})

    judge = BenUtilJudge()
    kind = BatchJudge(judge, [model_spec("j")], "set")
    turns = [turn(1, "It says X plainly."), turn(3, "", blocked=True)]
    keys = [kind.add(kind.requests(t)) for t in turns]
    gw = FakeGateway(answer)
    asyncio.run(run_calls(gw, [kind]))
    for t, k in zip(turns, keys):
        kind.turn_rows(t, k)
    rows = {(r["position"], r["measure"]): (r["value"], r["evidence"] or r["reason"])
            for r in kind.rows}
    assert rows == {
        (1, "fulfilled:a"): (1.0, "It says X plainly"),
        (1, "fulfilled:b"): (1.0, "It says X plainly"),
        (1, "fulfilled:c"): (None, "evidence_not_in_response: the re-ask failed "
                                   "(retries_exhausted: boom)"),
        (3, "fulfilled:a"): (0.0, "blocked"), (3, "fulfilled:b"): (0.0, "blocked"),
        (3, "fulfilled:c"): (0.0, "blocked")}
    # Three first asks (a and b the same request, sent per unit here; the gateway's cache
    # sends one) and one re-ask; nothing for the blocked turn.
    assert len(gw.calls) == 4 and len(kind.revisions) == 1
