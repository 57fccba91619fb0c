"""`python -m seedlike.launch.pbt`, the command line; seedlike.launch.pbt's docstring says what it
does."""

from __future__ import annotations

import os
import signal
import sys

from absl import app, flags

from seedlike.config import MEANING_KEYS
from seedlike.launch import jobs
from seedlike.launch.pbt import Explore, Population, read_records

_CONFIG = flags.DEFINE_string("config", "configs/cartpole_ppo.py", "Config of every member.")
_LOGDIR = flags.DEFINE_string("logdir", None, "The population's directory (rerun to resume).")
_MEMBERS = flags.DEFINE_integer("members", 4, "Population size.")
_INTERVAL = flags.DEFINE_integer("interval", 25_000, "Env steps per member per generation.")
_SPACE = flags.DEFINE_multi_string(
    "space", [], "KEY=KIND:ARGS (log, uniform, int, choice): an evolving hyperparameter."
)
_QUANTILE = flags.DEFINE_float("quantile", 0.25, "Share of the population replaced each time.")
_PERTURB = flags.DEFINE_list("perturb", ["0.8", "1.2"], "Factors explore multiplies values by.")
_RESAMPLE = flags.DEFINE_float("resample", 0.25, "Chance that explore draws a choice again.")
_FITNESS = flags.DEFINE_string(
    "fitness", "episode_return_robust", "Metrics key ranking members (docs/metrics.md)."
)
_MODE = flags.DEFINE_enum("mode", "max", ["max", "min"], "Whether more fitness is better.")
_PBT_SEED = flags.DEFINE_integer("pbt_seed", 0, "Seeds the initial draws and every choice.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Members trained at a time.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actor processes per member.")
_RETRIES = flags.DEFINE_integer("retries", 1, "Restarts of a failed member in a generation.")
_EXPLOIT = flags.DEFINE_bool(
    "exploit", True, "False: the control, the same members and generations with fixed values."
)


_PASS_THROUGH: list[str] = []  # the --config.KEY=VALUE flags, for every run


def main(argv) -> int:
    try:
        logdir, config = jobs.command_paths(
            argv, _LOGDIR.value, _CONFIG.value, "the population's directory"
        )
        passed = jobs.config_values(_PASS_THROUGH)
        space = jobs.parse_space(_SPACE.value)
        if not space:
            raise jobs.SpecError("give at least one --space: the hyperparameters that evolve")
        jobs.check_not_set_per_run(
            space, "--space",
            "PBT sets it (members count seeds from --config.seed; generations pause at --interval)",
        )  # fmt: skip
        meaning = [k for k in space if any(k == p or k.startswith(p + ".") for p in MEANING_KEYS)]
        if meaning:
            raise jobs.SpecError(
                f"--space {meaning[0]}: it changes what the parameters mean, so a copied "
                "checkpoint could not run with it (surgery changes networks)"
            )
        perturb = tuple(float(f) for f in _PERTURB.value)
        if _MEMBERS.value < 2 or _INTERVAL.value < 1 or not 0 < _QUANTILE.value <= 0.5:
            raise jobs.SpecError("--members >= 2, --interval >= 1, --quantile in (0, 0.5]")
        # Every value stays within its range, so the ranges' ends (every choice) are checked.
        for key, dist in space.items():
            for end in dist.args:
                value = str(int(end)) if dist.kind == "int" else str(end)
                jobs.check_cell(config, {**passed, key: value})
        passed = jobs.canonical(config, passed)
        total = passed.get("total_env_steps")
        total = None if total is None else jobs.as_int(total, "total_env_steps")
        seed = jobs.base_seed(config, passed)
    except (jobs.SpecError, FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    passed.setdefault("log.wandb_group", os.path.basename(logdir))
    os.makedirs(logdir, exist_ok=True)
    try:
        population = Population(
            config, logdir, _MEMBERS.value, _INTERVAL.value,
            Explore(space, perturb, _RESAMPLE.value), _QUANTILE.value, _FITNESS.value,
            _MODE.value, _PBT_SEED.value, [f"--config.{k}={v}" for k, v in passed.items()],
            _NUM_ACTORS.value, _PARALLEL.value, _RETRIES.value,
            total, seed, _EXPLOIT.value,
        )  # fmt: skip
    except jobs.SpecError as e:
        sys.exit(f"error: {e}")

    def stop(signum, frame):
        population.stopping = True
        if population.runner is not None:
            population.runner.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    g = population.state["generation"]
    print(f"pbt: {_MEMBERS.value} members, {population.generations} generations of "
          f"{_INTERVAL.value} env steps (from generation {g}); {logdir}", flush=True)  # fmt: skip
    try:
        finished = population.run()
    except jobs.SpecError as e:
        sys.exit(f"error: {e}")
    if not finished:
        print("pbt: stopped; rerun the same command to resume", flush=True)
        return 130 if population.stopping else 1
    last = [r for r in read_records(logdir) if r["generation"] == population.generations - 1]
    best = max(last, key=lambda r: r["fitness"] if _MODE.value == "max" else -r["fitness"])
    print(f"pbt: done; best member {best['member']} ({_FITNESS.value} {best['fitness']:.4g}); "
          f"{os.path.join(logdir, 'pbt.jsonl')}, pbt.png")  # fmt: skip
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=jobs.flags_parser(_PASS_THROUGH))
