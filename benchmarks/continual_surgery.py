"""Continual training across surgery, against training the new architecture from scratch.

  python benchmarks/continual_surgery.py [--seeds=3]

1. Train a small CartPole policy (hidden 64, only pole angle and angular velocity observed:
   env.obs_indices=(2, 3)) for --old_steps.
2. Surgery: hidden 64 -> 128 and the two cart features added (obs_indices=(2, 3, 0, 1)).
3. Evaluate old and new policies right away (inference_server.py + an actor, --eval_steps each):
   the mean return must not drop beyond its noise.
4. Continue training the new run, and train the new architecture from scratch; compare the env
   steps each needs to reach --target (first metrics row at or above it).
Writes JSON to --out and prints it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results_io  # noqa: E402

_SEEDS = flags.DEFINE_integer("seeds", 3, "Independent repetitions.")
_OLD_STEPS = flags.DEFINE_integer("old_steps", 150_000, "Training of the small policy.")
_NEW_STEPS = flags.DEFINE_integer("new_steps", 300_000, "Budget after surgery / from scratch.")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", 40_000, "Env steps per evaluation.")
_TARGET = flags.DEFINE_float("target", 475.0, "Return to reach.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")

CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")
COMMON = ["--config.log.wandb_mode=disabled", "--config.log.interval_s=2"]
# A constant learning rate, so continuing and starting over follow the same schedule.
CONSTANT_LR = ["--config.optimizer.anneal_lr=False"]


def run(args, **kwargs):
    return subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True, **kwargs)


def train(logdir, config, *flags_):
    run([os.path.join(ROOT, "scripts", "train.sh"), f"--logdir={logdir}", f"--config={config}"]
        + list(flags_) + COMMON + CONSTANT_LR)  # fmt: skip


def evaluate(checkpoint, steps, tmp, config_flags) -> dict:
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
            [sys.executable, "actor.py", f"--server={address}", f"--config={CONFIG}", *config_flags]
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


def one_seed(seed: int, tmp: str) -> dict:
    old, new, scratch = (os.path.join(tmp, f"{name}-{seed}") for name in ("old", "new", "scratch"))
    seed_flag = f"--config.seed={seed}"
    old_obs = "--config.env.obs_indices=(2,3)"
    new_obs = "--config.env.obs_indices=(2,3,0,1)"
    train(old, CONFIG, seed_flag, old_obs, f"--config.total_env_steps={_OLD_STEPS.value}")
    surgery = run([
        sys.executable, "-m", "surgery", f"--checkpoint={old}", f"--out={new}",
        f"--new_config={CONFIG}", f"--new_config.seed={seed}",
        "--new_config.env.obs_indices=(2,3,0,1)", "--new_config.network.hidden_sizes=(128,128)",
        "--new_config.optimizer.anneal_lr=False", "--lr_zero_updates=5",
    ])  # fmt: skip
    with open(os.path.join(new, "surgery.json")) as f:
        report = json.load(f)["report"]
    before = evaluate(old, _EVAL_STEPS.value, tmp, [old_obs])
    after = evaluate(new, _EVAL_STEPS.value, tmp, [new_obs])

    from seedlike.metrics import read_metrics

    old_end = read_metrics(old)[-1]["env_steps"]
    budget = old_end + _NEW_STEPS.value
    train(new, os.path.join(new, "config.py"), f"--config.total_env_steps={budget}")
    train(scratch, CONFIG, seed_flag, new_obs, "--config.network.hidden_sizes=(128,128)",
          f"--config.total_env_steps={_NEW_STEPS.value}")  # fmt: skip
    return {
        "seed": seed,
        "old_final_return": read_metrics(old)[-1]["episode_return_mean"],
        "verification": report,
        "surgery_stdout_tail": surgery.stdout.strip().splitlines()[-3:],
        "eval_before_surgery": before,
        "eval_after_surgery": after,
        "steps_to_target_after_surgery": steps_to(new, _TARGET.value, start=old_end),
        "steps_to_target_from_scratch": steps_to(scratch, _TARGET.value),
    }


def main(argv):
    del argv
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(_SEEDS.value):
            results.append(one_seed(seed, tmp))
            print(json.dumps(results[-1]), flush=True)
    after = [r["steps_to_target_after_surgery"] for r in results]
    scratch = [r["steps_to_target_from_scratch"] for r in results]
    summary = {
        "target": _TARGET.value,
        "old_steps": _OLD_STEPS.value,
        "median_steps_after_surgery": float(
            np.median([s if s is not None else np.inf for s in after])
        ),
        "median_steps_from_scratch": float(
            np.median([s if s is not None else np.inf for s in scratch])
        ),
        "runs": results,
    }
    echo = {k: v for k, v in summary.items() if k != "runs"}
    results_io.write("continual_surgery", summary, _OUT.value, echo)


if __name__ == "__main__":
    app.run(main)
