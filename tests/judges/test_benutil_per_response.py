"""Ben-Util's per-response mode (tasks/judges/benutil_response.py): one call judges a response's
whole checklist, verdicts stored per item as the per-item mode stores them, evidence checked by
the same rule, and a re-ask that names only the items whose quote failed. Every expected value
below is written out by hand from the scripted answers."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import yaml

from tasks.config import load_config
from tasks.core.items import Item
from tasks.core.judges import TurnView
from tasks.engine.judge_calls import BatchJudge, run_calls
from tasks.engine.verdicts import spec_judges
from tasks.gateway.result import CallResult
from tasks.judges import benutil_response
from tasks.judges.benutil import BenUtilArgs, BenUtilJudge
from tests.judges.test_checklist_bench import NEEDS, _config, _fenced, _script, invoke
from tests.support.factories import FakeGateway, model_spec
from warehouse import Warehouse

ITEM = Item("it", 0, {"question": "How?"}, {"checklist": [
    {"id": "a", "question": "Does it say X?"}, {"id": "b", "question": "Does it say Y?"},
    {"id": "c", "question": "Does it say Z?"}]})
RESPONSE = "It says X plainly. Nothing about the other thing."


def _turn(position, response=RESPONSE, blocked=False):
    return TurnView(item=ITEM, condition="c", episode_id="e", position=position,
                    model_turn=position // 2 + 1, prompt="How?", response=response,
                    history=(), is_last=False, blocked=blocked)


def _ids(call) -> list[str]:
    """The item ids a call asks about, as its schema lists them."""
    items = call.schema.model_json_schema()["properties"]["items"]
    return items["items"]["properties"]["id"]["enum"]


def _answer(entries: dict) -> str:
    return json.dumps({"items": [{"id": i, "evidence": e, "fulfilled": f}
                                 for i, (e, f) in entries.items()]})


def _judge(kind_models, answer, turns):
    judge = BenUtilJudge(BenUtilArgs(mode="per_response"))
    kind = BatchJudge(judge, [model_spec(m) for m in kind_models], "set")
    keys = [kind.add(kind.requests(t)) for t in turns]
    gw = FakeGateway(answer)
    asyncio.run(run_calls(gw, [kind]))
    for t, k in zip(turns, keys):
        kind.turn_rows(t, k)
    return kind, gw


def test_one_call_per_response_and_a_reask_of_only_the_failing_items():
    def answer(call):
        if len(call.messages) == 1:  # a: quoted; b: a paraphrase (fails); c: not fulfilled
            return _answer({"a": ("It says X plainly", True), "b": ("it mentions Y", True),
                            "c": ("", False)})
        return _answer({"b": ("", False)})  # the re-ask: b only

    kind, gw = _judge(["j"], answer, [_turn(1), _turn(3, blocked=True)])
    # One call for the response (none for the blocked turn), one re-ask.
    assert len(gw.calls) == 2 and len(kind.revisions) == 1
    first, again = gw.calls
    assert _ids(first) == ["a", "b", "c"]
    assert _ids(again) == ["b"]  # only the item whose quote failed is asked again
    note = again.messages[2]["content"]
    assert "b (the quote does not occur in the response)" in note and "a (" not in note
    # The re-ask goes on from the first exchange: its prompt, its answer, then the note.
    assert again.messages[:2] == first.messages + [
        {"role": "assistant", "content": answer(first)}]
    rows = {(r["position"], r["measure"]): (r["value"], r["evidence"], r["reason"], r["call_hash"])
            for r in kind.rows}
    assert rows == {
        # a and c stand from the first answer, under its call hash; b from the re-ask.
        (1, "fulfilled:a"): (1.0, "It says X plainly", None, "h1"),
        (1, "fulfilled:b"): (0.0, "", None, "h2"),
        (1, "fulfilled:c"): (0.0, "", None, "h1"),
        (3, "fulfilled:a"): (0.0, None, "blocked", None),
        (3, "fulfilled:b"): (0.0, None, "blocked", None),
        (3, "fulfilled:c"): (0.0, None, "blocked", None)}


def test_a_quote_that_fails_twice_or_a_failed_reask_is_unscored_and_the_rest_stands():
    def answer(call):
        if len(call.messages) == 1:
            return _answer({"a": ("It says X plainly", True), "b": ("about the", True),
                            "c": ("words said nowhere at all", True)})
        if _ids(call) == ["b", "c"]:
            return _answer({"b": ("still not there at all", True), "c": ("", False)})
        raise AssertionError(_ids(call))

    kind, gw = _judge(["j"], answer, [_turn(1)])
    first, again = gw.calls
    note = again.messages[2]["content"]
    # b's quote occurs but points at nothing; c's is not in the response.
    assert "b (the quote is only stop words)" in note
    assert "c (the quote does not occur in the response)" in note
    rows = {r["measure"]: (r["value"], r["reason"]) for r in kind.rows}
    assert rows == {
        "fulfilled:a": (1.0, None),
        "fulfilled:b": (None, "evidence_not_in_response: quote not found after a re-ask: "
                              "'still not there at all'"),
        "fulfilled:c": (0.0, None)}

    def failing_reask(call):
        if len(call.messages) == 1:
            return _answer({"a": ("It says X plainly", True), "b": ("not in it anywhere", True),
                            "c": ("", False)})
        return CallResult(call_hash="bad", error="boom", error_kind="retries_exhausted")

    kind, _ = _judge(["j"], failing_reask, [_turn(1)])
    rows = {r["measure"]: (r["value"], r["reason"]) for r in kind.rows}
    assert rows == {"fulfilled:a": (1.0, None),
                    "fulfilled:b": (None, "evidence_not_in_response: the re-ask failed "
                                          "(retries_exhausted: boom)"),
                    "fulfilled:c": (0.0, None)}


def test_a_failed_call_leaves_every_item_unscored_never_zero():
    kind, _ = _judge(["j"], lambda call: CallResult(call_hash="x", error="down",
                                                    error_kind="api_error"), [_turn(1)])
    assert {r["measure"]: (r["value"], r["reason"]) for r in kind.rows} == {
        f"fulfilled:{u}": (None, "api_error: down") for u in "abc"}


def test_a_panel_votes_per_item():
    # Judge p says a and b, judge q says a only: a is fulfilled (2 of 2), b a tie (unscored),
    # c not fulfilled; each model's own verdicts are kept as votes.
    def answer(call):
        yes_b = call.spec.name == "p"
        return _answer({"a": ("It says X plainly", True),
                        "b": ("Nothing about the other thing" if yes_b else "", yes_b),
                        "c": ("", False)})

    kind, gw = _judge(["p", "q"], answer, [_turn(1)])
    assert len(gw.calls) == 2  # one per model
    assert {r["measure"]: (r["value"], r["reason"]) for r in kind.rows} == {
        "fulfilled:a": (1.0, None), "fulfilled:b": (None, "tie"), "fulfilled:c": (0.0, None)}
    assert sorted((r["judge"], r["measure"], r["value"]) for r in kind.vote_rows) == [
        ("p", "fulfilled:a", 1.0), ("p", "fulfilled:b", 1.0), ("p", "fulfilled:c", 0.0),
        ("q", "fulfilled:a", 1.0), ("q", "fulfilled:b", 0.0), ("q", "fulfilled:c", 0.0)]


def test_an_answer_that_leaves_out_or_repeats_an_id_is_invalid():
    schema = benutil_response.schema_for([("1", "A?"), ("2", "B?")], RESPONSE, False)
    ok = {"items": [{"id": "2", "evidence": "", "fulfilled": False},
                    {"id": "1", "evidence": "", "fulfilled": False}]}
    assert [v.id for v in schema.model_validate(ok).items] == ["2", "1"]
    for bad in ([{"id": "1", "evidence": "", "fulfilled": False}],
                [{"id": "1", "evidence": "", "fulfilled": False}] * 2,
                ok["items"] + [{"id": "3", "evidence": "", "fulfilled": False}]):
        with pytest.raises(ValueError, match="one entry per checklist id"):
            schema.model_validate({"items": bad})
    sent = schema.model_json_schema()["properties"]["items"]
    assert (sent["minItems"], sent["maxItems"], sent["items"]["properties"]["id"]["enum"]) == \
        (2, 2, ["1", "2"])


def test_the_mode_is_another_set_and_the_default_is_unchanged(write_config):
    # The default (the paper's per-item mode): the same prompt version and arguments as ever.
    default = BenUtilJudge()
    assert default.judgment_identity() == ("674d78e959c3", {"history": False})
    assert default.changed_args() == {} and default.requests_per_turn(ITEM) == 3
    per_response = BenUtilJudge(BenUtilArgs(mode="per_response"))
    version, extra = per_response.judgment_identity()
    assert version != "674d78e959c3" and extra == {"history": False, "mode": "per_response"}
    assert per_response.changed_args() == {"mode": "per_response"}  # verdict_sets.args
    assert per_response.requests_per_turn(ITEM) == 1
    # The config's judging.benutil_mode sets it; left at its default it is not in the hash.
    cfg = load_config(write_config())
    plain_hash = cfg.config_hash()
    [(judge, _), _] = spec_judges(cfg)[0]
    assert judge.args.mode == "per_item"
    cfg = load_config(write_config(judging={"benutil_mode": "per_response"}))
    [(judge, _), _] = spec_judges(cfg)[0]
    assert judge.args.mode == "per_response" and cfg.config_hash() != plain_hash
    assert load_config(write_config(judging={"benutil_mode": "per_item"})).config_hash() == plain_hash


# ----- end to end, on the loopback server (the checklist benchmark of test_checklist_bench) -----
def _per_response_script(llm_server):
    """The per-item script's judges (test_checklist_bench._script) answering per response:
    judge a paraphrases the light item's quote in its first answer, judge b never sees the
    room item fulfilled. The ids asked are the schema's (a re-ask asks fewer)."""
    def benutil(body):
        prompt = body["messages"][0]["content"]
        response = _fenced(prompt, "RESPONSE")
        lines = _fenced(prompt, "CHECKLIST").splitlines()
        questions = dict(line.split(": ", 1) for line in lines)
        schema = body["response_format"]["json_schema"]["schema"]
        ids = schema["properties"]["items"]["items"]["properties"]["id"]["enum"]
        model = body["model"].rsplit("/", 1)[-1]
        out = {}
        for i in ids:
            need = next(v for k, v in NEEDS.items() if k in questions[i])
            hit = need.lower() in response.lower()
            if model == "test-judge-a" and hit and "direct light" in questions[i] \
                    and len(body["messages"]) == 1:
                out[i] = ("plenty of strong sunshine every single day", True)
                continue
            if model == "test-judge-b" and "room temperature" in questions[i]:
                hit = False
            out[i] = (need if hit else "", hit)
        return _answer(out)

    _script(llm_server)
    llm_server.scripts["benutil_judge"] = benutil


def _views(wh) -> dict:
    names = [r["table_name"] for r in wh.query(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'VIEW' "
        "ORDER BY table_name")]
    out = {}
    for name in names:
        df = wh.df(f"SELECT * FROM {name}")
        drop = [c for c in df.columns if c in ("judgment_set_id", "call_hash", "created",
                                               "run_id", "prompt_version", "args")]
        df = df.drop(columns=drop)
        out[name] = (list(df.columns), sorted(map(repr, df.to_dict("records"))))
    return out


@pytest.mark.slow  # the Prefect test server (prefect_harness): two runs and reports
def test_per_response_run_stores_the_same_verdicts_views_and_report_as_per_item(
        prefect_harness, llm_server, tmp_path):
    runs = {}
    for mode in ("per_item", "per_response"):
        folder = tmp_path / mode
        folder.mkdir()
        (_per_response_script if mode == "per_response" else _script)(llm_server)
        path = _config(folder, llm_server.api_base)
        cfg = yaml.safe_load(path.read_text())
        cfg["judging"] = {"benutil_mode": mode}
        path.write_text(yaml.safe_dump(cfg))
        before = llm_server.counts.get("benutil_judge", 0)
        r = invoke("run", "--config", str(path))
        assert r.exit_code == 0, r.output
        calls = llm_server.counts["benutil_judge"] - before
        r = invoke("report", "--config", str(path))
        assert r.exit_code == 0, r.output
        [md] = (folder / "home" / "reports").glob("*/report.md")
        runs[mode] = (Warehouse(folder / "home" / "warehouse.duckdb"), calls, md.read_text())

    (wh_item, item_calls, md_item), (wh_resp, resp_calls, md_resp) = runs.values()
    # Per item: 15 (turn, item) requests per model (2) and one re-ask = 31. Per response:
    # 6 turns per model = 12, and one re-ask (judge a, basil's first answer, the light item).
    assert (item_calls, resp_calls) == (31, 13)
    reasks = [q["body"] for q in llm_server.requests if q["role"] == "benutil_judge"
              and len(q["body"]["messages"]) == 3
              and "CHECKLIST" in q["body"]["messages"][0]["content"]]
    assert len(reasks) == 1
    assert reasks[0]["response_format"]["json_schema"]["schema"]["properties"]["items"][
        "items"]["properties"]["id"]["enum"] == ["1"]

    def verdicts(wh):
        return sorted((r["content"][:12], r["measure"], r["value"], r["evidence"], r["reason"])
                      for r in wh.query(
            "SELECT t.content, v.measure, v.value, v.reason, v.evidence FROM verdicts v "
            "JOIN episode_turns t USING (episode_id, position) WHERE v.kind = 'benutil'"))

    # One verdict per turn and item, with its evidence, the same in both modes.
    assert len(verdicts(wh_resp)) == 15 and verdicts(wh_resp) == verdicts(wh_item)
    assert _views(wh_resp) == _views(wh_item)
    # The per-response set records its mode; the per-item set's arguments are as ever (none).
    [args] = [r["args"] for r in wh_resp.query(
        "SELECT args FROM verdict_sets WHERE kind = 'benutil'")]
    assert json.loads(args) == {"mode": "per_response"}
    assert wh_item.query("SELECT args FROM verdict_sets WHERE kind = 'benutil'")[0]["args"] is None
    # The same report, heading for heading and table row for table row (dates and ids aside).
    def shape(md):
        return [re.sub(r"[0-9a-f]{16}|\d{4}-\d\d-\d\d[ T][\d:.]+", "<x>", line)
                for line in md.splitlines() if line.startswith(("#", "|"))]
    assert shape(md_resp) == shape(md_item)
