#!/usr/bin/env bash
# Runs the whole test suite (creating .venv on first use). Extra arguments go to pytest,
# e.g. scripts/test.sh -k codec -x
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export WANDB_MODE="${WANDB_MODE:-offline}"
ruff format --check .
ruff check .
python -m pytest -q "$@"
