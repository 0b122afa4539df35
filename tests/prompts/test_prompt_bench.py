"""A benchmark kept outside the project ships its own prompt templates
(tests/fixtures/prompt_bench/prompts/): ``carryon plan``, ``run`` and ``report`` work on it,
its own judge's template (``grade.j2``) is found there, and its ``judges/helpfulness.j2``
replaces the project's helpfulness rubric for it only: the same benchmark without that
folder, run in the same process against the same server, is asked with the shared one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import prompts
from flows.cli import app
from tasks.bench import load_spec
from tasks.judges.rubric import rubric_messages
from warehouse import Warehouse

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "prompt_bench" / "spec.yaml"
OWN_RUBRIC = "PROMPT-BENCH HELPFULNESS RUBRIC"
OWN_GRADER = "PROMPT-BENCH GRADER"
runner = CliRunner()

ANSWERS = {"What is the capital of France?": "Paris.", "What is 2 + 2?": "5"}


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _config(tmp_path, api_base: str, spec: Path, home: str) -> Path:
    cfg = {"benchmark": str(spec), "home": str(tmp_path / home), "seed": 0,
           "dataset": {"source": "sample"},
           "models": {"defaults": {"api_base": api_base, "temperature": 0.0, "max_tokens": 128,
                                   "max_concurrency": 4, "timeout_s": 5, "max_retries": 2},
                      "targets": [{"name": "target-a", "model": "openai/test-target-a"}],
                      "helpfulness_judge": {"model": "openai/test-helpful"},
                      "prompt_grader": {"model": "openai/test-grader"}},
           "gateway": {"backoff_base_s": 0.01, "backoff_max_s": 0.1}}
    path = tmp_path / f"{home}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _script(llm_server):
    def target(body):
        return ANSWERS[body["messages"][0]["content"]]

    def helpful(body):
        # 4 under the benchmark's own rubric, 1 under the shared one: the scores say which.
        own = body["messages"][-1]["content"].startswith(OWN_RUBRIC)
        return json.dumps({"reason": "rated", "score": 4 if own else 1})

    def grader(body):
        text = body["messages"][-1]["content"]
        assert text.startswith(OWN_GRADER), text[:200]
        key = text.split("The answer key: ", 1)[1].split("\n", 1)[0]
        response = re.search(r"<<<BEGIN RESPONSE (T[0-9A-F]+)>>>\n(.*?)\n<<<END RESPONSE \1>>>",
                             text, re.S).group(2)
        return json.dumps({"reason": "compared", "correct": key.lower() in response.lower()})

    llm_server.scripts.update({"targets": target, "helpfulness_judge": helpful,
                               "prompt_grader": grader})


def _sent(llm_server, role: str) -> list[str]:
    return [q["body"]["messages"][-1]["content"] for q in llm_server.requests if q["role"] == role]


def test_its_templates_are_found_only_while_it_is_under_way():
    spec = load_spec(str(SPEC))
    assert spec.prompts_dir == SPEC.parent / "prompts"
    shared = rubric_messages("judges/helpfulness.j2", "Q", "A")[0]["content"]
    with prompts.benchmark_prompts(spec.prompts_dir):
        own = rubric_messages("judges/helpfulness.j2", "Q", "A")[0]["content"]
        assert prompts.template_path("grade.j2") == SPEC.parent / "prompts" / "grade.j2"
    assert own.startswith(OWN_RUBRIC) and not shared.startswith(OWN_RUBRIC)
    assert rubric_messages("judges/helpfulness.j2", "Q", "A")[0]["content"] == shared


@pytest.mark.slow  # the Prefect test server (prefect_harness): plan, run and report end to end
def test_plan_run_report_with_its_own_templates(prefect_harness, llm_server, tmp_path):
    _script(llm_server)
    path = _config(tmp_path, llm_server.api_base, SPEC, "home")

    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 0, r.output
    # 2 items, one turn each: 2 target calls, 2 helpfulness and 2 grader calls at most.
    calls = {line.split()[0]: int(line.split()[2]) for line in r.output.splitlines()
             if line.split()[:1] in (["targets"], ["helpfulness_judge"], ["prompt_grader"])}
    assert calls == {"targets": 2, "helpfulness_judge": 2, "prompt_grader": 2}, r.output

    r = invoke("run", "--config", str(path))
    assert r.exit_code == 0, r.output
    helpful, graded = _sent(llm_server, "helpfulness_judge"), _sent(llm_server, "prompt_grader")
    assert len(helpful) == 2 and all(t.startswith(OWN_RUBRIC) for t in helpful)
    assert len(graded) == 2 and all(t.startswith(OWN_GRADER) for t in graded)
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    [row] = wh.query("SELECT * FROM pb_scores")
    assert (row["target"], row["helpfulness"], row["correct"]) == ("target-a", 4.0, 0.5)
    # The verdict set's version hashes the template that was rendered: the benchmark's own.
    with prompts.benchmark_prompts(SPEC.parent / "prompts"):
        own_version = prompts.template_version("judges/helpfulness.j2", "judges/_fenced.j2")
    assert own_version != prompts.template_version("judges/helpfulness.j2", "judges/_fenced.j2")

    r = invoke("report", "--config", str(path))
    assert r.exit_code == 0, r.output
    [md] = (tmp_path / "home" / "reports").glob("*/report.md")
    assert "| target-a | 4.00 | 0.50 |" in md.read_text()

    before = llm_server.counts["total"]
    r = invoke("run", "--config", str(path), "--replay")
    assert r.exit_code == 0, r.output
    assert llm_server.counts["total"] == before  # a rerun renders the same prompts: cached

    # The same benchmark without its own rubric (prompts/judges/ left out, its grader's
    # template kept), run in this process after the first: its helpfulness judge asks with the
    # shared rubric, its grader still with its own template.
    folder = tmp_path / "bare"
    shutil.copytree(SPEC.parent, folder)
    shutil.rmtree(folder / "prompts" / "judges")
    text = (folder / "spec.yaml").read_text().replace("name: prompt_bench\n", "name: prompt_bare\n")
    (folder / "spec.yaml").write_text(text)
    llm_server.reset()
    bare = _config(tmp_path, llm_server.api_base, folder / "spec.yaml", "bare")
    r = invoke("run", "--config", str(bare))
    assert r.exit_code == 0, r.output
    helpful = _sent(llm_server, "helpfulness_judge")
    assert len(helpful) == 2 and not any(OWN_RUBRIC in t for t in helpful)
    assert all(t.startswith(OWN_GRADER) for t in _sent(llm_server, "prompt_grader"))
    [row] = Warehouse(tmp_path / "bare" / "warehouse.duckdb").query("SELECT * FROM pb_scores")
    assert row["helpfulness"] == 1.0

    # Its templates are part of the benchmark's code: unchanged, a rerun skips its stages and
    # keeps the report; an edited one (a comment: the same prompts, a new template version)
    # replays them, from the cache.
    sent = llm_server.counts["total"]
    for edit, skips in ((False, 3), (True, 0)):
        if edit:
            grade = folder / "prompts" / "grade.j2"
            grade.write_text(grade.read_text() + "{# edited #}\n")
        r = invoke("run", "--config", str(bare))
        assert r.exit_code == 0, r.output
        assert r.output.count('"unchanged_since"') == skips, r.output
    assert llm_server.counts["total"] == sent
