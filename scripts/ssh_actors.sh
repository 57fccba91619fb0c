#!/usr/bin/env bash
# Runs actors on other machines over SSH for a learner that serves them (learner.py --bind=0.0.0.0
# with --config.transport.credentials=DIR; docs/scaling-out.md).
#
#   scripts/ssh_actors.sh --hosts=actor1,actor2 --per_host=8 --server=learner.example.com:50051 \
#       --config=configs/atari_ppo.py --credentials='creds/{host}' [--remote_dir=seedlike] \
#       [--first_actor_id=0] [--logdir=runs/ssh] [--config.x=v ...]
#
# Every host needs a checkout of seedlike at --remote_dir (relative to the login directory) with
# its .venv (scripts/setup_venv.sh there) and its own actor credentials at --credentials, relative
# to --remote_dir, where "{host}" stands for the host's name: e.g. after
# `scripts/make_credentials.sh --actors creds actor1 actor2`, copy creds/actors/actor1 to actor1
# as creds/actor1 and pass --credentials='creds/{host}'. One certificate per host: the learner
# counts each host as one actor identity, however many actors it runs (docs/security.md).
# Actor ids run from --first_actor_id: host k's i-th actor is first + k * per_host + i. Each actor
# is one `ssh -tt` session (the $SSH command, ssh by default) logging to <logdir>/<host>_<id>.log;
# Ctrl-C ends the sessions, and with them the remote actors. The script exits when every actor
# has: status 0 when all ended normally (training is over), 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
SSH="${SSH:-ssh}"

hosts="" per_host=1 server="" config="configs/cartpole_ppo.py" credentials=""
remote_dir="seedlike" first_id=0 logdir="runs/ssh_actors"
config_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts=*) hosts="${1#*=}" ;;
    --per_host=*) per_host="${1#*=}" ;;
    --server=*) server="${1#*=}" ;;
    --config=*) config="${1#*=}" ;;
    --credentials=*) credentials="${1#*=}" ;;
    --remote_dir=*) remote_dir="${1#*=}" ;;
    --first_actor_id=*) first_id="${1#*=}" ;;
    --logdir=*) logdir="${1#*=}" ;;
    --config.*) config_flags+=("$1") ;;
    *) echo "unknown flag $1 (see the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$hosts" ] || [ -z "$server" ]; then
  echo "usage: $0 --hosts=h1,h2 --server=LEARNER:PORT [--per_host=N] [--credentials=DIR] ..." >&2
  exit 2
fi
mkdir -p "$logdir"

pids=()
stop() {
  trap - INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait
  exit 130
}
trap stop INT TERM

IFS=, read -r -a host_list <<< "$hosts"
k=0
for host in "${host_list[@]}"; do
  for ((i = 0; i < per_host; i++)); do
    id=$((first_id + k * per_host + i))
    host_flags=("${config_flags[@]}")
    if [ -n "$credentials" ]; then
      host_flags+=("--config.transport.credentials=${credentials//\{host\}/$host}")
    fi
    remote=$(printf '%q ' cd "$remote_dir") && remote+="&& exec $(printf '%q ' .venv/bin/python \
      actor.py --server="$server" --actor_id="$id" --config="$config" "${host_flags[@]}")"
    "$SSH" -tt "$host" "$remote" > "$logdir/${host}_$id.log" 2>&1 < /dev/null &
    pids+=($!)
    echo "actor $id on $host (log $logdir/${host}_$id.log)"
  done
  k=$((k + 1))
done

failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit "$failed"
