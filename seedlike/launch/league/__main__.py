"""`python -m seedlike.launch.league`, the command line; seedlike.launch.league's docstring says
what it does."""

from __future__ import annotations

import os
import signal
import sys

from absl import app, flags

from seedlike.launch import jobs
from seedlike.launch.league import RoleLeague

_CONFIG = flags.DEFINE_string("config", "configs/connect4_league.py", "Config of every role.")
_LOGDIR = flags.DEFINE_string("logdir", None, "The league's directory (rerun to resume).")
_NUM_ACTORS = flags.DEFINE_integer(
    "num_actors", 1, "Actor processes per role where league.role_actors does not say."
)
_RETRIES = flags.DEFINE_integer("retries", 1, "Restarts of a role's run that fails.")

_PASS_THROUGH: list[str] = []  # the --config.KEY=VALUE flags, for every role


def main(argv) -> int:
    try:
        logdir, config = jobs.command_paths(argv, _LOGDIR.value, _CONFIG.value, "the league's")
        passed = jobs.config_values(_PASS_THROUGH)
        seed = jobs.base_seed(config, passed)
        passed.setdefault("log.wandb_group", os.path.basename(logdir))
        os.makedirs(logdir, exist_ok=True)
        league = RoleLeague(config, logdir, passed, _NUM_ACTORS.value, _RETRIES.value, seed)
    except (jobs.SpecError, FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")

    def stop(signum, frame):
        league.runner.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"roles: {', '.join(league.roles)} in {logdir}", flush=True)
    state = league.run()["runs"]
    print(
        "roles: " + ", ".join(f"{role} {entry['state']}" for role, entry in state.items()),
        flush=True,
    )
    if state["main"]["state"] == "done":
        return 0
    if state["main"]["state"] == "failed":
        return 1
    print("roles: stopped; rerun the same command to resume", flush=True)
    return 130 if league.runner.stopping else 1


if __name__ == "__main__":
    app.run(main, flags_parser=jobs.flags_parser(_PASS_THROUGH))
