#!/usr/bin/env bash
# One seedlike run as a SLURM batch job: `python -m seedlike.launch.slurm` writes the job script
# (its #SBATCH lines and the SEEDLIKE_* settings below) that runs this on the job's first node.
#
# The learner runs here, in the batch step; the actors run as one job step of SEEDLIKE_ACTORS
# tasks over the allocation (task k is actor k). On one node they meet on loopback; over several,
# on the learner node's address with the run's credentials (<logdir>/credentials, made at the
# first start, the learner's certificate renewed for whichever node runs it after a requeue).
#
# Stopping: USR1 (sbatch --signal before the time limit, or `scancel --signal=USR1 --batch JOB`
# to preempt) makes the learner checkpoint, then the job requeues itself and its next start
# resumes from that checkpoint. TERM (`scancel JOB`, the time limit) checkpoints and ends the job.
# The learner's stop grace is kept under SLURM's KillWait by the launcher. The learner finishing
# its run ends the job; the actors' step ending while the learner trains stops the job with one
# line naming why (a crashed actor is restarted up to 3 times, as scripts/train.sh does).
set -uo pipefail
: "${SEEDLIKE_ROOT:?}" "${SEEDLIKE_PY:?}" "${SEEDLIKE_LOGDIR:?}" "${SEEDLIKE_CONFIG:?}"
: "${SEEDLIKE_ACTORS:?}" "${SEEDLIKE_CPUS_PER_ACTOR:?}"
cd "$SEEDLIKE_ROOT" || exit 1
start="${SLURM_RESTART_COUNT:-0}"
logs="$SEEDLIKE_LOGDIR/slurm"
mkdir -p "$logs"
say() { echo "$(date +%H:%M:%S) seedlike job $SLURM_JOB_ID (start $start): $*"; }
mapfile -t config_flags < <(printf '%s' "${SEEDLIKE_CONFIG_FLAGS:-}" | sed '/^$/d')

stop_request=""
trap '[ -n "$stop_request" ] || stop_request=requeue' USR1  # a cancel under way stays one
trap 'stop_request=${stop_request:-stop}' TERM INT

nodes="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l)"
learner_flags=(--bind=127.0.0.1 --config.server.trust_actor_ids=true)
actor_credentials=""
if [ "$nodes" -gt 1 ]; then
  credentials="$SEEDLIKE_LOGDIR/credentials"
  host="$(hostname)"
  if [ ! -f "$credentials/ca.pem" ]; then
    names=()
    for ((k = 0; k < SEEDLIKE_ACTORS; k++)); do names+=("actor-$k"); done
    scripts/make_credentials.sh "$credentials" "$host" >> "$logs/credentials.log" 2>&1 &&
      scripts/make_credentials.sh --actors "$credentials" "${names[@]}" >> "$logs/credentials.log" 2>&1 ||
      { say "cannot make the run's credentials ($logs/credentials.log); stopping"; exit 1; }
  else
    scripts/make_credentials.sh --rotate "$credentials" "$host" >> "$logs/credentials.log" 2>&1 ||
      { say "cannot renew the learner's certificate ($logs/credentials.log); stopping"; exit 1; }
  fi
  learner_flags=(--bind=0.0.0.0 "--config.transport.credentials=$credentials")
  actor_credentials="$credentials/actors"
fi

rm -f "$SEEDLIKE_LOGDIR/server_address"
say "learner on $(hostname), $SEEDLIKE_ACTORS actors over $nodes node(s); logs in $logs"
"$SEEDLIKE_PY" learner.py --config="$SEEDLIKE_CONFIG" --logdir="$SEEDLIKE_LOGDIR" --port=0 \
  "${learner_flags[@]}" "${config_flags[@]}" >> "$logs/learner.log" 2>&1 &
learner=$!
while [ ! -s "$SEEDLIKE_LOGDIR/server_address" ] && [ -z "$stop_request" ]; do
  if ! kill -0 "$learner" 2>/dev/null; then
    wait "$learner"
    code=$?
    say "the learner exited with status $code before serving: $(tail -n 1 "$logs/learner.log")"
    exit "$code"
  fi
  sleep 0.2
done
actors=""
export SEEDLIKE_ACTOR_CREDENTIALS="$actor_credentials"
if [ -z "$stop_request" ]; then
  address="$(cat "$SEEDLIKE_LOGDIR/server_address")"
  if [ "$nodes" -gt 1 ]; then address="$(hostname):${address##*:}"; fi
  # One task per actor; a crashed actor is restarted up to 3 times, one the learner rejected
  # (status 2: it would be again) is not.
  # The job's GPUs are the learner's: the actors' step takes none of them (srun --gres=none).
  gres=()
  if [ "${SEEDLIKE_GPUS:-0}" -gt 0 ]; then gres=(--gres=none); fi
  srun --ntasks="$SEEDLIKE_ACTORS" --cpus-per-task="$SEEDLIKE_CPUS_PER_ACTOR" "${gres[@]}" \
    --kill-on-bad-exit=0 --output="$logs/actor_%t.log" --open-mode=append \
    bash -c '
      flags=("${@:2}")
      # An actor of 2 cores or more sizes its envs from them (actor.py --cores, as train.sh does)
      if [ "$SEEDLIKE_CPUS_PER_ACTOR" -ge 2 ]; then flags+=("--cores=$SEEDLIKE_CPUS_PER_ACTOR"); fi
      if [ -n "$SEEDLIKE_ACTOR_CREDENTIALS" ]; then
        flags+=("--config.transport.credentials=$SEEDLIKE_ACTOR_CREDENTIALS/actor-$SLURM_PROCID")
      fi
      for attempt in 0 1 2 3; do
        "$SEEDLIKE_PY" actor.py --server="$1" --actor_id="$SLURM_PROCID" "${flags[@]}"
        code=$?
        if [ "$code" -eq 0 ] || [ "$code" -eq 2 ]; then exit "$code"; fi
        echo "--- restart $((attempt + 1)) (exit status $code) ---"
      done
      exit "$code"' _ "$address" --config="$SEEDLIKE_CONFIG" "${config_flags[@]}" &
  actors=$!
fi

# Until the learner finishes, a stop is requested, or the actors' step fails under a live learner.
# (Actors exit 0 when the learner ends training, before its final checkpoint: that is no failure.)
failed=""
while [ -z "$stop_request" ] && kill -0 "$learner" 2>/dev/null; do
  if [ -n "$actors" ] && ! kill -0 "$actors" 2>/dev/null; then
    wait "$actors"
    code=$?
    actors=""
    if [ "$code" -ne 0 ]; then
      last="$(cat "$logs"/actor_*.log 2>/dev/null | grep -v '^---' | tail -n 1)"
      say "the actors' step ended with status $code while the learner trains (last actor line: $last); stopping the job"
      failed=1
      break
    fi
  fi
  sleep 1
done

# The learner checkpoints and exits (within its stop grace, under SLURM's KillWait).
# (A wait that a signal interrupts returns early: each loop waits again until the process ended.)
if kill -0 "$learner" 2>/dev/null; then kill -TERM "$learner"; fi
while :; do
  wait "$learner"
  learner_code=$?
  kill -0 "$learner" 2>/dev/null || break
done
if [ -n "$actors" ]; then
  kill -TERM "$actors" 2>/dev/null  # srun passes it to every actor task
  while kill -0 "$actors" 2>/dev/null; do wait "$actors"; done
fi
if [ "$stop_request" = requeue ]; then
  say "checkpointed (learner exit status $learner_code); requeueing: the next start resumes"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
if [ -n "$failed" ]; then exit 1; fi
if [ -n "$stop_request" ]; then
  say "stopped and checkpointed; submit the same command again to resume"
  exit 0
fi
say "the learner exited with status $learner_code"
exit "$learner_code"
