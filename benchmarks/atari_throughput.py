"""Atari PPO throughput: seedlike (learner.py + actors) against single-process JAX + envpool PPO.

  python -m benchmarks.atari_throughput [--env=Breakout-v5] [--train_steps=40960]

Measured in one session, same network (Nature CNN), batch (8 envs x 128 steps) and update schedule
(4 epochs x 4 minibatches of 256):
  baseline_tuned: benchmarks/baseline_ppo_atari.py with XLA's own convolutions and the
                  space-to-depth second conv (the same XLA settings seedlike uses);
  baseline_plain: the same trainer with this jaxlib's default convolutions (YNNPACK) and the
                  textbook conv, i.e. what a straightforward JAX trainer gets here;
  seedlike:       scripts/train.sh --config=configs/atari_ppo.py, 2 actors x 4 envs;
and where the time of one env step goes in seedlike (microseconds per env step, each part timed
alone in this process). Writes JSON to --out and prints it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks import results_io
from benchmarks.stages import breakdown
from seedlike.runtime import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_ENV = flags.DEFINE_string("env", "Breakout-v5", "envpool Atari task.")
_ITERATIONS = flags.DEFINE_integer("baseline_iterations", 10, "Baseline iterations (2 warm up).")
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 40_960, "Env steps of the seedlike run.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")


def baseline(tuned: bool, iterations: int, env: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "baseline.json")
        cmd = [sys.executable, "-m", "benchmarks.baseline_ppo_atari"]
        cmd += [f"--iterations={iterations}", f"--env_id={env}", f"--out={out}"]
        if not tuned:
            cmd += ["--conv_impl=conv", "--ynn_convolutions"]
        env_vars = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=env_vars)
        with open(out) as f:
            summary = json.load(f)["summary"]
    return {
        "sps": summary["steady_sps"],
        "update_fraction": summary["update_fraction"],
        "update_s": summary.get("median", {}).get("update_s"),
    }


def seedlike_sps(env: str, steps: int) -> dict:
    from seedlike.metrics import read_metrics

    with tempfile.TemporaryDirectory() as logdir:
        cmd = [os.path.join(ROOT, "scripts", "train.sh"), "--config=configs/atari_ppo.py"]
        cmd += [f"--config.env.name={env}", f"--config.total_env_steps={steps}"]
        cmd += [f"--logdir={logdir}", "--config.log.interval_s=10"]
        cmd += ["--config.log.wandb_mode=disabled"]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        rows = read_metrics(logdir)
    steady = rows[1:-1] or rows  # the first interval compiles; the last is a partial one
    first, last = steady[0], steady[-1]
    prev = rows[rows.index(first) - 1] if rows.index(first) > 0 else first
    sps = (last["env_steps"] - prev["env_steps"]) / (last["time"] - prev["time"])
    return {
        "sps": sps,
        "staleness_mean": sum(r["staleness_mean"] or 0 for r in steady) / len(steady),
        "inference_batch_mean": sum(r["inference_batch_mean"] for r in steady) / len(steady),
        "inference_latency_ms_p50": sum(r["inference_latency_ms_p50"] for r in steady)
        / len(steady),
    }


def main(argv):
    del argv
    xla_flags.tune_cpu()
    env = _ENV.value
    result = {"env": env, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    result["baseline_plain"] = baseline(False, max(4, _ITERATIONS.value // 2), env)
    result["baseline_tuned"] = baseline(True, _ITERATIONS.value, env)
    result["seedlike"] = seedlike_sps(env, _TRAIN_STEPS.value)
    result["seedlike_vs_tuned"] = result["seedlike"]["sps"] / result["baseline_tuned"]["sps"]
    result["seedlike_vs_plain"] = result["seedlike"]["sps"] / result["baseline_plain"]["sps"]
    result["cpu_us_per_env_step"] = breakdown(env)
    results_io.write("atari_throughput", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
