"""Bring up (and tear down) what a deployment run needs: a local Prefect server, the work
pool, the deployments of ``prefect.yaml`` and a process worker.

``up(home)`` starts, all detached from the caller (own session, so a closing terminal does
not kill them):

- ``prefect server start --host 127.0.0.1 --port P`` with ``PREFECT_HOME=<home>/prefect``
  (its SQLite database lives there; set ``PREFECT_API_DATABASE_CONNECTION_URL`` to use
  PostgreSQL instead) and analytics off (this machine has no internet);
- the process work pool ``carryon-pool`` (created through the API, idempotent);
- ``prefect deploy --all`` from the project root (deployments ``carryon/full`` and
  ``carryon/demo``);
- ``prefect worker start --pool carryon-pool`` with ``CARRYON_PROJECT_DIR`` set, which the
  deployments' pull step uses as the flow run's working directory.

The record ``<home>/prefect/state.json`` holds the API URL and each process's pid and log
(``<home>/prefect/*.log``); ``down(home)`` stops them by pid (TERM, then KILL) and removes it.
Only the standard library is imported at module level, so ``status`` and ``down`` are cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from tasks.ops.daemons import (  # noqa: F401 (free_port is API)
    free_port, log_tail, ours_alive, read_json, wait_ready, write_json_atomic,
)

HOST = "127.0.0.1"
POOL = "carryon-pool"
PROJECT_DIR = Path(__file__).resolve().parents[2]  # where prefect.yaml and flows/ live

# Environment every process we start gets: no telemetry (no internet here), and litellm's
# price map from the package rather than the network.
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONUNBUFFERED": "1",
}


class ServerError(RuntimeError):
    """The Prefect server, deploy or worker could not be brought up; the message says why
    and ends with the tail of the log that explains it."""


# ----------------------------------------------------------------------------- record

def prefect_dir(home: Path) -> Path:
    return Path(home) / "prefect"


def _state_path(home: Path) -> Path:
    return prefect_dir(home) / "state.json"


def read_state(home: Path) -> dict | None:
    return read_json(_state_path(home))


def _write_state(home: Path, state: dict) -> None:
    write_json_atomic(_state_path(home), state)


# ---------------------------------------------------------------------- processes

def _alive(pid: int) -> bool:
    """True if pid is a live (non-zombie) process started from prefect (guards pid reuse)."""
    return ours_alive(pid, (b"prefect",))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill(pid: int, grace_s: float = 10.0) -> None:
    """TERM the process group (we started pid as a session leader), KILL after grace_s.

    The group, not just pid: `prefect server start` runs uvicorn as a child, which can
    outlive its parent; only a recorded pid that is (or was, and its group lives on) ours
    is signalled."""
    if not _alive(pid) and not (_is_group_of_ours(pid) and _group_alive(pid)):
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 3.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid) and not _group_alive(pid):
                return
            time.sleep(0.1)


def _is_group_of_ours(pgid: int) -> bool:
    """True if some live member of process group pgid runs prefect (guards pgid reuse)."""
    proc = Path("/proc")
    if not proc.exists():
        return False
    for p in proc.iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text().split(") ", 1)[1].split()
            if int(stat[2]) == pgid and b"prefect" in (p / "cmdline").read_bytes():
                return True
        except (OSError, IndexError, ValueError):
            continue
    return False


def _spawn(cmd: list[str], log: Path, env: dict, cwd: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        out.write(f"\n=== {datetime.now(timezone.utc).isoformat()} {' '.join(cmd)}\n".encode())
        out.flush()
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env, cwd=str(cwd))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


# ---------------------------------------------------------------------------- API

def _api(api_url: str, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api_url.rstrip("/") + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def healthy(api_url: str) -> bool:
    try:
        return _api(api_url, "GET", "/health", timeout=2.0) is True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _ensure_pool(api_url: str) -> None:
    """Create the process work pool unless it exists (deploy refuses an unknown pool)."""
    from prefect.workers.process import ProcessWorker

    body = {"name": POOL, "type": "process",
            "base_job_template": ProcessWorker.get_default_base_job_template(),
            "description": "CarryOnBench: process workers (see docs/deploy.md)"}
    try:
        _api(api_url, "POST", "/work_pools/", body)
    except urllib.error.HTTPError as e:
        if e.code != 409:  # 409: it exists already, which is what we want
            raise ServerError(f"cannot create work pool {POOL}: HTTP {e.code} {e.read()[:300]!r}") from None


def online_workers(api_url: str) -> list[str]:
    """Names of the pool's workers whose heartbeat the server considers live."""
    try:
        rows = _api(api_url, "POST", f"/work_pools/{POOL}/workers/filter", {})
    except (urllib.error.URLError, OSError, ValueError):
        return []
    return sorted(w["name"] for w in rows or [] if w.get("status") == "ONLINE")


def child_env(home: Path, api_url: str | None, extra: dict | None = None) -> dict:
    """The environment of every process we start (server, deploy, workers, flow runs)."""
    env = {**os.environ, **QUIET_ENV, "PREFECT_HOME": str(prefect_dir(home)),
           "CARRYON_PROJECT_DIR": str(PROJECT_DIR)}
    # Flow runs are started by the worker as `<its python> -m prefect.engine`; keep the
    # venv's scripts first on PATH for anything that looks tools up by name.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if api_url:
        env["PREFECT_API_URL"] = api_url
    else:
        env.pop("PREFECT_API_URL", None)
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------- public API

def status(home: Path) -> dict | None:
    """The record with live flags (``server_alive``, ``healthy``, ``workers_alive``,
    ``online_workers``), or None if nothing was started under this home."""
    state = read_state(home)
    if state is None:
        return None
    state = dict(state)
    state["server_alive"] = _alive(int(state.get("server", {}).get("pid", 0)))
    state["healthy"] = state["server_alive"] and healthy(state["api_url"])
    state["workers_alive"] = {w["name"]: _alive(int(w["pid"])) for w in state.get("workers", [])}
    state["online_workers"] = online_workers(state["api_url"]) if state["healthy"] else []
    return state


def start_worker(home: Path, name: str, env: dict | None = None, limit: int | None = None,
                 poll_s: float = 5.0, wait_s: float = 120.0, wait: bool = True) -> dict:
    """Start one more detached process worker on the pool of the server recorded in ``home``
    and wait until the server sees it online. ``env`` is added to the worker's (and so its
    flow runs') environment, e.g. ``{"CARRYON_HOME": ...}`` for a worker with its own
    warehouse and cache. Returns the worker's record (also appended to state.json).
    With ``wait=False`` it returns at once; ``wait_online(home, [names])`` waits later."""
    state = read_state(home)
    if state is None or not healthy(state["api_url"]):
        raise ServerError(f"no live Prefect server recorded under {prefect_dir(home)}; run `up` first")
    proc, record = _spawn_worker(home, state, name, env, limit, poll_s)
    if wait:
        _wait_online(state["api_url"], proc, record, wait_s)
    return record


def wait_online(home: Path, names: list[str], wait_s: float = 120.0) -> None:
    """Wait until the server sees every named worker online (ServerError if one dies)."""
    state = read_state(home) or {}
    api_url = state.get("api_url", "")
    deadline = time.monotonic() + wait_s
    while not set(names) <= set(online_workers(api_url)):
        recs = {w["name"]: w for w in state.get("workers", [])}
        dead = [n for n in names if n not in recs or not _alive(int(recs[n]["pid"]))]
        if dead:
            logs = "\n".join(f"{recs[n]['log']}:\n{log_tail(Path(recs[n]['log']))}" for n in dead if n in recs)
            raise ServerError(f"worker(s) {dead} not running\n{logs}")
        if time.monotonic() > deadline:
            raise ServerError(f"worker(s) {sorted(set(names) - set(online_workers(api_url)))} "
                              f"not online after {wait_s:.0f} s")
        time.sleep(0.5)


def stop_worker(home: Path, name: str) -> bool:
    """Stop one recorded worker (TERM, then KILL); True if it was running."""
    state = read_state(home)
    if state is None:
        return False
    rec = next((w for w in state.get("workers", []) if w["name"] == name), None)
    if rec is None:
        return False
    running = _alive(int(rec["pid"]))
    _kill(int(rec["pid"]))
    state["workers"] = [w for w in state["workers"] if w["name"] != name]
    _write_state(home, state)
    return running


def _spawn_worker(home: Path, state: dict, name: str, env: dict | None, limit: int | None,
                  poll_s: float) -> tuple[subprocess.Popen, dict]:
    if any(w["name"] == name and _alive(int(w["pid"])) for w in state.get("workers", [])):
        raise ServerError(f"worker {name!r} is already running")
    log = prefect_dir(home) / f"worker-{name}.log"
    cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type", "process",
           "--name", name]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    # Heartbeats stay at Prefect's default (30 s): each is a write to the server's SQLite
    # database, and frequent ones make "database is locked" likelier under load.
    wenv = child_env(home, state["api_url"], {"PREFECT_WORKER_QUERY_SECONDS": str(poll_s), **(env or {})})
    proc = _spawn(cmd, log, wenv, PROJECT_DIR)
    record = {"name": name, "pid": proc.pid, "log": str(log), "env": sorted(env or {})}
    # Recorded at once, so `down` stops it even if waiting for it fails below.
    state = read_state(home) or state
    state["workers"] = [w for w in state.get("workers", []) if w["name"] != name] + [record]
    _write_state(home, state)
    return proc, record


def _wait_online(api_url: str, proc: subprocess.Popen, record: dict, wait_s: float) -> None:
    name, log = record["name"], Path(record["log"])
    wait_ready(lambda: name in online_workers(api_url), proc, f"worker {name!r}", log, wait_s,
               _kill, error=ServerError, poll_s=0.5)


def up(home: Path, port: int = 4200, worker: bool = True, worker_limit: int | None = None,
       poll_s: float = 5.0, timeout_s: float = 180.0) -> dict:
    """Start server, pool, deployments and a worker under ``home``; return the record.

    Idempotent: if the recorded server is alive and healthy, it is reused (deployments are
    re-applied, a missing worker restarted). Raises ServerError naming the cause and the log.
    """
    home = Path(home).expanduser().resolve()
    d = prefect_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one `up` at a time per home
        state = read_state(home)
        if state and not (_alive(int(state["server"]["pid"])) and healthy(state["api_url"])):
            down(home)  # a dead or hung leftover: clear it before starting afresh
            state = None
        if state is None:
            state = _start_server(home, port, timeout_s)
        api_url = state["api_url"]
        _ensure_pool(api_url)
        spawned = None
        if worker and not any(_alive(int(w["pid"])) for w in state.get("workers", [])):
            # The worker starts while deploy runs: each costs seconds of imports.
            spawned = _spawn_worker(home, state, "carryon-worker-1", None, worker_limit, poll_s)
        _deploy(home, api_url, timeout_s)
        if spawned:
            _wait_online(api_url, *spawned, timeout_s)
        return read_state(home)


def _start_server(home: Path, port: int, timeout_s: float) -> dict:
    if not _port_free(port):
        raise ServerError(f"port {port} on {HOST} is in use (another Prefect server?); "
                          f"choose another with --port")
    api_url = f"http://{HOST}:{port}/api"
    log = prefect_dir(home) / "server.log"
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)]
    proc = _spawn(cmd, log, child_env(home, None, {"PREFECT_UI_API_URL": api_url}), PROJECT_DIR)
    wait_ready(lambda: healthy(api_url), proc, "Prefect server", log, timeout_s, _kill,
               error=ServerError)
    state = {"api_url": api_url, "ui_url": f"http://{HOST}:{port}", "port": port,
             "home": str(home), "prefect_home": str(prefect_dir(home)), "project_dir": str(PROJECT_DIR),
             "server": {"pid": proc.pid, "log": str(log)}, "workers": [],
             "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    _write_state(home, state)
    return state


def _deploy(home: Path, api_url: str, timeout_s: float) -> None:
    """``prefect deploy --all`` from the project root, never prompting (it would hang CI)."""
    log = prefect_dir(home) / "deploy.log"
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"]
    env = child_env(home, api_url, {"PREFECT_CLI_PROMPT": "false", "COLUMNS": "200"})
    with open(log, "ab") as out:
        out.write(f"\n=== {datetime.now(timezone.utc).isoformat()} {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=str(PROJECT_DIR), timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc != 0:
        raise ServerError(f"`prefect deploy --all` failed ({rc}); {log} ends with:\n{log_tail(log)}")


def down(home: Path) -> bool:
    """Stop the workers, then the server, recorded under ``home``; remove the record.
    True if anything was running."""
    home = Path(home).expanduser().resolve()
    state = read_state(home)
    if state is None:
        return False
    pids = [int(w["pid"]) for w in state.get("workers", [])] + [int(state["server"]["pid"])]
    running = any(_alive(p) for p in pids)
    for pid in pids:  # workers first, so none is left polling a server that is gone
        _kill(pid)
    with contextlib.suppress(FileNotFoundError):
        _state_path(home).unlink()
    return running


def export_line(state: dict) -> str:
    """The shell line a user runs so `prefect ...` commands talk to this server."""
    return f"export PREFECT_API_URL={state['api_url']}"
