"""Commands that answer at once (issue 55): those that run no flow import neither litellm nor
Prefect nor SQLAlchemy; a rerun whose stages are all unchanged starts no Prefect server,
sends nothing and keeps the report; a changed stage still runs the flow; Ctrl-C while the
report is written ends the run at the report's next checkpoint, and the rerun writes it.

Every command runs as ``carryon`` does, in a subprocess (tests/support/interrupt.py's
environment) against the loopback server; a shim prints, at exit, which of the heavy
libraries the process imported."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.interrupt import _config, _env
from tests.support.llm_server import LLMServer
from tests.support.pipeline import snapshot
from warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("litellm", "prefect", "sqlalchemy", "sqlmodel")

# The command line, and at exit the heavy libraries it imported.
SHIM = f"""
import atexit, sys
atexit.register(lambda: print("IMPORTED", sorted({{m.split(".")[0] for m in sys.modules}}
                                                 & set({HEAVY!r})), file=sys.stderr))
sys.argv = ["carryon", *sys.argv[1:]]
from flows.cli import main
main()
"""


def carryon(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHIM, *args], cwd=ROOT, env=_env(tmp),
                          capture_output=True, text=True, timeout=600)


def imported(p: subprocess.CompletedProcess) -> list[str]:
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("IMPORTED ")][-1]
    return json.loads(line.removeprefix("IMPORTED ").replace("'", '"'))


def test_plan_data_scripts_and_cache_import_no_heavy_library(tmp_path):
    cfg = _config(tmp_path, "http://127.0.0.1:9/v1", "home")
    for args in (["plan", "-c", str(cfg)], ["plan", "-c", str(cfg), "--by", "model"],
                 ["data", "-c", str(cfg)], ["scripts", "--count", "-c", str(cfg)],
                 ["cache", "stats", "-c", str(cfg)]):
        p = carryon(tmp_path, *args)
        assert p.returncode == 0, (args, p.stderr[-2000:])
        assert imported(p) == [], args


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A home after one whole run (limit 1), its config, and the loopback server."""
    tmp = tmp_path_factory.mktemp("fast")
    server = LLMServer().start()
    try:
        cfg = _config(tmp, server.api_base, "home")
        p = carryon(tmp, "run", "--config", str(cfg))
        assert p.returncode == 0, p.stderr[-3000:]
        yield tmp, cfg, server
    finally:
        server.stop()


def _runs(tmp: Path) -> list[dict]:
    return Warehouse(tmp / "home" / "warehouse.duckdb").query("SELECT * FROM runs ORDER BY started")


@pytest.mark.slow
def test_sql_and_report_import_no_heavy_library(ran):
    tmp, cfg, _ = ran
    for args in (["sql", "-c", str(cfg), "SELECT count(*) AS n FROM runs"],
                 ["report", "-c", str(cfg)]):
        p = carryon(tmp, *args)
        assert p.returncode == 0, (args, p.stderr[-2000:])
        assert imported(p) == [], args


@pytest.mark.slow
def test_unchanged_rerun_needs_no_prefect_and_a_changed_stage_runs_the_flow(ran):
    tmp, cfg, server = ran
    wh = Warehouse(tmp / "home" / "warehouse.duckdb")
    before = snapshot(wh)
    kept = _runs(tmp)[-1]  # the last run: every stage and the report memoised since
    server.reset()
    p = carryon(tmp, "run", "--config", str(cfg))
    assert p.returncode == 0, p.stderr[-3000:]
    assert server.counts["total"] == 0
    assert "Starting temporary Prefect server" not in p.stderr
    assert imported(p) == []  # no Prefect, no litellm: nothing but the memos was read
    last = _runs(tmp)[-1]
    assert last["run_id"] != kept["run_id"] and last["status"] == "succeeded"
    assert last["requests"] == 0 and last["error"] is None
    assert "0 requests to model servers" in p.stdout
    assert "[report] inputs unchanged since run" in p.stderr
    # The report kept is the one already written, named in the summary; no new folder.
    reports = tmp / "home" / "reports"
    assert not (reports / last["run_id"]).exists()
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("report: ")]
    folder = Path(line.removeprefix("report: "))
    assert folder.parent == reports and (folder / "report.md").exists()
    assert snapshot(wh) == before

    # A stored turn deleted by hand: the episodes stage must run, so the flow runs (its
    # temporary server starts), replays from the cache and restores the row.
    wh.write("episode_turns", [], delete=("position = (SELECT max(position) FROM episode_turns)", []))
    server.reset()
    p = carryon(tmp, "run", "--config", str(cfg))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Starting temporary Prefect server" in p.stderr and "prefect" in imported(p)
    assert server.counts["total"] == 0
    assert "[episodes] inputs unchanged" not in p.stderr
    assert snapshot(wh) == before
    changed = _runs(tmp)[-1]
    assert changed["status"] == "succeeded"
    # Its report was written again (its inputs, the run's recorded calls among them, changed).
    assert (reports / changed["run_id"] / "report.md").exists()


# The child for the Ctrl-C test: each of the report's analyses (writer._guarded) takes 0.5 s
# more and logs when it starts, so the report is long enough to be stopped in its middle.
SLOW_REPORT = """
import sys, time
from tasks.benchmarks.carryon.report import writer
log = open(sys.argv[1], "a", buffering=1)
real = writer._guarded
def slow(fn, *specs):
    log.write(f"{time.time()} {specs[0][0]}\\n")
    time.sleep(0.5)
    return real(fn, *specs)
writer._guarded = slow
sys.argv = ["carryon", *sys.argv[2:]]
from flows.cli import main
main()
"""


@pytest.mark.slow
def test_ctrl_c_while_the_report_is_written_ends_the_run_and_the_rerun_writes_it(ran):
    tmp, cfg, _ = ran
    reports = tmp / "home" / "reports"
    for folder in reports.iterdir():  # no report to keep: the next run writes one
        if not folder.name.startswith("."):
            shutil.rmtree(folder)
    log = tmp / "analyses.log"
    log.write_text("")
    out = tmp / "ctrl-c.out"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_REPORT, str(log), "run", "--config",
                             str(cfg)], cwd=ROOT, env=_env(tmp), stdout=open(out, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not log.read_text().strip():  # the report's first analysis has started
            assert proc.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, "the report never started"
            time.sleep(0.05)
        signalled = time.time()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.read_text()
    assert rc == 130, text[-3000:]
    assert "run stopped: interrupted by SIGINT" in text and "Traceback" not in text
    # The report stopped at its next checkpoint: at most the analysis under way when the
    # signal came was started after it (a report left to finish starts twenty more).
    started = [float(ln.split()[0]) for ln in log.read_text().splitlines()]
    assert sum(t > signalled for t in started) <= 1
    stopped = _runs(tmp)[-1]
    assert stopped["status"] == "interrupted"
    assert not (reports / stopped["run_id"]).exists()  # whole or not at all
    assert not [p for p in reports.iterdir() if p.name.startswith(f".{stopped['run_id']}")]

    p = carryon(tmp, "run", "--config", str(cfg))
    assert p.returncode == 0, p.stderr[-3000:]
    rerun = _runs(tmp)[-1]
    assert rerun["status"] == "succeeded"
    assert (reports / rerun["run_id"] / "report.md").exists()
    assert "[report] inputs unchanged" not in p.stderr
