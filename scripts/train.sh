#!/usr/bin/env bash
# Local training job: one learner (inference + learning) and N actor processes on this machine.
#
#   scripts/train.sh [--num_actors=2] [--max_actor_restarts=3] [--config=configs/cartpole_ppo.py]
#                    [--config.x.y=v ...] [--logdir=runs/NAME] [--learners=1]
#                    [--population=1] [--actor_python=PATH] [any other learner.py flag]
#
# --config and --config.* flags go to the learner and every actor; other flags go to the learner.
# --learners=L > 1 runs L learner processes that form one learner (seedlike/runtime/distributed.py, as
# on L hosts): process k logs to <logdir>/process_k (k > 0), actor i serves learner i mod L.
# --population=N > 1 runs N independent learners in one world (docs/teams.md, "Populations"):
# member k learns from the agents of teams k, k + N, ... and logs to <logdir>/member_k; every
# actor streams to all of them. The job ends when the first member finishes (the others save).
# --actor_python runs the actors with another interpreter: a virtualenv of the env's own
# (scripts/actor_venv.sh, scripts/nmmo_venv.sh) when its package cannot share the learner's.
# Ctrl-C (or SIGTERM) makes the learner save a checkpoint; every process started here is stopped
# before the script exits. Rerunning with the same --logdir resumes.
#
# An actor that exits with an error has the end of its log printed and is restarted, at most
# --max_actor_restarts times each; one that fails more often, or that the server rejected (exit
# status 2: it sends what the learner does not accept, and would again), stops the whole job
# (exit status 1), since the learner would otherwise wait for steps that never come.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/train.sh [flags]   a local training job: a learner and its actors on this machine

  --config=FILE            experiment config (default configs/cartpole_ppo.py; configs/*.py)
  --config.KEY=VALUE       override a config value (learner and actors), e.g. --config.seed=3
  --logdir=DIR             run directory (default runs/<config>-<time>); rerun with it to resume
  --num_actors=N           actor processes (default 2; half the cores from 8 on, 32 at most);
                           from 8 cores on each actor sizes its envs from its share of the cores
                           (actor.py --cores; env.num_envs/batch_envs/num_threads given win)
  --learners=L             L learner processes forming one learner (default 1)
  --population=P           P independent learners sharing the actors' worlds (default 1)
  --max_actor_restarts=R   restarts of a crashed actor before the job stops (default 3)
  --actor_python=PATH      interpreter for the actors (an env's own virtualenv)
  -h, --help               this message

Any other flag goes to learner.py (`.venv/bin/python learner.py --helpfull` lists them).
Ctrl-C checkpoints and stops every process. docs/quickstart.md says more.
EOF
}
for arg in "$@"; do
  case "$arg" in -h | --help | -help | --helpshort) usage; exit 0 ;; esac
done
source scripts/setup_venv.sh

# Actors: 2, and one per two cores on bigger machines (at most 32; an actor's Python thread keeps
# about two cores of envs busy, RESULTS "Breakout on an accelerator host"); --num_actors overrides.
cores="$(nproc 2>/dev/null || echo 2)"
num_actors=$(( cores >= 8 ? (cores / 2 < 32 ? cores / 2 : 32) : 2 ))
learners=1
population=1
max_actor_restarts=3
config="configs/cartpole_ppo.py"
logdir=""
config_flags=()
actor_py=""
learner_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --num_actors=*) num_actors="${1#*=}" ;;
    --num_actors) num_actors="$2"; shift ;;
    --learners=*) learners="${1#*=}" ;;
    --learners) learners="$2"; shift ;;
    --population=*) population="${1#*=}" ;;
    --population) population="$2"; shift ;;
    --max_actor_restarts=*) max_actor_restarts="${1#*=}" ;;
    --max_actor_restarts) max_actor_restarts="$2"; shift ;;
    --actor_python=*) actor_py="${1#*=}" ;;
    --actor_python) actor_py="$2"; shift ;;
    --config=*) config="${1#*=}" ;;
    --config) config="$2"; shift ;;
    --config.*) config_flags+=("$1") ;;
    --logdir=*) logdir="${1#*=}" ;;
    --logdir) logdir="$2"; shift ;;
    *) learner_flags+=("$1") ;;
  esac
  shift
done
# A mistyped flag is answered with the one to write before anything starts: a near-miss of this
# script's flags or learner.py's (absl's --log_dir for --logdir), a config setting without
# "config." (seedlike/cli.py).
if [ "${#learner_flags[@]}" -gt 0 ]; then
  "$SEEDLIKE_PY" -m seedlike.cli flags \
    --own=num_actors,learners,population,max_actor_restarts,actor_python,config,logdir,bind,port \
    -- "${learner_flags[@]}" || exit 2
fi
if [ -n "$actor_py" ] && [ ! -x "$actor_py" ]; then
  echo "--actor_python=$actor_py is not an executable; make the venv first (scripts/actor_venv.sh DIR, scripts/nmmo_venv.sh)" >&2
  exit 2
fi
if [ -z "$logdir" ]; then
  logdir="runs/$(basename "$config" .py)-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$logdir"
learner_dirs=("$logdir")
for ((k = 1; k < learners; k++)); do learner_dirs[k]="$logdir/process_$k"; done
if [ "$population" -gt 1 ]; then
  if [ "$learners" -gt 1 ]; then
    echo "--population and --learners cannot be combined" >&2
    exit 2
  fi
  learners="$population"
  config_flags+=(--config.population.size="$population")
  for ((k = 0; k < population; k++)); do learner_dirs[k]="$logdir/member_$k"; done
  mkdir -p "${learner_dirs[@]}"
fi
# A run done already with this budget says so, and nothing starts.
status=0
"$SEEDLIKE_PY" -m seedlike.cli finished --logdir="${learner_dirs[0]}" --config="$config" \
  -- "${config_flags[@]}" || status=$?
if [ "$status" -eq 3 ]; then exit 0; elif [ "$status" -ne 0 ]; then exit "$status"; fi
for dir in "${learner_dirs[@]}"; do rm -f "$dir/server_address"; done
# An env stepped inside the learner's compiled program (env.backend=gymnax: seedlike.ondevice)
# has no actors: the learner is the job.
runtime="$("$SEEDLIKE_PY" -m seedlike.cli runtime --config="$config" -- "${config_flags[@]}")"
if [ "$runtime" = "device" ]; then
  if [ "$learners" -gt 1 ] || [ "$population" -gt 1 ]; then
    echo "env.backend runs on the device: one learner process (no --learners or --population)" >&2
    exit 2
  fi
  echo "the envs run on the device inside the learner's program; no actors; logs in $logdir" >&2
  exec "$SEEDLIKE_PY" learner.py --config="$config" "${config_flags[@]}" --logdir="$logdir" \
    "${learner_flags[@]}"
fi

pids=()
learner_pids=()
alive() {  # any of the given pids still running
  local pid
  for pid in "$@"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 0; fi
  done
  return 1
}
# Stopping never returns the prompt while a process of the job lives: Ctrl-C reaches the whole
# process group, and a second one (as impatient users and terminals send) used to end this script
# mid-cleanup with the learner and actors still running. A repeat within 2 s is the same request
# (the learner counts it so too); a later one stops the learner without its final checkpoint.
stop_started=0
force=""
now_ms() { local t="${EPOCHREALTIME/[.,]/}"; echo $((t / 1000)); }  # bash 5's microsecond clock
cleanup() {
  trap - EXIT
  set +e  # a sleep below that a Ctrl-C interrupts fails: that must not end the stop
  stop_started=$(now_ms)
  # Later than the learner's own REPEAT_S (2 s), so that it too takes the repeat as a new request.
  trap 'if [ $(($(now_ms) - stop_started)) -gt 2100 ] && [ -z "$force" ]; then force=1;
    echo "stopping now, without a final checkpoint (the previous one stands)..." >&2; fi' INT TERM
  local pid forced=""
  for pid in "${learner_pids[@]}"; do
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  # The learner bounds its own stop (checkpoint.stop_grace_s); a forced stop gets 5 s more.
  while alive "${learner_pids[@]}"; do
    if [ -n "$force" ] && [ -z "$forced" ]; then
      forced=$SECONDS
      for pid in "${learner_pids[@]}"; do
        if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
      done
    fi
    if [ -n "$forced" ] && [ $((SECONDS - forced)) -ge 5 ]; then
      for pid in "${learner_pids[@]}"; do
        if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
      done
    fi
    sleep 0.2
  done
  for pid in "${pids[@]}"; do
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  local waited=0
  while alive "${pids[@]}" && [ "$waited" -lt 10 ]; do sleep 0.2; waited=$((waited + 1)); done
  for pid in "${pids[@]}"; do
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  while alive "${learner_pids[@]}" "${pids[@]}"; do sleep 0.1; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo "stopping (checkpointing)..." >&2; exit 130' INT TERM

distributed_flags=()
if [ "$learners" -gt 1 ] && [ "$population" -eq 1 ]; then
  port="$("$SEEDLIKE_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  distributed_flags=(--config.distributed.num_processes="$learners"
    --config.distributed.coordinator="127.0.0.1:$port")
fi
# The actors are this script's own, on this machine: their declared ids are trusted as identities
# (server.trust_actor_ids), unless the run has credentials (each actor's certificate names it).
trust=(--config.server.trust_actor_ids=true)
for f in "${config_flags[@]}"; do
  case "$f" in --config.server.trust_actor_ids=* | --config.transport.credentials=?*) trust=() ;; esac
done
base_seed=0  # a population's member k runs with seed base_seed + k: independent learners
for f in "${config_flags[@]}"; do
  case "$f" in --config.seed=*) base_seed="${f#*=}" ;; esac
done
for ((k = 0; k < learners; k++)); do
  flags=("${distributed_flags[@]}")
  dir="$logdir"  # a multi-host run's process k > 0 adds process_k itself
  if [ "$learners" -gt 1 ] && [ "$population" -eq 1 ]; then
    flags+=(--config.distributed.process_id="$k")
  fi
  if [ "$population" -gt 1 ]; then
    flags+=(--config.seed="$((base_seed + k))")
    dir="${learner_dirs[k]}"
  fi
  "$SEEDLIKE_PY" learner.py --config="$config" "${trust[@]}" "${config_flags[@]}" "${flags[@]}" \
    --logdir="$dir" --port=0 "${learner_flags[@]}" &
  learner_pids[k]=$!
done
learner_pid="${learner_pids[0]}"

# Each learner writes its address once actors can connect.
addresses=()
for ((k = 0; k < learners; k++)); do
  while [ ! -s "${learner_dirs[k]}/server_address" ]; do
    if ! kill -0 "${learner_pids[k]}" 2>/dev/null; then
      code=0; wait "${learner_pids[k]}" || code=$?; exit "$code"
    fi
    sleep 0.2
  done
  addresses[k]="$(cat "${learner_dirs[k]}/server_address")"
done
# From 8 cores on, each actor sizes its envs from its share of the cores (actor.py --cores).
actor_cores=()
if [ "$cores" -ge 8 ]; then actor_cores=(--cores=$(( cores / num_actors > 1 ? cores / num_actors : 1 ))); fi
echo "learner serving on ${addresses[*]}; starting $num_actors actors; logs in $logdir" >&2
restarts=()
start_actor() {
  local server="${addresses[$(($1 % learners))]}"
  if [ "$population" -gt 1 ]; then server="$(IFS=,; echo "${addresses[*]}")"; fi
  "${actor_py:-$SEEDLIKE_PY}" actor.py --server="$server" --actor_id="$1" \
    --config="$config" "${actor_cores[@]}" "${config_flags[@]}" >> "$logdir/actor_$1.log" 2>&1 &
  pids[$1]=$!
}
for ((i = 0; i < num_actors; i++)); do
  restarts[i]=0
  start_actor "$i"
done

# Watch the actors while the learner runs (actors exit 0 when training is over).
while kill -0 "$learner_pid" 2>/dev/null; do
  for ((k = 1; k < learners; k++)); do
    pid="${learner_pids[k]}"
    if [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null; then continue; fi
    code=0
    wait "$pid" || code=$?
    learner_pids[k]=""
    if [ "$code" -ne 0 ]; then
      echo "learner process $k exited with status $code (${learner_dirs[k]}); stopping the job" >&2
      exit 1
    fi
    if [ "$population" -gt 1 ]; then  # the world needs every member: the others save and stop
      echo "population member $k finished; stopping the others" >&2
      exit 0
    fi
  done
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
if [ "$population" -gt 1 ]; then  # member 0 finished: the others save and stop (cleanup)
  wait "$learner_pid" || status=$?
  exit "$status"
fi
for pid in "${learner_pids[@]}"; do
  if [ -n "$pid" ]; then wait "$pid" || status=$?; fi
done
learner_pids=()
exit "$status"
