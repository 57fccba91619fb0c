#!/usr/bin/env bash
# Runs the whole test suite (creating .venv on first use). Extra arguments go to pytest,
# e.g. scripts/test.sh -k codec -x. `scripts/test.sh --fast` leaves out the tests marked slow
# (learning runs, multi-process jobs): the inner loop, a few minutes.
#
# Two pytest workers (pytest-xdist), each taking whole files: the process tests leave a core
# idle much of the time (waiting for learners to start, for actors' steps): two workers took the
# suite from 12.5 to 7.7 minutes on 2 cores when it was smaller (docs/development.md: how long it takes now). SEEDLIKE_TEST_WORKERS=0 runs it in one process.
#
# `scripts/test.sh --cpu=MODEL [pytest arguments]` runs the tests on an emulated CPU of another
# feature set (qemu-x86_64 -cpu MODEL, e.g. EPYC-Rome: AVX2 without AVX-512; installed with
# apt-get when missing), where numerical kernels round differently: a test that compares floats
# bit for bit across computations of different shapes fails there. About 60 times slower than
# the real CPU: give it the tests to run (docs/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
# Only the repository's own files are checked: a stray script in the checkout is not the suite's.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t sources < <(git ls-files -- '*.py' '*.pyi' '*.ipynb')
else
  sources=(.)
fi
"$SEEDLIKE_PY" -m ruff format --check --force-exclude "${sources[@]}"
"$SEEDLIKE_PY" -m ruff check --force-exclude "${sources[@]}"
cpu=""
case "${1:-}" in
  --fast) shift; set -- -m "not slow" "$@" ;;
  --cpu=*) cpu="${1#*=}"; shift ;;
esac
if [ -n "$cpu" ]; then
  if ! command -v qemu-x86_64 >/dev/null; then
    echo "installing qemu-user (emulates the CPU $cpu)" >&2
    apt-get install -y -qq qemu-user >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq qemu-user >/dev/null 2>&1; } ||
      { echo "scripts/test.sh --cpu needs qemu-x86_64: apt-get install qemu-user" >&2; exit 2; }
  fi
  # Compiled programs are cached per CPU model: code compiled for another one must not load.
  export JAX_COMPILATION_CACHE_DIR="$PWD/.pytest_cache/jax-$cpu"
  exec qemu-x86_64 -cpu "$cpu" "$SEEDLIKE_PY" -m pytest -q -p no:cacheprovider "$@" \
    2> >(grep -v '^qemu-x86_64: warning: TCG doesn' >&2)
fi
workers="${SEEDLIKE_TEST_WORKERS:-2}"
if [ "$workers" -gt 0 ]; then set -- -n "$workers" --dist loadfile "$@"; fi
# -rs: a skipped test says why (no Qt here, no network namespaces there), never silently.
"$SEEDLIKE_PY" -m pytest -q -rs "$@"
