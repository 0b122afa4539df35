"""A killed run cleans up (issue "Real inputs, end to end", item 6).

- ``carryon run`` without ``PREFECT_API_URL`` runs against a temporary Prefect server that
  dies with it: SIGKILL of the ``carryon`` process alone (not its group) leaves no process
  it started, and a normal run leaves none either (tasks/ops/ephemeral.py);
- a runs row left ``running`` by a dead process is marked ``interrupted`` by the next
  ``open_run`` on the same host (tasks/engine/run.py ``mark_interrupted``).

The end-to-end tests drive ``python -m flows.cli run`` in a subprocess against the loopback
server run as a process (``python -m tests.support.llm_server``), with no ``PREFECT_API_URL``, so the
temporary-server path is the one under test (about 10-20 s of start-up each on this box).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tasks.ops.ephemeral import MARK
from tests.support.factories import base_config
from warehouse import Warehouse
from warehouse.schema import Run

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


# ----------------------------------------------------------------------------- /proc helpers

def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], ppid [1],
    starttime [19]), or None if the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> dict[int, tuple[str, str, int]]:
    """{pid: (starttime, cmdline, parent pid)} of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, str]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        st = _stat(int(p.name))
        if st is None or st[0] == "Z":
            continue
        children.setdefault(int(st[1]), []).append(int(p.name))
        info[int(p.name)] = (st[19], int(st[1]))
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = (info[pid][0], _cmdline(pid), info[pid][1])
        todo += children.get(pid, [])
    return out


def survivors(seen: dict[int, tuple[str, str, int]]) -> dict[int, str]:
    """The processes of ``seen`` still running (same pid and start time; zombies are dead)."""
    out = {}
    for pid, (start, cmd, _) in seen.items():
        st = _stat(pid)
        if st is not None and st[0] not in ("Z", "X") and st[19] == start:
            out[pid] = cmd
    return out


def wait_gone(seen: dict, timeout: float = 10.0) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (left := survivors(seen)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# ----------------------------------------------------------------------------- processes

@pytest.fixture
def llm_process(tmp_path):
    """The loopback server as a process: (api_base, stats(), configure(**body))."""
    port_file = tmp_path / "llm.port"
    proc = subprocess.Popen([PY, "-m", "tests.support.llm_server", "--port", "0", "--port-file", str(port_file)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "loopback server did not start"
        time.sleep(0.1)
    base = f"http://127.0.0.1:{int(port_file.read_text())}"

    def stats() -> dict:
        with urllib.request.urlopen(f"{base}/_stats", timeout=5) as r:
            return json.load(r)

    def configure(**body) -> None:
        req = urllib.request.Request(f"{base}/_config", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()

    yield f"{base}/v1", stats, configure
    proc.kill()
    proc.wait(10)


def _env(tmp_path: Path) -> dict:
    # No PREFECT_* or CARRYON_* variable of the test process (the session's Prefect test
    # harness sets several): the child must see a user's plain environment.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "CARRYON_"))}
    env.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1",
               PREFECT_HOME=str(tmp_path / "prefect-home"))  # its own SQLite database
    return env


def _config(tmp_path: Path, api_base: str, **defaults) -> Path:
    cfg = base_config(api_base, tmp_path / "home")
    cfg["dataset"]["limit"] = 1
    cfg["models"]["defaults"].update(defaults)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _start(config: Path, tmp_path: Path, log: Path) -> subprocess.Popen:
    # Its own session so a failed test can clean up the group; the test itself kills only
    # the carryon process, as an OOM killer or `kill -9 <pid>` would.
    return subprocess.Popen([PY, "-m", "flows.cli", "run", "--config", str(config), "--stages", "checklists"],
                            cwd=ROOT, env=_env(tmp_path), stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _cleanup(proc: subprocess.Popen, seen: dict) -> None:
    if proc.poll() is None:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(10)
    for pid in survivors(seen):  # never leave our own orphans behind, even on failure
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _merge(seen: dict, now: dict[int, tuple[str, str, int]]) -> None:
    """Add ``now`` to ``seen`` without forgetting a command line: a process that is exiting
    (or between fork and exec) reads as an empty /proc/<pid>/cmdline, so the last look at the
    temporary server can say "" although an earlier one saw its marker. The latest non-empty
    command line wins (between fork and exec a child still shows its parent's)."""
    for pid, (start, cmd, ppid) in now.items():
        old = seen.get(pid)
        if old is None or old[0] != start or cmd:
            seen[pid] = (start, cmd, ppid)


def _watch(proc: subprocess.Popen, seen: dict, until, log: Path, timeout: float = 240,
           may_exit: bool = False) -> None:
    """Collect proc's descendants into ``seen`` until ``until()`` is true."""
    deadline = time.monotonic() + timeout
    while not until():
        _merge(seen, descendants(proc.pid))
        if proc.poll() is not None and not may_exit:
            pytest.fail(f"carryon run ended (rc {proc.returncode}) too early:\n{log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)
    _merge(seen, descendants(proc.pid))


def _servers(seen: dict) -> list[int]:
    """The temporary Prefect servers among ``seen``. A child the server forks (it runs ``file``
    and ``uname`` as it starts) shows the server's command line until it execs, and one that
    exits before a later look keeps it in ``seen``: a marked process whose parent is marked
    too is such a child, not a second server."""
    marked = {pid for pid, (_, cmd, _) in seen.items() if MARK in cmd}
    return [pid for pid in marked if seen[pid][2] not in marked]


def test_a_forked_child_of_the_server_is_not_a_second_server():
    """What a look at /proc can catch as the server starts: its child between fork and exec,
    still showing the server's command line (under load, the flake this rule removed)."""
    seen = {100: ("1", f"python {MARK} boot", 10), 101: ("2", f"python {MARK} boot", 100),
            102: ("3", "python -m tasks.gateway.worker", 10)}
    assert _servers(seen) == [100]
    seen[103] = ("4", f"python {MARK} boot", 10)  # a second server of the run: counted
    assert sorted(_servers(seen)) == [100, 103]


# ----------------------------------------------------------------------------- end to end

@pytest.mark.e2e
def test_sigkill_leaves_no_orphan_and_the_next_run_marks_it_interrupted(llm_process, tmp_path):
    api_base, stats, configure = llm_process
    configure(latency_s=4.0)  # each call is held 4 s: the run is surely mid-stage at the kill
    config = _config(tmp_path, api_base, timeout_s=30)
    log = tmp_path / "killed.log"
    proc = _start(config, tmp_path, log)
    seen: dict = {}
    try:
        _watch(proc, seen, lambda: stats().get("total", 0) > 0, log)
        servers = _servers(seen)
        assert len(servers) == 1, f"expected our one temporary Prefect server among {seen}"
        # Prefect did not start a server of its own: every process still running is ours (the
        # temporary server, and the gateway's worker processes, which must die with the run).
        # Short-lived helpers come and go (the server runs `file` and `uname` as it starts):
        # the server's own children are its business.
        running = descendants(proc.pid)
        assert all(MARK in cmd or "tasks.gateway.worker" in cmd or ppid in servers
                   for _, cmd, ppid in running.values()), running
        wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
        rows = wh.query("SELECT run_id, status, pid, host FROM runs")
        assert rows and rows[0]["status"] == "running" and rows[0]["pid"] == proc.pid, rows
        assert rows[0]["host"] == socket.gethostname()

        os.kill(proc.pid, signal.SIGKILL)  # the process only, not its group
        proc.wait(10)
        left = wait_gone(seen, timeout=5.0)
        assert left == {}, f"processes of the killed run survive: {left}"
    finally:
        _cleanup(proc, seen)

    # The next start finds the dead row and says so.
    from tasks.engine.run import finish_run, open_run

    configure(latency_s=0.0)
    ctx = open_run(str(config), "checklists", limit=1)
    try:
        killed = wh.query("SELECT * FROM runs WHERE run_id = ?", [rows[0]["run_id"]])[0]
        assert killed["status"] == "interrupted"
        assert killed["finished"] is not None
        assert killed["error"].startswith(f"interrupted: found by run {ctx.run_id} at ")
        assert f"the process (pid {proc.pid} on host {socket.gethostname()}) is gone" in killed["error"]
        mine = wh.query("SELECT status, pid FROM runs WHERE run_id = ?", [ctx.run_id])[0]
        assert mine == {"status": "running", "pid": os.getpid()}
    finally:
        finish_run(ctx, "succeeded")


@pytest.mark.e2e
def test_completed_run_leaves_no_orphan(llm_process, tmp_path):
    """Twice: the first run sends its calls through the gateway workers and the temporary
    Prefect server it started as it began, and leaves neither behind; the second finds every
    stage unchanged and answers without starting either (tasks/engine/run.py
    ``finish_if_unchanged``)."""
    api_base, _, _ = llm_process
    config = _config(tmp_path, api_base)
    for n, skipped in ((1, False), (2, True)):
        log = tmp_path / f"normal-{n}.log"
        proc = _start(config, tmp_path, log)
        seen: dict = {}
        try:
            _watch(proc, seen, lambda: proc.poll() is not None, log, may_exit=True)
            out = log.read_text()
            assert proc.returncode == 0, out[-3000:]
            workers = [cmd for _, cmd, _ in seen.values() if "tasks.gateway.worker" in cmd]
            if skipped:
                assert not _servers(seen) and not workers, seen
            else:
                assert len(_servers(seen)) == 1, f"expected our temporary Prefect server among {seen}"
                assert workers, seen
            assert wait_gone(seen, timeout=2.0) == {}
            assert ("inputs unchanged since run" in out) == skipped, out[-3000:]
            if not skipped:  # (a run that ran no stage prints no stage seconds)
                assert 'stage seconds: {"intents": ' in out and '"checklists": ' in out, out[-3000:]
        finally:
            _cleanup(proc, seen)
    wh = Warehouse(tmp_path / "home" / "warehouse.duckdb")
    assert [r["status"] for r in wh.query("SELECT status FROM runs")] == ["succeeded"] * 2


# ----------------------------------------------------------------------------- units

def test_no_temporary_server_when_an_api_url_is_set(monkeypatch):
    from tasks.ops import ephemeral

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setattr(ephemeral.subprocess, "Popen", lambda *a, **k: pytest.fail("spawned"))
    assert ephemeral.start_temporary_server() is None
    monkeypatch.delenv("PREFECT_API_URL")
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):  # e.g. a profile
        assert ephemeral.start_temporary_server() is None
    with temporary_settings(updates={PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
        assert ephemeral.start_temporary_server() is None


def test_boot_sets_a_parent_death_signal():
    """The bootstrap asks for SIGKILL on its parent's death: killing the parent (alone) takes
    the child along. (uvicorn replaced by a sleep, to test just the bootstrap.)"""
    from tasks.ops.ephemeral import BOOT

    boot = BOOT.replace('runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)',
                        "import time; time.sleep(60)")
    assert boot != BOOT
    code = ("import os, subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', {boot!r}, str(os.getpid())]); "
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    seen: dict = {}
    try:
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # the child is past prctl
        seen = descendants(parent.pid)
        assert list(seen) == [child] and MARK in seen[child][1]
        parent.kill()
        parent.wait(10)
        assert wait_gone(seen, timeout=5.0) == {}
    finally:
        _cleanup(parent, seen)


def _row(run_id: str, pid, host, started, status="running") -> dict:
    return {"run_id": run_id, "config_hash": "h", "config_json": "{}", "seed": 0, "stages": "all",
            "started": started, "status": status, "pid": pid, "host": host}


def test_mark_interrupted_only_dead_processes_of_this_host(tmp_path):
    from tasks.engine.run import mark_interrupted

    dead = subprocess.Popen(["true"])
    dead.wait()
    now = dt.datetime.now(dt.timezone.utc)
    host = socket.gethostname()
    wh = Warehouse(tmp_path / "w.duckdb").init()
    wh.write(Run, [
        _row("dead", dead.pid, host, now),
        _row("alive", os.getpid(), host, now),  # this very process: still running it
        _row("reused", os.getpid(), host, now - dt.timedelta(days=365)),  # pid reused since
        _row("elsewhere", dead.pid, "another-host", now),
        _row("legacy", None, None, now),  # written before pids were recorded
        _row("done", dead.pid, host, now, status="succeeded"),
    ])
    found = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert sorted(mark_interrupted(wh, "new-run", found)) == ["dead", "reused"]
    rows = {r["run_id"]: r for r in wh.query("SELECT * FROM runs")}
    assert {k: r["status"] for k, r in rows.items()} == {
        "dead": "interrupted", "alive": "running", "reused": "interrupted",
        "elsewhere": "running", "legacy": "running", "done": "succeeded"}
    assert rows["dead"]["error"] == (f"interrupted: found by run new-run at 2026-01-02T03:04:05+00:00; "
                                     f"the process (pid {dead.pid} on host {host}) is gone")
    assert rows["dead"]["finished"] == found and rows["alive"]["finished"] is None
    assert mark_interrupted(wh, "again") == []  # idempotent
