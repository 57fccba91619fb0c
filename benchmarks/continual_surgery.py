"""Continual training across surgery, against training the new architecture from scratch.

  python -m benchmarks.continual_surgery [--task=lunarlander|cartpole] [--seeds=3]

1. Train a small policy (hidden 64) that observes only some features (--task picks which) for
   --old_steps.
2. Surgery: hidden 64 -> 128 and two observation features added.
3. Evaluate old and new policies right away (inference_server.py + an actor, --eval_steps each):
   the mean return must not drop beyond its noise.
4. Continue training the new run, and train the new architecture from scratch; compare the env
   steps each needs to reach --target (first metrics row at or above it).
Writes JSON to --out and prints it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from benchmarks import results_io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Task:
    config: str
    old_obs: tuple[int, ...]  # env.obs_indices of the small policy
    new_obs: tuple[int, ...]  # ... after surgery (the old ones first, then two new features)
    old_steps: int
    new_steps: int
    target: float
    eval_steps: int


TASKS = {
    # CartPole from pole angle and angular velocity; the cart's position and velocity are added.
    # From scratch the big network reaches 475 within ~40k steps, so there is little to save.
    "cartpole": Task("cartpole_ppo.py", (2, 3), (2, 3, 0, 1), 150_000, 300_000, 475.0, 40_000),
    # LunarLander without its two leg-contact sensors; surgery adds them (a new sensor on a
    # deployed agent). From scratch the big network needs ~1M+ steps to land reliably.
    "lunarlander": Task(
        "lunarlander_ppo.py", (0, 1, 2, 3, 4, 5), tuple(range(8)), 1_000_000, 2_000_000, 200.0,
        100_000,
    ),
}  # fmt: skip

_TASK = flags.DEFINE_enum("task", "lunarlander", list(TASKS), "What to train.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Independent repetitions.")
_OLD_STEPS = flags.DEFINE_integer("old_steps", None, "Training of the small policy.")
_NEW_STEPS = flags.DEFINE_integer("new_steps", None, "Budget after surgery / from scratch.")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", None, "Env steps per evaluation.")
_TARGET = flags.DEFINE_float("target", None, "Return to reach.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")

COMMON = ["--config.log.wandb_mode=disabled", "--config.log.interval_s=2"]
# A constant learning rate, so continuing and starting over follow the same schedule.
CONSTANT_LR = ["--config.optimizer.anneal_lr=False"]
NEW_HIDDEN = "(128,128)"  # the small policy's hidden 64 after surgery


def task() -> Task:
    """The chosen task with any flag overrides."""
    t = TASKS[_TASK.value]
    overrides = {
        "old_steps": _OLD_STEPS.value,
        "new_steps": _NEW_STEPS.value,
        "eval_steps": _EVAL_STEPS.value,
        "target": _TARGET.value,
    }
    return dataclasses.replace(t, **{k: v for k, v in overrides.items() if v is not None})


def obs_flag(prefix: str, indices) -> str:
    return f"--{prefix}.env.obs_indices=({','.join(map(str, indices))},)"


def run(args, **kwargs):
    return subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True, **kwargs)


def train(logdir, config, *flags_):
    run([os.path.join(ROOT, "scripts", "train.sh"), f"--logdir={logdir}", f"--config={config}"]
        + list(flags_) + COMMON + CONSTANT_LR)  # fmt: skip


def evaluate(checkpoint, steps, tmp, config, config_flags) -> dict:
    """Mean return (and its standard error) of a frozen checkpoint over `steps` env steps."""
    from seedlike.metrics import read_metrics

    logdir = os.path.join(tmp, f"eval-{time.monotonic_ns()}")
    server = subprocess.Popen(
        [sys.executable, "inference_server.py", f"--checkpoint={checkpoint}", f"--logdir={logdir}",
         "--port=0", f"--max_env_steps={steps}", "--interval_s=1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        address_file = os.path.join(logdir, "server_address")
        while not os.path.exists(address_file):
            if server.poll() is not None:
                raise RuntimeError(f"inference_server.py exited with {server.returncode}")
            time.sleep(0.2)
        with open(address_file) as f:
            address = f.read().strip()
        run(
            [sys.executable, "actor.py", f"--server={address}", f"--config={config}", *config_flags]
        )
        server.wait(timeout=120)
    finally:
        server.kill()
    rows = [r for r in read_metrics(logdir) if r["episodes"]]
    n = sum(r["episodes"] for r in rows)
    mean = sum(r["episode_return_mean"] * r["episodes"] for r in rows) / n
    # Per-row means weighted by their episodes approximate the spread of episode returns.
    var = sum(r["episodes"] * (r["episode_return_mean"] - mean) ** 2 for r in rows) / max(n - 1, 1)
    return {"mean": mean, "episodes": n, "stderr_rows": math.sqrt(var / max(len(rows), 1))}


def steps_to(logdir, target, start=0) -> int | None:
    from seedlike.metrics import read_metrics

    for row in read_metrics(logdir):
        if (row["episode_return_mean"] or 0) >= target:
            return row["env_steps"] - start
    return None


def one_seed(t: Task, seed: int, tmp: str) -> dict:
    from seedlike.metrics import read_metrics

    config = os.path.join(ROOT, "configs", t.config)
    old, new, scratch = (os.path.join(tmp, f"{name}-{seed}") for name in ("old", "new", "scratch"))
    seed_flag = f"--config.seed={seed}"
    old_obs, new_obs = obs_flag("config", t.old_obs), obs_flag("config", t.new_obs)
    big = f"network.hidden_sizes={NEW_HIDDEN}"
    train(old, config, seed_flag, old_obs, f"--config.total_env_steps={t.old_steps}")
    surgery = run([
        sys.executable, "-m", "surgery", f"--checkpoint={old}", f"--out={new}",
        f"--new_config={config}", f"--new_config.seed={seed}", obs_flag("new_config", t.new_obs),
        f"--new_config.{big}", "--new_config.optimizer.anneal_lr=False",
        "--lr_zero_updates=5",
    ])  # fmt: skip
    with open(os.path.join(new, "surgery.json")) as f:
        report = json.load(f)["report"]
    before = evaluate(old, t.eval_steps, tmp, config, [old_obs])
    after = evaluate(new, t.eval_steps, tmp, config, [new_obs])

    old_last = read_metrics(old)[-1]
    old_end = old_last["env_steps"]
    budget = old_end + t.new_steps
    train(new, os.path.join(new, "config.py"), f"--config.total_env_steps={budget}")
    train(scratch, config, seed_flag, new_obs, f"--config.{big}",
          f"--config.total_env_steps={t.new_steps}")  # fmt: skip
    return {
        "seed": seed,
        "old_env_steps": old_end,
        "old_final_return": old_last["episode_return_mean"],
        "verification": report,
        "surgery_stdout_tail": surgery.stdout.strip().splitlines()[-3:],
        "eval_before_surgery": before,
        "eval_after_surgery": after,
        "steps_to_target_after_surgery": steps_to(new, t.target, start=old_end),
        "steps_to_target_from_scratch": steps_to(scratch, t.target),
        "curve_after_surgery": curve(new, start=old_end),
        "curve_from_scratch": curve(scratch),
    }


def curve(logdir, start=0) -> list[tuple[int, float]]:
    """(env steps, return) of every metrics row with episodes, steps counted from `start`."""
    from seedlike.metrics import read_metrics

    return [
        (row["env_steps"] - start, round(row["episode_return_mean"], 1))
        for row in read_metrics(logdir)
        if row["episode_return_mean"] is not None and row["env_steps"] > start
    ]


def main(argv):
    del argv
    t = task()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(_SEEDS.value):
            results.append(one_seed(t, seed, tmp))
            print(
                json.dumps({k: v for k, v in results[-1].items() if "curve" not in k}), flush=True
            )
    after = [r["steps_to_target_after_surgery"] for r in results]
    scratch = [r["steps_to_target_from_scratch"] for r in results]
    summary = {
        "task": _TASK.value,
        **dataclasses.asdict(t),
        "median_steps_after_surgery": float(
            np.median([s if s is not None else np.inf for s in after])
        ),
        "median_steps_from_scratch": float(
            np.median([s if s is not None else np.inf for s in scratch])
        ),
        "runs": results,
    }
    echo = {k: v for k, v in summary.items() if k != "runs"}
    results_io.write(f"continual_surgery-{_TASK.value}", summary, _OUT.value, echo)


if __name__ == "__main__":
    app.run(main)
