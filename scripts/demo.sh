#!/usr/bin/env bash
# The main job on a fresh machine: install (with the local model), start the local model
# server, run every stage of configs/demo.yaml, print the summary, stop the server.
#   CONFIG=path  another config (default configs/demo.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
export WITH_LOCAL=1
source scripts/setup.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 LITELLM_LOCAL_MODEL_COST_MAP=True
config="${CONFIG:-configs/demo.yaml}"
carryon=.venv/bin/carryon
started=0
if ! $carryon local-model status --config "$config" >/dev/null 2>&1; then
  echo "demo: starting the local model server (SmolLM2-135M-Instruct on llama.cpp)" >&2
  $carryon local-model start --config "$config" --port 8765 >/dev/null
  started=1
fi
cleanup() { if [ "$started" = 1 ]; then $carryon local-model stop --config "$config" >/dev/null || true; fi; }
trap cleanup EXIT
t0=$(date +%s)
$carryon run --config "$config"
echo "demo wall time (model start included): $(( $(date +%s) - t0 )) s"
