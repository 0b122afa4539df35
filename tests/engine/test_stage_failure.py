"""A stage that had work and did none of it because its model calls failed is a failed stage:
the run is recorded as failed with one line naming the stage and the cause, the flow raises
StageFailed, no later stage runs and no report is written. A stage with nothing to do, or
where only some items failed, is not failed. A succeeded run's report says "succeeded"."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from flows.carryon import carryon
from tasks.engine.stage_errors import StageFailed, all_failed, causes, is_call_error
from tests.support.factories import base_config
from tests.support.llm_server import default_answer
from warehouse import Warehouse

pytestmark = pytest.mark.e2e

ONE_QUERY = {"source": "sample", "path": None, "limit": 1}


def run_flow(path, stages="all"):
    return asyncio.run(carryon(config=str(path), stages=stages))


def bad_request(_body):
    return web.json_response({"error": {"message": "model not found", "type": "invalid_request_error"}},
                             status=404)


def the_run(home: Path) -> dict:
    runs = Warehouse(home / "warehouse.duckdb").query("SELECT * FROM runs ORDER BY started")
    assert len(runs) == 1
    return runs[0]


def assert_nothing_half_written(home: Path, run: dict) -> None:
    assert run["status"] == "failed" and run["finished"] is not None
    assert "\n" not in run["error"]
    reports = home / "reports"
    assert not reports.exists() or not any(reports.iterdir())  # no report, no temporary folder


# ----- the rules, without the flow ------------------------------------------------------------
def test_rules_for_a_failed_stage():
    err = "retries_exhausted: APIConnectionError: Connection error."
    assert is_call_error(f"intent: {err}") and not is_call_error("guard: 0 harmless answer(s) < 3")
    assert not is_call_error(None) and not is_call_error("tie")
    # Work and no output, every reason an error: failed, naming the cause and its count.
    assert all_failed(3, 0, [f"intent: {err}"] * 3, "all 3 queries dropped") == \
        f"all 3 queries dropped: intent: {err} (3 times)"
    assert all_failed(0, 0, [], "nothing") is None  # nothing to do is not a failure
    assert all_failed(3, 1, [err, err], "x") is None  # some succeeded: the failures are data
    assert all_failed(2, 0, [err, "misuse: the misuse filter dropped all 4 items"], "x") is None
    assert causes([err, err, "api_error: NotFoundError: nope"]) == f"{err} (2 times); and 1 other cause(s)"
    e = StageFailed("judge", "all 4 safety judgments unscored: x (4 times)")
    assert str(e) == "judge: all 4 safety judgments unscored: x (4 times)"
    import pickle

    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_checklist_rules_on_item_summaries():
    from tasks.stages.checklists.failures import checklists_failure as failure_line

    def s(step, reason, version=None):
        return {"item_id": "q", "step": step, "reason": reason, "version": version}

    err = "no answer from ens-1: api_error: NotFoundError: model not found"
    assert failure_line(None, [s("ensemble", err), s("ensemble", err)]) == \
        "all 2 items dropped: ensemble: no answer from ens-1: api_error: NotFoundError: model " \
        "not found (2 times)"
    assert failure_line(None, [s("ensemble", err), s(None, None, "v1")]) is None
    assert failure_line(None, [s("misuse", "the misuse filter dropped all 3 items")]) is None
    assert failure_line(None, []) is None


# ----- through the flow against the loopback server ------------------------------------------------
def test_every_call_failing_fails_the_checklists_stage(prefect_harness, llm_server, write_config, tmp_path):
    llm_server.faults.error500 = 1.0
    path = write_config(dataset={"source": "sample", "path": None, "limit": 2})
    with pytest.raises(StageFailed) as info:
        run_flow(path)
    msg = str(info.value)
    # CarryOnBench's first stage, the intents, failed: no later stage ran.
    assert msg.startswith("intents: all 2 queries got no benign intent: retries_exhausted: ")
    assert msg.endswith("(2 times)") and "\n" not in msg
    home = tmp_path / "home"
    run = the_run(home)
    assert run["error"] == msg
    assert_nothing_half_written(home, run)
    wh = Warehouse(home / "warehouse.duckdb")
    assert wh.count("checklists") == 0 and wh.count("conversations") == 0
    # The failures are recorded as data: each query's missing intent, each call's provenance.
    assert {r["error"].split(":")[0] for r in wh.query("SELECT error FROM intents")} == {
        "retries_exhausted"}
    assert wh.query("SELECT count(*) AS n FROM llm_calls WHERE error IS NOT NULL")[0]["n"] > 0


def test_every_target_call_failing_fails_the_episodes_stage(prefect_harness, llm_server, write_config,
                                                            tmp_path):
    llm_server.scripts["targets"] = bad_request
    path = write_config(dataset=ONE_QUERY)
    with pytest.raises(StageFailed) as info:
        run_flow(path)
    msg = str(info.value)
    assert msg.startswith("episodes: all ") and " episodes failed: api_error: " in msg
    home = tmp_path / "home"
    run = the_run(home)
    assert run["error"] == msg
    assert_nothing_half_written(home, run)
    wh = Warehouse(home / "warehouse.duckdb")
    assert wh.count("checklists") == 1  # the checklists stage did its work
    assert wh.query("SELECT DISTINCT status FROM conversations") == [{"status": "target_error"}]
    assert wh.count("item_judgments") == 0  # judge never ran


def test_every_judge_call_failing_fails_the_judge_stage(prefect_harness, llm_server, write_config, tmp_path):
    llm_server.scripts["benutil_judge"] = bad_request
    llm_server.scripts["safety_judge"] = bad_request
    path = write_config(dataset=ONE_QUERY)
    with pytest.raises(StageFailed) as info:
        run_flow(path)
    msg = str(info.value)
    # The verdicts stage's rule (every judge call failed), CarryOnBench's as any benchmark's.
    assert msg.startswith("verdicts: all ") and " judge calls failed: api_error: " in msg
    assert "\n" not in msg
    home = tmp_path / "home"
    run = the_run(home)
    assert run["error"] == msg
    assert_nothing_half_written(home, run)


def test_partial_failures_are_data_and_the_report_says_succeeded(prefect_harness, llm_server,
                                                                 write_config, tmp_path):
    # One of two targets fails every call: the stage did part of its work, the run succeeds.
    def target(body):
        return bad_request(body) if body["model"].endswith("target-b") else None

    llm_server.scripts["targets"] = lambda body: target(body) or default_answer("targets", body)
    path = write_config(dataset=ONE_QUERY, models={
        **base_config(llm_server.api_base, tmp_path / "home")["models"],
        "targets": [{"name": "target-a", "model": "openai/test-target-a"},
                    {"name": "target-b", "model": "openai/test-target-b"}]})
    summary = run_flow(path)
    conv = summary["stages"]["episodes"]["status"]
    assert conv.get("completed") and conv.get("target_error")
    home = tmp_path / "home"
    run = the_run(home)
    assert run["status"] == "succeeded" and run["error"] is None
    folder = home / "reports" / run["run_id"]
    md = (folder / "report.md").read_text()
    assert f"- Run: `{run['run_id']}` (status succeeded" in md and "status running" not in md
    page = (folder / "report.html").read_text()
    assert '<li id="run-status">Run: <code>' in page and "(status succeeded" in page
    assert "status running" not in page


def test_every_guard_call_failing_fails_the_checklists_stage(prefect_harness, llm_server, write_config,
                                                             tmp_path):
    # Dropped at the guard step, but because the guard's calls failed: an error, not a verdict.
    llm_server.scripts["wildguard"] = bad_request
    path = write_config(dataset=ONE_QUERY)
    with pytest.raises(StageFailed) as info:
        run_flow(path)
    assert str(info.value).startswith("checklists: the only item dropped: guard: guard failed: api_error: ")
    home = tmp_path / "home"
    assert_nothing_half_written(home, the_run(home))


def test_every_answer_judged_harmful_is_data_not_a_failure(prefect_harness, llm_server, write_config,
                                                           tmp_path):
    # The guard keeps nothing: no checklist is built, by a content decision, not an error.
    # The run goes on (conversations, safety judgments) and the report says what is missing.
    import json

    llm_server.scripts["wildguard"] = lambda body: json.dumps(
        {"harmful_request": True, "response_refusal": False, "harmful_response": True})
    path = write_config(dataset=ONE_QUERY)
    summary = run_flow(path)
    assert summary["stages"]["checklists"]["checklists"] == 0
    assert summary["stages"]["checklists"]["items_dropped"]["guard"]["dropped"] == 1
    home = tmp_path / "home"
    run = the_run(home)
    assert run["status"] == "succeeded"
    md = (home / "reports" / run["run_id"] / "report.md").read_text()
    assert "(status succeeded" in md and "Unscored benutil judgments: no judgments" in md
    assert "Not computed" in md


def test_a_stage_with_nothing_to_do_is_not_failed(prefect_harness, llm_server, write_config, tmp_path):
    # Judge and report on an empty warehouse: nothing to judge, and the report says so.
    path = write_config(dataset=ONE_QUERY)
    summary = run_flow(path, "verdicts,report")
    assert summary["stages"]["verdicts"].get("episodes", 0) == 0
    home = tmp_path / "home"
    run = the_run(home)
    assert run["status"] == "succeeded"
    md = (home / "reports" / run["run_id"] / "report.md").read_text()
    assert "(status succeeded" in md and "_No completed conversations._" in md


RUN_PY = Path(__file__).resolve().parents[2] / "flows" / "cli" / "run.py"


@pytest.mark.skipif("StageFailed" not in RUN_PY.read_text(),
                    reason="flows/cli/run.py does not catch StageFailed yet")
def test_cli_prints_one_error_line_and_exits_non_zero(prefect_harness, llm_server, write_config, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    llm_server.faults.error500 = 1.0
    path = write_config(dataset=ONE_QUERY)
    r = CliRunner().invoke(app, ["run", "--config", str(path)], catch_exceptions=False)
    assert r.exit_code != 0
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: intents: the only query got no benign intent: ")
    assert the_run(tmp_path / "home")["status"] == "failed"


def test_a_guard_call_without_answer_leaves_its_query_unbuilt_not_dropped(
        prefect_harness, llm_server, write_config, tmp_path):
    # Transport faults on one query's guard calls (an error status past the retries): the
    # guard gave no verdict, so the query is unbuilt and counted as failed, never dropped as
    # if the guard had judged its answers harmful. The other query is built; the stage fails
    # with one line and the run exits non-zero; the next run builds the failed query and
    # sends again only the calls that failed.
    seen: list[str] = []

    def guard(body):
        text = body["messages"][-1]["content"]
        request = text.split("Human user:\n", 1)[1].split("\n\nAI assistant:", 1)[0]
        if request not in seen:
            seen.append(request)
        if request == seen[0] and "test-ens-2" in text:
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        return default_answer("wildguard", body)

    llm_server.scripts["wildguard"] = guard
    path = write_config(dataset={"source": "sample", "path": None, "limit": 2})
    with pytest.raises(StageFailed) as info:
        run_flow(path)
    msg = str(info.value)
    assert msg.startswith("checklists: 1 of 2 items could not be built because their calls "
                          "failed (a rerun retries them; the other 1 were built or dropped by a "
                          "filter): guard: ens-2: guard failed: "), msg
    assert "\n" not in msg
    home = tmp_path / "home"
    wh = Warehouse(home / "warehouse.duckdb")
    assert_nothing_half_written(home, the_run(home))
    rows = wh.query("SELECT kept, step FROM checklist_queries ORDER BY kept")
    assert [(r["kept"], r["step"]) for r in rows] == [(False, "guard"), (True, None)]
    assert wh.count("checklists") == 1 and wh.count("conversations") == 0

    # The provider is back: the rerun builds the query; every call that succeeded before
    # comes from the cache (only the failed guard call, and what follows it, is sent).
    llm_server.scripts.pop("wildguard")
    before = dict(llm_server.counts)
    summary = run_flow(path, "checklists")
    assert summary["stages"]["checklists"]["checklists"] == 2
    assert wh.count("checklists") == 2
    assert llm_server.counts["ensemble"] == before["ensemble"]
    assert llm_server.counts["wildguard"] - before["wildguard"] == 1
