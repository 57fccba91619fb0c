#!/usr/bin/env bash
# Creates a virtualenv for Neural MMO actors: nmmo 2.1.1 plus seedlike's actor code (setup.py's
# ACTOR_REQUIRES, no jax). nmmo 2.1.1 is an sdist whose own pins (numpy 1.23.3, scipy 1.10.0,
# gymnasium 0.29.1, pettingzoo 1.24.1, vec-noise 1.1.4, ...) do not install on Python 3.11 here,
# so it is installed with --no-deps on top of versions seen working: ACTOR_REQUIRES with numpy 1.26
# instead of their numpy 2.4 (nmmo 2.1.1 calls np.in1d, which numpy 2.4 removed: event-based task
# predicates and event-log queries fail there; seedlike's actor code runs on either),
# vec-noise-numpy2 for vec-noise, and nmmo's other run-time imports. nmmo's Cython helper is
# compiled here, so a C compiler and the Python headers are needed.
#
#   scripts/nmmo_venv.sh [DIR]                      (DIR defaults to .nmmo-venv; re-running is quick)
#   .nmmo-venv/bin/python actor.py --server=HOST:PORT --config=...   (env.name=seedlike.envs.nmmo_env)
#
# The learner does not need nmmo: seedlike.envs.nmmo_env.seedlike_spaces() gives the spec without
# it. scripts/train.sh --actor_python=DIR/bin/python runs a local job's actors here.
# nmmo's sdist also installs top-level packages `tests` and `scripted`; the `tests` one would shadow
# seedlike's tests/ package, so it is removed (nmmo never imports it at run time).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/.nmmo-venv}"
# nmmo's run-time imports (besides numpy, gymnasium, pettingzoo) and what building it needs.
nmmo_deps=(
  scipy==1.17.1
  ordered-set==4.1.0
  dill==0.3.9  # nmmo wants dill<0.4
  tqdm==4.70.1
  imageio==2.38.1
  pillow==13.0.0
  vec-noise-numpy2==1.1.5
  cython==3.3.1
  setuptools==65.5.0
  wheel==0.48.0
)
# The actors' packages with numpy<2 (see above), nmmo's dependencies and seedlike's code.
ACTOR_NUMPY=numpy==1.26.4 "$ROOT/scripts/actor_venv.sh" "$DIR" "${nmmo_deps[@]}" > /dev/null
pip=("$DIR/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! "$DIR/bin/python" -c 'import importlib.metadata as m; assert m.version("nmmo") == "2.1.1"' \
    2>/dev/null; then
  # Built against the numpy installed above (no build isolation), without nmmo's own pins.
  "${pip[@]}" --no-deps --no-build-isolation --no-cache-dir nmmo==2.1.1
fi
site="$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -f "$site/tests/testhelpers.py" ] && grep -q nmmo "$site/tests/testhelpers.py"; then
  rm -rf "$site/tests"
fi
"$DIR/bin/python" -c 'import nmmo, seedlike.actor'
echo "$DIR/bin/python"
