"""The command line for the sister benchmarks: data, plan and report read the config's spec,
and a config that does not fit its benchmark fails naming the file and the field."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _config(tmp_path, name: str, **over):
    cfg = yaml.safe_load(open(f"configs/{name}.yaml"))
    cfg["home"] = str(tmp_path / "home")
    cfg.update(over)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_data_lists_items_and_their_conditions(tmp_path):
    r = invoke("data", "--config", str(_config(tmp_path, "clarify")))
    assert r.exit_code == 0, r.output
    assert "4 items selected (Clarify or answer)" in r.output
    assert "ask,disambiguated" in r.output and "\nask " not in r.output


def test_plan_counts_episodes_and_judge_calls(tmp_path):
    r = invoke("plan", "--config", str(_config(tmp_path, "opensafeintent")))
    assert r.exit_code == 0, r.output
    # One prompt set with all seven framings, and four follow-up flows (lengths 4 and 6, BC
    # and NC): 7 + 4 episodes; target calls 7 + (2 + 3) * 2 = 17.
    assert "1 items, 9 conditions, 1 target(s): 11 episodes" in r.output
    line = next(x for x in r.output.splitlines() if x.startswith("targets "))
    assert line.split()[2] == "17"
    # The follow-ups' calls are upper bounds; the move checker, unset, makes none to bound.
    bounds = next(x for x in r.output.splitlines() if "upper bounds" in x)
    assert "targets" in bounds and "user_simulator" in bounds and "move_checker" not in bounds


def test_report_without_a_warehouse_says_so(tmp_path):
    r = invoke("report", "--config", str(_config(tmp_path, "clarify")))
    assert r.exit_code == 2 and "no warehouse yet" in r.output


def test_a_role_of_another_benchmark_is_refused(tmp_path):
    path = _config(tmp_path, "clarify")
    cfg = yaml.safe_load(path.read_text())
    cfg["models"]["benutil_judge"] = {"model": "openai/x"}
    path.write_text(yaml.safe_dump(cfg))
    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 2
    assert f"{path}: models.benutil_judge: not a role of benchmark clarify" in r.output


def test_a_source_of_another_benchmark_is_refused(tmp_path):
    path = _config(tmp_path, "opensafeintent", dataset={"source": "casebench", "path": "x.json"})
    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 2
    assert "dataset.source: 'casebench' is not a source of benchmark opensafeintent" in r.output


def test_an_unknown_benchmark_names_the_built_in_ones(tmp_path):
    path = _config(tmp_path, "clarify", benchmark="nosuch")
    r = invoke("plan", "--config", str(path))
    assert r.exit_code == 2
    assert f"{path}: benchmark 'nosuch': no spec at" in r.output and "carryon" in r.output


def test_report_finds_its_own_benchmarks_run_never_anothers(tmp_path):
    # Configs of two benchmarks share a home; "the latest run" is the other benchmark's.
    import datetime as dt
    import json

    from tasks.config import load_config
    from tasks.report.assemble import find_run
    from warehouse import Warehouse

    clarify = _config(tmp_path, "clarify")
    osi = _config(tmp_path, "opensafeintent")
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb").init()
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def run(run_id, path, minutes):
        cfg = load_config(path)
        return {"run_id": run_id, "config_hash": cfg.config_hash(), "seed": 0, "stages": "all",
                "config_json": json.dumps(cfg.model_dump(mode="json")), "status": "succeeded",
                "started": t0 + dt.timedelta(minutes=minutes)}

    wh.write("runs", [run("clarify-1", clarify, 1), run("osi-1", osi, 2)])
    assert find_run(wh, load_config(clarify)) == "clarify-1"
    assert find_run(wh, load_config(osi)) == "osi-1"
    # Another config of the same benchmark (a changed limit): its benchmark's latest run.
    cfg = yaml.safe_load(clarify.read_text())
    cfg["dataset"]["limit"] = 2
    other = tmp_path / "clarify2.yaml"
    other.write_text(yaml.safe_dump(cfg))
    assert find_run(wh, load_config(other)) == "clarify-1"
    r = invoke("report", "--config", str(clarify))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "home" / "reports" / "clarify-1" / "report.md").exists()
    assert not (tmp_path / "home" / "reports" / "osi-1").exists()
    demo = _config(tmp_path, "demo")
    r = invoke("report", "--config", str(demo))
    assert r.exit_code == 2 and "no run of benchmark carryon yet" in r.output
