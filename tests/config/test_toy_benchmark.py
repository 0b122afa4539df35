"""A benchmark the project never heard of, defined in one folder (tests/fixtures/toy_bench):
its own loader, user policy (with arguments), deterministic target policy, judge (with a model
role of its own), stage, metric view and report section. ``carryon plan``, ``run`` and ``report``
work on it, and a wrong component name or argument is one line naming the spec and field."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tasks.bench import SpecError, load_spec
from tests.support.toy import SPEC, _config, _script
from warehouse import Warehouse

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_spec_loads_its_own_components_and_roles():
    spec = load_spec(str(SPEC))
    assert spec.targets == ["llm", "answer_key"]
    assert spec.config_roles() == ["targets", "embedder", "toy_grader"]
    assert spec.stage_roles("episodes") == (["targets"], set())
    assert spec.stage_roles("verdicts") == (["toy_grader"], set())
    assert spec.stages == ["episodes", "verdicts", "toy_tally", "report"]
    assert spec.stage("toy_tally").phase == "judge" and spec.stage_roles("toy_tally") == ([], set())
    nudge = spec.user(spec.condition("nudged"))
    assert (nudge.args.nudges, nudge.args.text) == (1, "Go on, please.")


@pytest.mark.parametrize("edit, field, message", [
    (("user: {name: nudge, args: {nudges: 1, text: \"Go on, please.\"}}",
      "user: {name: nudge, args: {nudges: one}}"),
     "conditions[nudged].user", "args.nudges: Input should be a valid integer"),
    (("user: {name: nudge, args: {nudges: 1, text: \"Go on, please.\"}}",
      "user: {name: nudge, args: {nudge: 1}}"),
     "conditions[nudged].user", "args.nudge: Extra inputs are not permitted"),
    (("targets: [llm, answer_key]", "targets: [llm, answer_keys]"),
     "targets[answer_keys]", "no target policy named 'answer_keys'"),
    (("judges: [toy_correct]", "judges: [{name: toy_correct, args: {strict: true}}]"),
     "judges[toy_correct]", "judge toy_correct takes no arguments"),
    (("report: [toy_table]", "report: [toy_tables]"),
     "report[toy_tables]", "no report section named 'toy_tables'"),
    (("components: [components.py]", "components: [missing.py]"),
     "components", "missing.py: no such file"),
    (("stages: [episodes, verdicts, toy_tally, report]", "stages: [episodes, toy_tallies, report]"),
     "stages[toy_tallies]", "no stage named 'toy_tallies'"),
])
def test_a_wrong_component_is_one_line_naming_spec_and_field(tmp_path, edit, field, message):
    folder = tmp_path / "bench"
    folder.mkdir()
    for f in SPEC.parent.iterdir():
        if f.is_file():
            (folder / f.name).write_text(f.read_text())
    text = (folder / "spec.yaml").read_text()
    assert edit[0] in text
    (folder / "spec.yaml").write_text(text.replace(edit[0], edit[1]).replace("name: toy\n",
                                                                             "name: toy_bad\n"))
    with pytest.raises(SpecError) as e:
        load_spec(str(folder / "spec.yaml"))
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{folder / 'spec.yaml'}: {field}: ")
    assert message in line


def test_a_role_no_component_declares_is_refused(tmp_path, llm_server):
    path = _config(tmp_path, llm_server.api_base)
    cfg = yaml.safe_load(path.read_text())
    cfg["models"]["act_judge"] = {"model": "openai/x"}
    path.write_text(yaml.safe_dump(cfg))
    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 2
    assert f"{path}: models.act_judge: not a role of benchmark toy" in r.output


@pytest.mark.slow  # the Prefect test server (prefect_harness): plan, run and report end to end
def test_plan_run_and_report(prefect_harness, llm_server, tmp_path):
    _script(llm_server)
    path = _config(tmp_path, llm_server.api_base)

    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 0, r.output
    # 3 items x 2 seats (target-a and the answer key) = 6 episodes. Upper bounds: the target
    # model answers at most max_turns = 3 times in its 3 episodes (9 calls); the grader at
    # most once per turn of every seat (18); the answer key calls nothing.
    assert "1 conditions, 2 target(s): 6 episodes" in r.output
    calls = {line.split()[0]: int(line.split()[2]) for line in r.output.splitlines()
             if line.split()[:1] in (["targets"], ["toy_grader"])}
    assert calls == {"targets": 9, "toy_grader": 18}

    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    # The target model: question and one nudge in each of 3 episodes; the grader: the last
    # answer of each of the 6 episodes (all distinct requests).
    assert llm_server.counts["targets"] == 6
    assert llm_server.counts["toy_grader"] == 6
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    eps = wh.query("SELECT target, termination, n_turns FROM episodes ORDER BY target")
    assert {(e["target"], e["termination"], e["n_turns"]) for e in eps} == {
        ("answer_key", "user_stop", 4), ("target-a", "user_stop", 4)}
    turns = wh.query("SELECT content FROM episode_turns t JOIN episodes e USING (episode_id) "
                     "WHERE e.target = 'answer_key' AND t.role = 'assistant' ORDER BY content")
    assert sorted({t["content"] for t in turns}) == ["4", "Paris", "blue"]
    acc = {row["target"]: row for row in wh.query("SELECT * FROM toy_accuracy")}
    assert acc["answer_key"]["accuracy"] == 1.0 and acc["answer_key"]["n_scored"] == 3
    assert acc["target-a"]["accuracy"] == pytest.approx(2 / 3)  # Paris, Blue right; 5 wrong
    # The toy's own stage ran after the judges: question, answer, nudge, answer per episode.
    assert ('toy_tally: {"by_target": {"answer_key": {"episodes": 3, "turns": 12}, '
            '"target-a": {"episodes": 3, "turns": 12}}}') in r.output, r.output

    r = invoke("report", "--config", str(path))
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    text = md.read_text()
    assert "## Toy: correct last answers per target" in text
    assert "| answer_key | 3 | 3 | 1.000 |" in text and "| target-a | 3 | 3 | 0.667 |" in text
    assert "toy_grader: openai/test-grader" in text  # its role is in the report's model list

    before = llm_server.counts["total"]
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    assert llm_server.counts["total"] == before  # a rerun sends nothing
    # Both engine stages and the report kept memos: the rerun skips them and keeps the report
    # (tasks/engine/stage_memo.py); the toy's own stage keeps none and runs again.
    assert r.output.count('"unchanged_since"') == 3, r.output

    # The benchmark's own files are outside the project's source: editing one replays the
    # stages (from the cache) instead of skipping them.
    folder = tmp_path / "bench"
    folder.mkdir()
    for f in SPEC.parent.iterdir():
        if f.is_file():
            (folder / f.name).write_text(f.read_text())
    cfg = yaml.safe_load(path.read_text())
    cfg["benchmark"] = str(folder / "spec.yaml")
    path.write_text(yaml.safe_dump(cfg))
    for edit, skips in ((False, 0), (False, 3), (True, 0)):  # a new config, unchanged, edited
        if edit:
            (folder / "components.py").write_text((folder / "components.py").read_text()
                                                  + "\n# edited\n")
        r = invoke("run", "--config", str(path))
        assert r.exit_code == 0, r.output
        assert r.output.count('"unchanged_since"') == skips, r.output
    assert llm_server.counts["total"] == before  # every replay from the cache
