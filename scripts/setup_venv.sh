#!/usr/bin/env bash
# Sourced by train.sh and test.sh: creates .venv if missing and (re)installs the project whenever
# setup.py changed since the last install, and sets SEEDLIKE_PY to its python. Set PYTHON to
# choose the interpreter (3.11+), or SEEDLIKE_PYTHON to use one that has seedlike installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${SEEDLIKE_PYTHON:-}" ]; then
  # An interpreter that has seedlike installed already (seedlike.train passes its own, e.g. a
  # Colab kernel's): use it rather than building .venv beside it.
  SEEDLIKE_PY="$SEEDLIKE_PYTHON"
else
  VENV="$ROOT/.venv"
  PY="${PYTHON:-python3}"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; assert sys.version_info >= (3, 11), "seedlike needs Python 3.11+"'
    echo "creating $VENV" >&2
    "$PY" -m venv "$VENV"
  fi
  STAMP="$VENV/.seedlike-install"
  WANT="$(sha256sum "$ROOT/setup.py" | cut -d' ' -f1)"
  if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "installing seedlike and its dependencies into $VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]"
    echo "$WANT" > "$STAMP"
  fi
  export PATH="$VENV/bin:$PATH"
  SEEDLIKE_PY="$VENV/bin/python"
fi
# System libraries some envs need, installed here when this runs as root with apt; otherwise the
# run that needs one stops with the command to run: the Qt 5 runtime for envpool's Procgen tasks,
# OSMesa for watch.py's MuJoCo frames without a GPU (seedlike/watch.py).
# (The list is read whole before it is searched: `ldconfig -p | grep -q` under pipefail fails
# whenever grep exits first and ldconfig gets SIGPIPE, about 1 time in 75.)
libraries="$(ldconfig -p 2>/dev/null || true)"
need_library() {  # LIBRARY PACKAGE WHAT
  if [[ "$libraries" == *"$1"* ]]; then return; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $2 ($3)" >&2
    apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 &&
        apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1; } ||
      echo "could not install $2; $3 needs: apt-get install -y --no-install-recommends $2" >&2
  fi
}
need_library libQt5Gui.so.5 libqt5gui5 "envpool's Procgen"
need_library libOSMesa.so libosmesa6 "watch.py's MuJoCo frames without a GPU"
export SEEDLIKE_PY
