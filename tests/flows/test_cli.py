"""The command line's error paths: a short message naming the cause, a non-zero exit, and
nothing half-written."""

from __future__ import annotations

import pytest

import datetime as dt

import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.support.factories import base_config

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _config(tmp_path, api_base, **over):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base_config(api_base, tmp_path / "home", **over)))
    return path


def test_bad_config_names_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("home: h\nflows: {lengths: [3]}\n")
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 2
    assert str(path) in r.output and "flows.lengths" in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "h").exists()


def test_missing_key_variable_fails_before_writing(tmp_path, llm_server, monkeypatch):
    monkeypatch.delenv("CARRYON_TEST_KEY", raising=False)
    cfg = base_config(llm_server.api_base, tmp_path / "home")
    cfg["models"]["targets"][0]["api_key_env"] = "CARRYON_TEST_KEY"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 2 and "CARRYON_TEST_KEY is not set" in r.output
    assert not (tmp_path / "home").exists()
    assert llm_server.counts["total"] == 0


def test_unreachable_api_base_fails_before_writing(tmp_path):
    path = _config(tmp_path, "http://127.0.0.1:9/v1")
    r = invoke("run", "--config", str(path))
    assert r.exit_code == 2 and "http://127.0.0.1:9/v1 is unreachable" in r.output
    assert not (tmp_path / "home").exists()


def test_unknown_stage(tmp_path, llm_server):
    r = invoke("run", "--config", str(_config(tmp_path, llm_server.api_base)), "--stages", "verdicts,nope")
    assert r.exit_code == 2 and "unknown stage" in r.output


def test_sql_without_warehouse_and_bad_sql(tmp_path, llm_server):
    path = _config(tmp_path, llm_server.api_base)
    r = invoke("sql", "SELECT 1", "--config", str(path))
    assert r.exit_code == 2 and "no warehouse yet" in r.output
    from warehouse import Warehouse

    Warehouse(tmp_path / "home" / "warehouse.duckdb").init()
    assert invoke("sql", "SELECT 41 + 1 AS answer", "--config", str(path)).output.split()[-1] == "42"
    r = invoke("sql", "SELEC nonsense", "--config", str(path))
    assert r.exit_code == 2 and "SQL error" in r.output


def test_cache_commands(tmp_path, llm_server):
    import asyncio

    from tasks.config import load_config
    from tasks.gateway import Gateway

    path = _config(tmp_path, llm_server.api_base)
    cfg = load_config(path)
    gw = Gateway(cfg.home_path / "cache", "r")
    asyncio.run(gw.chat(cfg.role_spec("targets"), "targets", [{"role": "user", "content": "a"}]))
    asyncio.run(gw.chat(cfg.role_spec("safety_judge"), "safety_judge", [{"role": "user", "content": "b"}]))
    gw.close()
    out = invoke("cache", "stats", "--config", str(path)).output
    assert "targets" in out and "safety_judge" in out and "total entries: 2" in out
    assert "cleared 1" in invoke("cache", "clear", "--config", str(path), "--role", "targets").output
    # No run recorded any call: prune drops what is left.
    assert "pruned 1" in invoke("cache", "prune", "--config", str(path)).output
    assert "total entries: 0" in invoke("cache", "stats", "--config", str(path)).output


def test_sql_is_read_only_unless_write(tmp_path):
    from warehouse import Warehouse

    home = tmp_path / "home"
    wh = Warehouse(home / "warehouse.duckdb").init()
    wh.write("runs", [{"run_id": "r1", "config_hash": "c", "config_json": "{}", "seed": 0,
                       "stages": "all", "status": "succeeded",
                       "started": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"home": str(home)}))
    for bad in ("DELETE FROM runs", "DROP VIEW model_summary", "SELECT 1; DELETE FROM runs",
                f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'", f"ATTACH '{tmp_path / 'x.duckdb'}' AS x",
                "SELECT * FROM read_csv('/etc/hostname')"):
        r = invoke("sql", "--config", str(cfg), bad)
        assert r.exit_code == 2 and r.output.startswith("error: SQL error: "), (bad, r.output)
        assert "--write allows changes" in r.output and "\n" not in r.output.strip()
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "x.duckdb").exists()
    assert wh.count("runs") == 1 and wh.query("SELECT count(*) AS n FROM model_summary")
    r = invoke("sql", "--config", str(cfg), "--write", "DELETE FROM runs")
    assert r.exit_code == 0 and wh.count("runs") == 0


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_sql_on_a_warehouse_another_process_holds_names_it(tmp_path):
    import subprocess
    import sys

    from warehouse import Warehouse

    home = tmp_path / "home"
    Warehouse(home / "warehouse.duckdb").init()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"home": str(home)}))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; "
                               "c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
                               "time.sleep(30)", str(home / "warehouse.duckdb")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = invoke("sql", "--config", str(cfg), "SELECT 1 AS x")
        assert r.exit_code == 2 and f"(PID {holder.pid})" in r.output
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    finally:
        holder.kill()
        holder.wait()


def test_server_why_prints_a_failed_runs_one_line_reason(prefect_harness):
    # What `prefect deployment run --watch` leaves out: the failed state's message, which
    # holds the stage's one-line reason (StageFailed), without Prefect's prefix.
    import asyncio

    import pytest
    from prefect import flow

    from tasks.engine.stage_errors import StageFailed

    @flow(name="carryon")
    def failing():
        raise StageFailed("episodes", "all 2 episodes failed: api_error: connection refused (2 times)")

    with pytest.raises(StageFailed):
        failing()
    from flows.cli.prefect import failed_run_reason

    line = asyncio.run(failed_run_reason(None))
    assert line.endswith("(Failed): StageFailed: episodes: all 2 episodes failed: "
                         "api_error: connection refused (2 times)"), line
    r = CliRunner().invoke(app, ["server", "why"])
    assert r.exit_code == 0 and r.output.strip() == line


def test_an_older_stage_name_selects_its_stage():
    # CarryOnBench's judging was its own stage `judge` before it moved onto the verdicts
    # stage: commands and deployments written with the old name select verdicts.
    from tasks.bench import load_spec
    from tasks.engine.run import parse_stages

    spec = load_spec("carryon")
    assert parse_stages("judge,report", spec.stages, spec.renamed_stages) == ["verdicts", "report"]
    assert parse_stages("episodes,verdicts", spec.stages, spec.renamed_stages) == [
        "episodes", "verdicts"]
