#!/usr/bin/env bash
# Runs the whole test suite (creating .venv on first use). Extra arguments go to pytest,
# e.g. scripts/test.sh -k codec -x. `scripts/test.sh --fast` leaves out the tests marked slow
# (learning runs, multi-process jobs): the inner loop, a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export WANDB_MODE="${WANDB_MODE:-offline}"
"$SEEDLIKE_PY" -m ruff format --check .
"$SEEDLIKE_PY" -m ruff check .
if [ "${1:-}" = "--fast" ]; then
  shift
  set -- -m "not slow" "$@"
fi
"$SEEDLIKE_PY" -m pytest -q "$@"
