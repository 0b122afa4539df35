#!/usr/bin/env bash
# The test suite: sets up .venv if needed, then runs pytest (extra arguments go to pytest).
# By default the fast suite: tests marked slow, e2e, local_model or browser are deselected
# (tests/conftest.py). --all runs every test (what CI runs); an explicit -m expression
# replaces the default selection.
#   bash scripts/test.sh                 # fast: unit and hermetic integration tests
#   bash scripts/test.sh --all           # everything
#   bash scripts/test.sh --all -k gateway -x
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/python -m pytest "$@"
