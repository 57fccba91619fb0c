#!/usr/bin/env bash
# Creates a virtualenv for actors only: numpy, grpcio, protobuf, the config libraries, gymnasium and
# PettingZoo (setup.py's ACTOR_REQUIRES) and seedlike's own code, without jax or the learner's
# other packages. For envs whose packages pin versions the learner cannot share (Neural MMO wants
# numpy<2): install them here, and run the actors with this venv's python.
#
#   scripts/actor_venv.sh [DIR] [PACKAGE ...]      (DIR defaults to .actor-venv)
#   scripts/actor_venv.sh .actor-venv magent2==0.3.4 pygame-ce==2.5.8
#   .actor-venv/bin/python actor.py --server=HOST:PORT --config=configs/magent_battle.py
#
# The learner still reads the env's spec (observation shapes, agents) from the env itself, so the
# env's package must import where the learner runs too; docs/teams.md, "An actor in its own virtualenv".
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/.actor-venv}"
shift || true
PY="${PYTHON:-python3}"
if [ ! -x "$DIR/bin/python" ]; then
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "seedlike needs Python 3.11+"'
  "$PY" -m venv "$DIR"
fi
mapfile -t requires < <("$PY" - "$ROOT/setup.py" <<'PYEOF'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.Assign) and node.targets[0].id == "ACTOR_REQUIRES":
        print("\n".join(ast.literal_eval(node.value)))
PYEOF
)
# ACTOR_NUMPY replaces ACTOR_REQUIRES' numpy pin for env packages that need another numpy
# (scripts/nmmo_venv.sh: nmmo 2.1.1 needs numpy < 2).
if [ -n "${ACTOR_NUMPY:-}" ]; then requires=("${requires[@]/#numpy==*/$ACTOR_NUMPY}"); fi
"$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "${requires[@]}" "$@"
# seedlike's code without its dependency list (which names jax).
"$DIR/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$ROOT"
echo "$DIR/bin/python"
