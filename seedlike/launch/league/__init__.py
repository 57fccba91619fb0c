"""A league of roles from one command (AlphaStar's main agents and exploiters;
seedlike.league.roles says what each role plays and when exploiters reset):

  python -m seedlike.launch.league --config=configs/connect4_league.py --logdir=runs/c4league

starts one `scripts/train.sh` run per entry of the config's `league.roles`, all at once, in
<logdir>/<role>/ with `league.role` and `league.role_dir` set, seed config.seed + k for role k,
`league.role_actors[k]` actors (else --num_actors) and scheduling niceness `league.role_nice[k]`
(roles that share one machine's cores: the main agent first); exploiters with
`league.exploiter_overrides` on top. Exploiters run without TrueSkill
evaluation (the main agent's skill is the league's result) and without a step budget of their
own: when the main agent's run ends (total_env_steps), they stop with it. A run that fails starts
again from its checkpoint (--retries); Ctrl-C stops every role with a checkpoint, and the same
command resumes the league.
<logdir>/roles_state.json keeps the runs' states; --config.KEY=VALUE flags reach every role.
"""

from __future__ import annotations

from seedlike.launch import api, jobs

STATE_FILE = "roles_state.json"
# An exploiter's total_env_steps: it runs as long as the main agent's run does.
EXPLOITER_STEPS = 10**12


def role_runs(config_path: str, logdir: str, passed: dict[str, str], seed: int):
    """({role: (config values, seed)}, {role: actor processes}, {role: niceness}) of the roles'
    runs."""
    config = jobs.configured(config_path, passed)
    names = tuple(config.league.roles)
    if not names:
        raise jobs.SpecError(
            f"{config_path} has no league.roles: give them, e.g. "
            "--config.league.roles=\"('main','main_exploiter','league_exploiter')\""
        )
    runs, actors, nice = {}, {}, {}
    for k, role in enumerate(names):
        cell = {"league.role": role, "league.role_dir": logdir}
        if role != "main":
            cell["league.eval_interval_s"] = "0"
            cell["total_env_steps"] = str(EXPLOITER_STEPS)
            for override in config.league.exploiter_overrides:
                key, value = str(override).split("=", 1)
                cell[key.strip().removeprefix("config.")] = value.strip()
        jobs.check_cell(config_path, {**passed, **cell})
        runs[role] = (cell, seed + k)
        if config.league.role_actors:
            actors[role] = int(config.league.role_actors[k])
        if config.league.role_nice:
            nice[role] = int(config.league.role_nice[k])
    return runs, actors, nice


class RoleLeague:
    """The roles' runs, kept going by a seedlike.launch.jobs.Runner until the main agent's run
    ends."""

    def __init__(self, config: str, logdir: str, passed: dict[str, str], num_actors: int,
                 retries: int, seed: int, train=api.train):  # fmt: skip
        runs, actors, nice = role_runs(config, logdir, passed, seed)
        self.roles = list(runs)
        flags = [f"--config.{k}={v}" for k, v in passed.items()]
        self.runner = jobs.Runner(
            config, logdir, runs, flags, num_actors, len(runs), retries, STATE_FILE,
            self._changed, train, label="roles", actors=actors, nice=nice,
        )  # fmt: skip

    def _changed(self, state: dict) -> None:
        main = state["runs"]["main"]["state"]
        if main in ("done", "failed"):
            self.runner.stopping = True  # exploiters without a main agent have nothing to do

    def run(self) -> dict:
        """Runs the league; the runs' states at the end."""
        if self.runner.state["runs"]["main"]["state"] == "done":
            return self.runner.state
        return self.runner.run()
