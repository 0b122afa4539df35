"""``carryon export`` and ``carryon import`` on the command line: what they print, and each
refusal as one ``error:`` line with exit 2."""

from __future__ import annotations

import pytest

import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.support import export_home

runner = CliRunner()


def _config(tmp_path, status="succeeded", source="sample"):
    home = tmp_path / "home"
    export_home.build(home / "warehouse.duckdb", status=status, source=source)
    data = tmp_path / "dataset.json"
    data.write_text("[]")
    cfg = {"benchmark": "opensafeintent", "home": str(home),
           "dataset": {"source": source, "path": None if source == "sample" else str(data)},
           "models": {"targets": [{"name": "target-a", "model": "openai/gpt-test"}],
                      "helpfulness_judge": {"model": "anthropic/claude-test"},
                      "harmfulness_judge": {"model": "anthropic/claude-test"}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_export_and_import_commands(tmp_path):
    cfg = _config(tmp_path)
    r = runner.invoke(app, ["export", "--config", str(cfg), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"export: {tmp_path / 'out'} (items 2, episodes 3, verdicts 6")
    r = runner.invoke(app, ["export", "--config", str(cfg), "--format", "inspect",
                            "--out", str(tmp_path / "logs")])
    assert r.exit_code == 0 and "(1 eval logs, 2 samples)" in r.output, r.output
    r = runner.invoke(app, ["import", str(tmp_path / "out"), "--home", str(tmp_path / "h2")])
    assert r.exit_code == 0 and "episodes 3, episode_turns 7" in r.output, r.output
    r = runner.invoke(app, ["import", str(tmp_path / "out"), "--home", str(tmp_path / "h2")])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "a warehouse is already there" in r.output


def test_refusals_are_one_error_line(tmp_path):
    cfg = _config(tmp_path, status="failed")
    r = runner.invoke(app, ["export", "--config", str(cfg), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert r.output.startswith("error: run r1: status 'failed', not finished (--partial")
    r = runner.invoke(app, ["export", "--config", str(cfg), "--format", "csv",
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "error: --format 'csv': choose hf or inspect" in r.output


def test_left_out_text_is_said_in_one_line(tmp_path):
    cfg = _config(tmp_path, source="opensafeintent")
    r = runner.invoke(app, ["export", "--config", str(cfg), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == (
        "left out: the text of opensafeintent (its licence does not allow redistribution; "
        "--include-restricted keeps it)")
