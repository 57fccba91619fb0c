"""MuJoCo against CleanRL's published PPO scores: configs/mujoco_ppo.py on several tasks and seeds,
the score CleanRL reports (the mean return of the last 10% of a run's episodes), wall time, and
end-to-end env steps/s against envpool stepping the same tasks alone in the same command.

    python -m benchmarks.mujoco --logdir=runs/mujoco                 # 3 tasks x 3 seeds
    python -m benchmarks.mujoco --logdir=runs/mujoco_extra --tasks=Ant-v4,CheetahRun-v1 --seeds=1

The runs go through `python -m seedlike.launch.sweep` (one after another; rerun the same command to
resume); this script measures the envpool ceiling first and writes <logdir>/mujoco.json,
mujoco.md and mujoco.png (curves, every seed).
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

from benchmarks.results_io import over_seeds, plot_curves, run_summary, stat_cell
from seedlike.launch import jobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# CleanRL ppo_continuous_action, Gymnasium MuJoCo v4, 1M steps, 3 seeds (its docs' table).
CLEANRL = {"HalfCheetah-v4": (1442, 46), "Hopper-v4": (2383, 272), "Walker2d-v4": (2288, 572)}

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the sweep and the results go.")
_TASKS = flags.DEFINE_list("tasks", list(CLEANRL), "envpool task ids.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Runs per task.")
_CONFIG = flags.DEFINE_string("config", "configs/mujoco_ppo.py", "The one config of every run.")
_CEILING_S = flags.DEFINE_float("ceiling_s", 10.0, "Seconds of envpool alone per task.")
_ENVS = flags.DEFINE_integer("envs", 16, "Envs envpool steps at once for the ceiling.")
_FLAGS = flags.DEFINE_multi_string("flag", [], "Extra --config.x=v flags for every run.")


def envpool_ceiling(task: str, num_envs: int, seconds: float) -> float:
    """Env steps/s of envpool alone: num_envs envs stepped together with uniform random actions
    (what the actors step, without the policy)."""
    import envpool

    env = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=0)
    space = env.action_space
    rng = np.random.default_rng(0)
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32))
        steps += num_envs
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    os.makedirs(logdir, exist_ok=True)
    ceilings = {t: envpool_ceiling(t, _ENVS.value, _CEILING_S.value) for t in _TASKS.value}
    print("envpool alone:", {t: round(v) for t, v in ceilings.items()}, flush=True)
    command = [
        sys.executable, "-m", "seedlike.launch.sweep", f"--config={_CONFIG.value}",
        f"--grid=env.name={','.join(_TASKS.value)}", f"--seeds={_SEEDS.value}",
        f"--logdir={logdir}", *_FLAGS.value,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT)
    if done.returncode:
        return done.returncode
    results = {}
    for task in _TASKS.value:
        runs = []
        for k in range(_SEEDS.value):
            run_dir = os.path.join(logdir, jobs.cell_name({"env.name": task}), f"seed_{k}")
            runs.append(run_summary(run_dir))
        finals = [r["final"] for r in runs]
        results[task] = {
            "finals": finals,
            "mean": float(np.mean(finals)),
            "std": float(np.std(finals)),
            "over_seeds": over_seeds(finals),
            "wall_s": [r["wall_s"] for r in runs],
            "sps": [r["sps"] for r in runs],
            "envpool_sps": ceilings[task],
            "of_envpool": float(np.mean([r["sps"] for r in runs]) / ceilings[task]),
            "cleanrl": CLEANRL.get(task),
            "curves": [r["curve"] for r in runs],
        }
    with open(os.path.join(logdir, "mujoco.json"), "w") as f:
        json.dump({"config": _CONFIG.value, "flags": _FLAGS.value, "tasks": results}, f, indent=1)
    lines = [
        "| task | seeds (final) | IQM [95%] | mean [95%] | CleanRL | wall min/run | env steps/s "
        "| of envpool |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for task, r in results.items():
        ref = f"{r['cleanrl'][0]} ± {r['cleanrl'][1]}" if r["cleanrl"] else "-"
        lines.append(
            f"| {task} | {' / '.join(f'{x:.0f}' for x in r['finals'])} | "
            f"{stat_cell(r['over_seeds'], 'iqm', '.0f')} | "
            f"{stat_cell(r['over_seeds'], 'mean', '.0f')} | {ref} | "
            f"{np.mean(r['wall_s']) / 60:.1f} | "
            f"{np.mean(r['sps']):,.0f} | {r['of_envpool']:.2f} (of {r['envpool_sps']:,.0f}) |"
        )
    table = "\n".join(lines)
    with open(os.path.join(logdir, "mujoco.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    plot(results, os.path.join(logdir, "mujoco.png"))
    return 0


def plot(results: dict, path: str) -> None:
    panels = {
        task: (
            [(f"seed {k}", curve) for k, curve in enumerate(r["curves"])],
            (r["cleanrl"][0], "CleanRL 1M") if r["cleanrl"] else None,
        )
        for task, r in results.items()
    }
    plot_curves(panels, path)


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(lambda argv: sys.exit(main(argv)))
