"""`python -m seedlike.launch.sweep`, the command line; seedlike.launch.sweep's docstring says what
it does."""

from __future__ import annotations

import os
import signal
import sys

from absl import app, flags

from seedlike.launch import jobs
from seedlike.launch.sweep import STATE_FILE, write_results

_CONFIG = flags.DEFINE_string("config", "configs/cartpole_ppo.py", "Config of every run.")
_LOGDIR = flags.DEFINE_string("logdir", None, "The sweep's directory (rerun with it to resume).")
_GRID = flags.DEFINE_multi_string("grid", [], "KEY=V1,V2,...: a swept config value (repeatable).")
_SPACE = flags.DEFINE_multi_string(
    "space", [], "KEY=KIND:ARGS for --random, KIND one of log, uniform, int, choice."
)
_RANDOM = flags.DEFINE_integer("random", 0, "Cells drawn from --space (0: grid only).")
_SWEEP_SEED = flags.DEFINE_integer("sweep_seed", 0, "Seeds the draws of --random.")
_SEEDS = flags.DEFINE_integer("seeds", 1, "Runs per cell, with config.seed + 0, 1, ...")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actor processes per run.")
_RETRIES = flags.DEFINE_integer("retries", 1, "Restarts of a failed run before it counts failed.")
_METRIC = flags.DEFINE_string(
    "metric", "episode_return_robust", "The metrics key the table ranks (docs/metrics.md)."
)
_MODE = flags.DEFINE_enum("mode", "max", ["max", "min"], "Whether more of --metric is better.")
_FINAL_FRACTION = flags.DEFINE_float(
    "final_fraction", 0.1, "A run's final value: the mean over this last share of its rows."
)


_PASS_THROUGH: list[str] = []  # the --config.KEY=VALUE flags, for every run


def main(argv) -> int:
    try:
        logdir, config = jobs.command_paths(
            argv, _LOGDIR.value, _CONFIG.value, "the sweep's directory"
        )
        passed = jobs.config_values(_PASS_THROUGH)
        cells = jobs.make_cells(
            jobs.parse_grid(_GRID.value),
            jobs.parse_space(_SPACE.value),
            _RANDOM.value,
            _SWEEP_SEED.value,
        )
        base_seed = jobs.base_seed(config, passed)
        jobs.check_not_set_per_run(
            {k for cell in cells for k in cell}, "--grid",
            "set per run (--seeds seeds per cell, counting from --config.seed)",
        )  # fmt: skip
        for cell in cells:
            jobs.check_cell(config, {**passed, **cell})
        passed = jobs.canonical(config, passed)
        cells = [jobs.canonical(config, cell) for cell in cells]
    except (jobs.SpecError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    if _SEEDS.value < 1 or _PARALLEL.value < 1 or not 0 < _FINAL_FRACTION.value <= 1:
        sys.exit("error: --seeds and --parallel must be >= 1 and --final_fraction in (0, 1]")
    passed.setdefault("log.wandb_group", os.path.basename(logdir))
    run_flags = [f"--config.{key}={value}" for key, value in passed.items()]
    runs = {
        f"{jobs.cell_name(cell)}/seed_{k}": (cell, base_seed + k)
        for cell in cells
        for k in range(_SEEDS.value)
    }
    os.makedirs(logdir, exist_ok=True)
    args = (_METRIC.value, _MODE.value, _FINAL_FRACTION.value)
    sweeper = jobs.Runner(
        config, logdir, runs, run_flags, _NUM_ACTORS.value, _PARALLEL.value, _RETRIES.value,
        on_change=lambda state: write_results(state, logdir, *args), state_file=STATE_FILE,
        label="sweep", metric=_METRIC.value,
    )  # fmt: skip

    def stop(signum, frame):
        sweeper.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    done = sum(sweeper.state["runs"][r]["state"] == "done" for r in runs)
    print(f"sweep: {len(runs)} runs in {len(cells)} cells ({done} done before); {logdir}")
    state = sweeper.run()
    write_results(state, logdir, *args)
    mine = [state["runs"][r] for r in runs]
    failed = [r for r in runs if state["runs"][r]["state"] == "failed"]
    if sweeper.stopping:
        print("sweep: stopped; rerun the same command to resume", flush=True)
        return 130
    print(f"sweep: {sum(r['state'] == 'done' for r in mine)} of {len(runs)} runs done; "
          f"table in {os.path.join(logdir, 'sweep.md')}")  # fmt: skip
    if failed:
        print(f"sweep: {len(failed)} failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=jobs.flags_parser(_PASS_THROUGH))
