#!/usr/bin/env bash
# Trains one run through a sequence of environments: each stage resumes the previous stage's
# checkpoint in the same --logdir with another env, which must have the same observation and
# action spaces (an incompatible one fails the restore with the layer and shapes named).
#
#   scripts/curriculum.sh --stages=MiniGrid-DoorKey-5x5-v0:500000,MiniGrid-DoorKey-8x8-v0:2000000 \
#       --config=configs/minigrid_doorkey_lstm.py [--logdir=runs/NAME] [any scripts/train.sh flag]
#
# ENV:STEPS ends the stage when the run's env-step counter (cumulative over stages) reaches STEPS.
# Rerunning the same command with the same --logdir resumes: a finished stage ends right after its
# restore.
# Ctrl-C (or SIGTERM) checkpoints and stops without starting the next stage.
set -euo pipefail
cd "$(dirname "$0")/.."

# Only --stages and --logdir (fixed once for all stages) are read here; the rest is train.sh's.
stages=""
logdir=""
passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stages=*) stages="${1#*=}" ;;
    --stages) stages="$2"; shift ;;
    --logdir=*) logdir="${1#*=}" ;;
    --logdir) logdir="$2"; shift ;;
    --config.env.name=* | --config.total_env_steps=*)
      echo "curriculum.sh: $1 conflicts with --stages, which sets both per stage" >&2; exit 2 ;;
    *) passthrough+=("$1") ;;
  esac
  shift
done
if [ -z "$stages" ]; then
  echo "curriculum.sh: --stages=ENV:STEPS[,ENV:STEPS...] is required" >&2; exit 2
fi
if [ -z "$logdir" ]; then
  logdir="runs/curriculum-$(date +%Y%m%d-%H%M%S)"
fi

IFS=',' read -r -a stage_list <<< "$stages"
envs=()
ends=()
previous=0
for stage in "${stage_list[@]}"; do
  env="${stage%:*}"
  steps="${stage##*:}"
  if [ "$env" = "$stage" ] || ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -le "$previous" ]; then
    echo "curriculum.sh: bad stage '$stage': want ENV:STEPS with STEPS increasing" >&2; exit 2
  fi
  envs+=("$env")
  ends+=("$steps")
  previous="$steps"
done

# train.sh runs in the background so a SIGTERM to this script reaches it at once (bash runs traps
# only between foreground commands); it checkpoints, and no later stage starts.
child=""
stop() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" || true; fi
  exit 130
}
trap stop INT TERM
for i in "${!envs[@]}"; do
  echo "curriculum: ${envs[i]} until env step ${ends[i]} (logdir $logdir)" >&2
  scripts/train.sh --logdir="$logdir" --config.env.name="${envs[i]}" \
    --config.total_env_steps="${ends[i]}" "${passthrough[@]}" &
  child=$!
  status=0
  wait "$child" || status=$?
  child=""
  if [ "$status" -ne 0 ]; then exit "$status"; fi
done
