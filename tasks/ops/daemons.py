"""Small helpers for the detached servers we start and stop by pid (the local model server
and the Prefect server with its workers): their JSON records, log tails and free ports."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

HOST = "127.0.0.1"


def read_json(path: Path) -> dict | None:
    """The record at ``path``, or None if it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, record: dict) -> None:
    """Write then rename: a reader never sees half a record."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def ours_alive(pid: int, markers: tuple[bytes, ...]) -> bool:
    """True if pid is a live (non-zombie) process whose command line holds one of
    ``markers`` (where /proc exists): the check guards against pid reuse, so we never signal
    a stranger. Reaps the process first if it is our own child (else it lingers as a zombie)."""
    if pid <= 0:
        return False  # never os.kill(0 or -1, ...): those mean "process group" / "everyone"
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by someone else; the command line decides
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc (macOS): trust the pid
    try:
        if (proc / "stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False  # zombie: dead, just not reaped
        cmdline = (proc / "cmdline").read_bytes()
        return any(marker in cmdline for marker in markers)
    except (OSError, IndexError):
        return False


def log_tail(log: Path, n: int = 25) -> str:
    """The last ``n`` lines of a log, for error messages."""
    try:
        return "\n".join(Path(log).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_ready(ready, proc, what: str, log: Path, timeout_s: float, kill,
               error: type[Exception] = RuntimeError, poll_s: float = 0.3, tail: int = 25) -> None:
    """Poll ``ready()`` until it is true; if ``proc`` dies first, or ``timeout_s`` passes
    (then ``kill(proc.pid)``), raise ``error`` naming ``what`` and the log's last lines."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise error(f"{what} exited with code {proc.returncode} before it was ready; "
                        f"{log} ends with:\n{log_tail(log, tail)}")
        if time.monotonic() > deadline:
            kill(proc.pid)
            raise error(f"{what} not ready after {timeout_s:g} s; {log} ends with:\n"
                        f"{log_tail(log, tail)}")
        time.sleep(poll_s)


def port_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as servers bind (uvicorn
    does): a port whose last server just stopped (connections in TIME_WAIT) is free, one with
    a live listener is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
