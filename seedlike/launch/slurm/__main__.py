"""`python -m seedlike.launch.slurm`, the command line; seedlike.launch.slurm's docstring says
what the job does.

  python -m seedlike.launch.slurm --config=configs/atari_ppo.py --logdir=/shared/runs/breakout \
      --actors=32 --cpus_per_actor=2 --nodes=4 --gpus=1 --partition=gpu --time=24:00:00
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from seedlike.launch import jobs
from seedlike.launch.slurm import Job, SlurmError, check_controller, kill_wait_s, stop_grace, submit

_CONFIG = flags.DEFINE_string("config", "configs/cartpole_ppo.py", "The run's config.")
_LOGDIR = flags.DEFINE_string(
    "logdir",
    None,
    "The run directory, on a file system every node shares (submit again to resume).",
)
_ACTORS = flags.DEFINE_integer("actors", 2, "Actor processes (job tasks).")
_CPUS = flags.DEFINE_integer(
    "cpus_per_actor", 1, "Cores per actor (docs/scaling-out.md, 'Sizing a fleet')."
)
_NODES = flags.DEFINE_integer("nodes", 1, "Nodes; the first runs the learner (>1: TLS).")
_GPUS = flags.DEFINE_integer("gpus", 0, "GPUs for the learner on the first node.")
_PARTITION = flags.DEFINE_string("partition", "", "sbatch --partition ('' the default).")
_ACCOUNT = flags.DEFINE_string("account", "", "sbatch --account.")
_TIME = flags.DEFINE_string("time", "", "sbatch --time, e.g. 4:00:00; the job requeues at it.")
_SIGNAL = flags.DEFINE_integer(
    "signal_s", 120, "Seconds before the time limit that the job checkpoints and requeues."
)
_PYTHON = flags.DEFINE_string("python", sys.executable, "The interpreter on every node.")
_SBATCH = flags.DEFINE_multi_string("sbatch", [], "A further sbatch option, e.g. --qos=long.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the job script instead of submitting it.")

_PASS_THROUGH: list[str] = []  # the --config.KEY=VALUE flags of the run


def main(argv) -> int:
    try:
        logdir, config = jobs.command_paths(argv, _LOGDIR.value, _CONFIG.value, "the run")
        passed = jobs.config_values(_PASS_THROUGH)
        run_config = jobs.configured(config, passed)
    except (jobs.SpecError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    # Every node of the allocation runs at least one actor task (sbatch --ntasks >= --nodes).
    if min(_ACTORS.value, _CPUS.value, _NODES.value) < 1 or _NODES.value > _ACTORS.value:
        sys.exit("error: --actors, --cpus_per_actor and --nodes must be >= 1, --nodes <= --actors")
    job = Job(
        config=config, logdir=logdir, config_flags=tuple(_PASS_THROUGH), actors=_ACTORS.value,
        cpus_per_actor=_CPUS.value, nodes=_NODES.value, gpus=_GPUS.value,
        partition=_PARTITION.value, account=_ACCOUNT.value, time=_TIME.value,
        signal_s=_SIGNAL.value, python=_PYTHON.value, sbatch=tuple(_SBATCH.value),
    )  # fmt: skip
    grace = float(run_config.checkpoint.stop_grace_s)
    try:
        if _DRY_RUN.value:
            from seedlike.launch.slurm import job_script

            print(job_script(job, grace), end="")
            return 0
        check_controller()
        grace = stop_grace(grace, kill_wait_s())
        job_id = submit(job, grace)
    except SlurmError as e:
        sys.exit(f"error: {e}")
    logs = os.path.join(logdir, "slurm")
    print(
        f"submitted job {job_id}: the learner and {job.actors} actors on {job.nodes} node(s); "
        f"logs in {logs} (job_{job_id}.log, learner.log, actor_<k>.log); `scancel {job_id}` "
        "checkpoints and stops it, the same command again resumes it",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=jobs.flags_parser(_PASS_THROUGH))
