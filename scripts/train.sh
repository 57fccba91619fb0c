#!/usr/bin/env bash
# Local training job: one learner (inference + learning) and N actor processes on this machine.
#
#   scripts/train.sh [--num_actors=2] [--max_actor_restarts=3] [--config=configs/cartpole_ppo.py]
#                    [--config.x.y=v ...] [--logdir=runs/NAME] [any other learner.py flag]
#
# --config and --config.* flags go to the learner and every actor; other flags go to the learner.
# Ctrl-C (or SIGTERM) makes the learner save a checkpoint; every process started here is stopped
# before the script exits. Rerunning with the same --logdir resumes.
#
# An actor that exits with an error has the end of its log printed and is restarted, at most
# --max_actor_restarts times each; one that fails more often, or that the server rejected (exit
# status 2: it sends what the learner does not accept, and would again), stops the whole job
# (exit status 1), since the learner would otherwise wait for steps that never come.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export WANDB_MODE="${WANDB_MODE:-offline}"

num_actors=2
max_actor_restarts=3
config="configs/cartpole_ppo.py"
logdir=""
config_flags=()
learner_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --num_actors=*) num_actors="${1#*=}" ;;
    --num_actors) num_actors="$2"; shift ;;
    --max_actor_restarts=*) max_actor_restarts="${1#*=}" ;;
    --max_actor_restarts) max_actor_restarts="$2"; shift ;;
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

"$SEEDLIKE_PY" learner.py --config="$config" "${config_flags[@]}" --logdir="$logdir" --port=0 \
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
restarts=()
start_actor() {
  "$SEEDLIKE_PY" actor.py --server="$address" --actor_id="$1" --config="$config" "${config_flags[@]}" \
    >> "$logdir/actor_$1.log" 2>&1 &
  pids[$1]=$!
}
for ((i = 0; i < num_actors; i++)); do
  restarts[i]=0
  start_actor "$i"
done

# Watch the actors while the learner runs (actors exit 0 when training is over).
while kill -0 "$learner_pid" 2>/dev/null; do
  for ((i = 0; i < num_actors; i++)); do
    pid="${pids[i]}"
    if [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null; then continue; fi
    code=0
    wait "$pid" || code=$?
    pids[i]=""
    if [ "$code" -eq 0 ] || ! kill -0 "$learner_pid" 2>/dev/null; then continue; fi
    echo "actor $i exited with status $code; the end of $logdir/actor_$i.log:" >&2
    tail -n 5 "$logdir/actor_$i.log" | sed 's/^/  | /' >&2
    if [ "$code" -eq 2 ] || [ "${restarts[i]}" -ge "$max_actor_restarts" ]; then
      echo "stopping the job: actor $i cannot run (restarted ${restarts[i]} of" \
        "--max_actor_restarts=$max_actor_restarts times); fix the error above and rerun with" \
        "--logdir=$logdir to resume" >&2
      exit 1
    fi
    restarts[i]=$((restarts[i] + 1))
    echo "restarting actor $i (${restarts[i]} of $max_actor_restarts)" >&2
    echo "--- restart ${restarts[i]} ---" >> "$logdir/actor_$i.log"
    start_actor "$i"
  done
  sleep 1
done

status=0
wait "$learner_pid" || status=$?
learner_pid=""
exit "$status"
