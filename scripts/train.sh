#!/usr/bin/env bash
# Local training job: one learner (inference + learning) and N actor processes on this machine.
#
#   scripts/train.sh [--num_actors=2] [--config=configs/cartpole_ppo.py] [--config.x.y=v ...]
#                    [--logdir=runs/NAME] [any other learner.py flag]
#
# --config and --config.* flags go to the learner and every actor; other flags go to the learner.
# Ctrl-C (or SIGTERM) makes the learner save a checkpoint; every process started here is stopped
# before the script exits. Rerunning with the same --logdir resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export WANDB_MODE="${WANDB_MODE:-offline}"

num_actors=2
config="configs/cartpole_ppo.py"
logdir=""
config_flags=()
learner_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --num_actors=*) num_actors="${1#*=}" ;;
    --num_actors) num_actors="$2"; shift ;;
    --config=*) config="${1#*=}" ;;
    --config) config="$2"; shift ;;
    --config.*) config_flags+=("$1") ;;
    --logdir=*) logdir="${1#*=}" ;;
    --logdir) logdir="$2"; shift ;;
    *) learner_flags+=("$1") ;;
  esac
  shift
done
if [ -z "$logdir" ]; then
  logdir="runs/$(basename "$config" .py)-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$logdir"
rm -f "$logdir/server_address"

pids=()
learner_pid=""
cleanup() {
  trap - INT TERM EXIT
  if [ -n "$learner_pid" ] && kill -0 "$learner_pid" 2>/dev/null; then
    kill -TERM "$learner_pid" 2>/dev/null || true
    wait "$learner_pid" 2>/dev/null || true
  fi
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.5
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo "stopping (checkpointing)..." >&2; exit 130' INT TERM

python learner.py --config="$config" "${config_flags[@]}" --logdir="$logdir" --port=0 \
  "${learner_flags[@]}" &
learner_pid=$!

# The learner writes its address once actors can connect.
while [ ! -s "$logdir/server_address" ]; do
  if ! kill -0 "$learner_pid" 2>/dev/null; then
    wait "$learner_pid"; exit $?
  fi
  sleep 0.2
done
address="$(cat "$logdir/server_address")"
echo "learner serving on $address; starting $num_actors actors; logs in $logdir" >&2
for ((i = 0; i < num_actors; i++)); do
  python actor.py --server="$address" --actor_id="$i" --config="$config" "${config_flags[@]}" \
    > "$logdir/actor_$i.log" 2>&1 &
  pids+=($!)
done

status=0
wait "$learner_pid" || status=$?
learner_pid=""
exit "$status"
