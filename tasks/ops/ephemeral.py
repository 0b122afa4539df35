"""A temporary Prefect server that dies with the process that started it.

With no ``PREFECT_API_URL`` configured, Prefect spawns a temporary ("ephemeral") uvicorn
server on first use and stops it from an ``atexit`` hook, so a ``carryon run`` killed with
SIGKILL (or SIGTERM, which skips ``atexit`` too) leaves that server running: one orphan per
kill. Prefect spawns it from whichever thread first needs the API (the log and event worker
threads among them), so Linux's parent-death signal cannot simply be added there: it fires
when the *thread* that forked the child exits, not the process.

``start_temporary_server()`` starts the same server instead (the command and environment of
``prefect.server.api.server.SubprocessASGIServer``), from the calling (main) thread and
before the flow's modules are imported, so the server's start-up overlaps those imports.
Its child is a small bootstrap that asks the kernel for SIGKILL when the parent dies
(``prctl(PR_SET_PDEATHSIG)``), exits if the parent already died before that took effect,
then runs uvicorn in the same interpreter (no second exec). ``PREFECT_API_URL`` then points
at it in this process (and whatever it spawns), so no Prefect code path starts a second
server, and the client never imports the server's modules (which the ephemeral path does).

It stops the way Prefect's does: an ``atexit`` hook (TERM, then KILL after 5 s), which runs
after Prefect's log and event workers have drained at interpreter shutdown.

With ``PREFECT_API_URL`` set (``carryon server up``; a worker's flow-run process) or
ephemeral mode off, nothing is started and Prefect behaves as always. Without ``prctl``
(not Linux) the server is still started and stopped at exit; only the kill guarantee is lost.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tasks.ops.daemons import HOST, free_port

# The child's program: ``python -c BOOT <parent pid> <uvicorn args...>``. The first line
# marks its cmdline, so tests (and people) can find it in /proc.
MARK = "carryon-temporary-prefect-server"
BOOT = f"""# {MARK}
import runpy, sys
from tasks.ops.parent_death import die_with_parent
die_with_parent(int(sys.argv[1]))
sys.argv = ["uvicorn", *sys.argv[2:]]
runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)
"""


class TemporaryServerError(RuntimeError):
    """The temporary Prefect server did not come up."""


def _settings():
    from prefect.settings import get_current_settings

    return get_current_settings()


def needed() -> bool:
    """True when Prefect would start an ephemeral server: no API URL in the environment or
    the active profile, and ephemeral mode allowed."""
    if os.environ.get("PREFECT_API_URL"):
        return False  # without importing Prefect's settings
    s = _settings()
    return not s.api.url and bool(s.server.ephemeral.enabled)


def _refresh_prefect_settings() -> None:
    """Make an environment change visible to every thread (Prefect reads its process-wide
    settings once, at import)."""
    if "prefect.context" in sys.modules:
        sys.modules["prefect.context"].refresh_global_settings_context()


class TemporaryServer:
    def __init__(self, startup_timeout_s: float | None = None):
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._prior_env: dict[str, str | None] = {}

    @property
    def api_url(self) -> str:
        return f"http://{HOST}:{self.port}/api"

    def _spawn(self) -> None:
        self.port = free_port()
        app_dir = Path(importlib.util.find_spec("prefect").origin).parent.parent
        cmd = [sys.executable, "-c", BOOT, str(os.getpid()),
               "--app-dir", str(app_dir), "--factory", "prefect.server.api.server:create_app",
               "--host", HOST, "--port", str(self.port), "--log-level", "error",
               "--lifespan", "on"]
        env = {**os.environ, **_settings().to_environment_variables(exclude_unset=True),
               "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}
        # What start() set for this process is not for the server (on a respawn).
        for var in ("PREFECT_API_URL", "PREFECT_UI_URL"):
            env.pop(var, None)
        if self._prior_env.get("PREFECT_UI_URL") is not None:
            env["PREFECT_UI_URL"] = self._prior_env["PREFECT_UI_URL"]
        # A session of its own: a terminal's Ctrl-C (sent to the whole process group) is for
        # the run, which stops cleanly and stops this server after (tasks/ops/interrupt.py).
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def start(self) -> "TemporaryServer":
        """Spawn the server and point PREFECT_API_URL at it; returns at once."""
        self._spawn()
        self._prior_env = {v: os.environ.get(v) for v in ("PREFECT_API_URL", "PREFECT_UI_URL")}
        os.environ["PREFECT_API_URL"] = self.api_url
        _OURS.add(self.api_url)
        if self._prior_env["PREFECT_UI_URL"] is None:
            os.environ["PREFECT_UI_URL"] = ""  # it serves no UI: no "View at <dead link>" lines
        _refresh_prefect_settings()
        atexit.register(self.stop)
        print(f"Starting temporary Prefect server on http://{HOST}:{self.port} "
              "(it stops with this process)", file=sys.stderr, flush=True)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self) -> None:
        """Wait until the server answers /health (TemporaryServerError if it dies or the
        start-up timeout, Prefect's PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, passes)."""
        timeout = self.startup_timeout_s or float(_settings().server.ephemeral.startup_timeout_seconds)
        deadline = time.monotonic() + timeout
        retries = 3
        while not self.healthy():
            if self.proc.poll() is not None:
                if self.proc.returncode == 3 and retries:  # uvicorn: the port was taken meanwhile
                    retries -= 1
                    self._spawn()
                    os.environ["PREFECT_API_URL"] = self.api_url
                    _refresh_prefect_settings()
                    continue
                code = self.proc.returncode
                self.stop()
                raise TemporaryServerError(f"the temporary Prefect server exited with code {code} "
                                           "before it was ready (its output is above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TemporaryServerError(
                    f"the temporary Prefect server did not answer within {timeout:g} s "
                    "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
            time.sleep(0.1)

    def stop(self, grace_s: float = 5.0) -> None:
        """TERM, then KILL after grace_s; restore PREFECT_API_URL. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if os.environ.get("PREFECT_API_URL") == self.api_url:
            for var, value in self._prior_env.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
            _refresh_prefect_settings()


# API URLs of temporary servers this process started (their PREFECT_API_URL is not the user's).
_OURS: set[str] = set()


def long_lived_api_url() -> str | None:
    """The Prefect API in the environment when it is a long-lived server (``carryon server
    up``, a deployment's worker), not the temporary one this process started; else None."""
    url = os.environ.get("PREFECT_API_URL")
    return url if url and url not in _OURS else None


def start_temporary_server(startup_timeout_s: float | None = None) -> TemporaryServer | None:
    """Start the temporary server if Prefect would otherwise start its own (see ``needed``);
    call ``wait_ready()`` on the result before the first API call. None when an API URL is
    configured or ephemeral mode is off.

    Call both from the main thread: the parent-death signal fires when the thread that
    spawned the server exits, and the main thread lives as long as the process."""
    return TemporaryServer(startup_timeout_s).start() if needed() else None
