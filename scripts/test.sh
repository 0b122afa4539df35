#!/usr/bin/env bash
# The test suite: sets up .venv if needed, then runs pytest (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/python -m pytest "$@"
