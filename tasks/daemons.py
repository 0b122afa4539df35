"""Small helpers for the detached servers we start and stop by pid (the local model server
and the Prefect server with its workers): their JSON records, log tails and free ports."""

from __future__ import annotations

import json
import os
import socket
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


def log_tail(log: Path, n: int = 25) -> str:
    """The last ``n`` lines of a log, for error messages."""
    try:
        return "\n".join(Path(log).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
