"""seedlike's on-device PPO on brax against brax's own PPO trainer (brax.training.agents.ppo.train,
the package's code, run as it ships), same task, same machine, alternating:

    python -m benchmarks.brax_ppo --task=inverted_double_pendulum --envs=2048 --steps=2000000
    python -m benchmarks.brax_ppo --task=halfcheetah --envs=256 --steps=1000000 --seeds=3

Both sides step the same brax env (configs/brax_ppo.py:TASK's pipeline, `env.kwargs.backend`)
with the same envs, unroll length, epochs, minibatches, discount, entropy cost, clip, GAE lambda
and learning rate (the config's, which are brax's published settings for the task), and the
same network sizes (64-64 silu policy and value; brax's make_ppo_networks given them). brax's
trainer is set to collect one unroll per env per update (batch_size x num_minibatches = envs),
which is what seedlike's program does, so the two consume the same data per update. What stays
each side's own: brax's tanh-squashed normal with a softplus std and its reward scaling constant
(the task's published one) against seedlike's clipped Gaussian with return-based reward
normalization (configs/mujoco_ppo.py's), seedlike's gradient clipping (norm 0.5) and Adam eps
(1e-5) against brax's none and 1e-8, and brax's truncations, which do not bootstrap. seedlike
counts the step that resets an ended episode as an env step (brax's auto-reset takes none): about
1% of inverted_double_pendulum's late steps.

Reported apart for each run: compile time (brax: its first training epoch less a later one's
time, within its epochs' noise; seedlike: its whole start, the first call included) and training
time, env steps/s of training (brax: its `training/walltime` over its epochs after the first,
which leaves its evaluations out; seedlike: its rows after the first call), and the return
measured alike: brax's `eval/episode_reward` at the end (128 sampled episodes from fresh
starts; its `final_return`), and for seedlike the same of its last checkpoint (evaluate.py, 128
sampled episodes; `eval_return`). seedlike's `final_return` is another thing: the mean return of
its training episodes that ended in the last 10% of its env steps (short episodes weigh toward
it; None where none ended there, as on halfcheetah, whose episodes all run 1000 steps). Each run
is a process of its own with one CPU device. Writes JSON (--out).
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

from benchmarks import ondevice_sides as sides
from benchmarks import results_io
from seedlike.envs.brax_env import EPISODE_LENGTH

_TASK = flags.DEFINE_string("task", "inverted_double_pendulum", "A task of configs/brax_ppo.py.")
_ENVS = flags.DEFINE_integer("envs", 2048, "Envs on each side (brax's num_envs).")
_STEPS = flags.DEFINE_integer("steps", 2_000_000, "Env steps per run.")
_SEEDS = flags.DEFINE_integer("seeds", 1, "Runs of each side, alternating (seeds 0..N-1).")
_EVALS = flags.DEFINE_integer("evals", 5, "brax's num_evals (its first is before training).")
_OUT = flags.DEFINE_string("out", None, "JSON path (default: benchmarks/results/brax-ppo-*.json).")

EVAL_EPISODES = 128  # brax's num_eval_envs: one episode each
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# brax's published reward scaling per task (what its trainer multiplies rewards by).
REWARD_SCALING = {
    "inverted_pendulum": 10.0,
    "inverted_double_pendulum": 10.0,
    "halfcheetah": 1.0,
    "ant": 10.0,
    "humanoid": 0.1,
}

BRAX_DRIVER = r"""
import contextlib, functools, io, json, sys, time
with contextlib.redirect_stdout(io.StringIO()):
    from brax import envs
from brax.training.agents.ppo import networks, train as ppo
import jax, jax.numpy as jnp
if "device_put_replicated" not in vars(jax):  # brax 0.14.2 calls what jax 0.10 removed
    def device_put_replicated(x, devices):  # what it did on one device: x stacked per device
        return jax.device_put(jax.tree.map(lambda a: jnp.stack([a] * len(devices)), x),
                              devices[0])
    jax.device_put_replicated = device_put_replicated
s = json.loads(sys.argv[1])
env = envs.get_environment(s["task"], **s["kwargs"])
factory = functools.partial(networks.make_ppo_networks, policy_hidden_layer_sizes=s["hidden"],
                            value_hidden_layer_sizes=s["hidden"])
rows = []
ppo.train(environment=env, num_timesteps=s["steps"], num_evals=s["evals"], seed=s["seed"],
          num_envs=s["envs"], episode_length=s["episode_length"], unroll_length=s["length"],
          batch_size=s["envs"] // s["minibatches"], num_minibatches=s["minibatches"],
          num_updates_per_batch=s["epochs"], discounting=s["gamma"], gae_lambda=s["lam"],
          clipping_epsilon=s["clip"], entropy_cost=s["entropy"], learning_rate=s["lr"],
          reward_scaling=s["reward_scaling"], normalize_observations=True,
          network_factory=factory, progress_fn=lambda step, m: rows.append((step, dict(m))))
walls = [m.get("training/walltime", 0.0) for _, m in rows]
epochs = [(rows[i][0] - rows[i - 1][0], walls[i] - walls[i - 1]) for i in range(2, len(rows))]
steps, train_s = sum(e[0] for e in epochs), sum(e[1] for e in epochs)
first = walls[1] - walls[0]
print(json.dumps({"compile_s": first - (rows[1][0] - rows[0][0]) * train_s / steps,
                  "train_s": train_s, "env_steps": steps,
                  "final_return": float(rows[-1][1]["eval/episode_reward"])}))
"""


def brax_side(config, seed: int) -> dict:
    c = config
    kwargs = dict(c.env.kwargs)
    settings = {
        "task": _TASK.value, "steps": _STEPS.value, "evals": _EVALS.value, "seed": seed,
        "envs": _ENVS.value, "episode_length": kwargs.pop("episode_length", EPISODE_LENGTH),
        "kwargs": kwargs, "length": int(c.unroll_length),
        "minibatches": int(c.ppo.num_minibatches), "epochs": int(c.ppo.epochs),
        "gamma": float(c.ppo.gamma), "lam": float(c.ppo.gae_lambda),
        "clip": float(c.ppo.clip_eps), "entropy": float(c.ppo.ent_coef),
        "lr": float(c.optimizer.learning_rate), "reward_scaling": REWARD_SCALING[_TASK.value],
        "hidden": list(c.network.hidden_sizes),
    }  # fmt: skip
    out = subprocess.run([sys.executable, "-c", BRAX_DRIVER, json.dumps(settings)], cwd=ROOT,
                         env=_env(), capture_output=True, text=True)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"brax's trainer failed: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["sps"] = result["env_steps"] / result["train_s"]
    print("brax", seed, result, flush=True)
    return result


def evaluated(run_dir: str) -> float:
    """The mean return of EVAL_EPISODES sampled episodes of the run's last checkpoint, played
    from the host (evaluate.py): what brax's eval/episode_reward measures."""
    out = os.path.join(run_dir, "brax-eval.json")
    args = [f"--checkpoint={run_dir}", f"--episodes={EVAL_EPISODES}", f"--out={out}"]
    subprocess.run([sys.executable, "evaluate.py", *args], cwd=ROOT, env=_env(), check=True,
                   capture_output=True)  # fmt: skip
    with open(out) as f:
        return float(json.load(f)["return"]["mean"])


def _env() -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env.pop("XLA_FLAGS", None)  # one device on each side
    return env


def main(argv):
    del argv
    from seedlike.config import load_config_file

    source = f"configs/brax_ppo.py:{_TASK.value}"
    config = load_config_file(os.path.join(ROOT, source))
    if _EVALS.value < 3:
        raise app.UsageError(
            "--evals must be >= 3: brax's speed is read from its epochs after the first"
        )
    if _ENVS.value % int(config.ppo.num_minibatches):
        raise app.UsageError(f"--envs must split into {config.ppo.num_minibatches} minibatches")
    logdir = tempfile.mkdtemp(prefix="brax-ppo-")
    overrides = {"batch_unrolls": _ENVS.value}
    runs = {"brax": [], "seedlike": []}
    for seed in range(_SEEDS.value):
        runs["brax"].append(brax_side(config, seed))
        spec = sides.Side(_STEPS.value, seed, source, 1, overrides)
        result = sides.run_side("seedlike", spec, logdir, _env())
        result["eval_return"] = evaluated(os.path.join(logdir, f"seed_{seed}"))
        runs["seedlike"].append(result)

    def median(values):  # of the runs that report the value (final_return may be None)
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    keys = ("compile_s", "train_s", "sps", "final_return")
    summary = {name: {k: median([r[k] for r in rs]) for k in keys} for name, rs in runs.items()}
    summary["seedlike"]["eval_return"] = median([r["eval_return"] for r in runs["seedlike"]])
    summary["seedlike"]["sps_ratio"] = summary["seedlike"]["sps"] / summary["brax"]["sps"]
    for name, rs in runs.items():
        summary[name]["final_returns"] = [r["final_return"] for r in rs]
    summary["seedlike"]["eval_returns"] = [r["eval_return"] for r in runs["seedlike"]]
    record = {"task": _TASK.value, "envs": _ENVS.value, "steps": _STEPS.value,
              "seeds": _SEEDS.value, "runs": runs, "median": summary}  # fmt: skip
    results_io.write(f"brax-ppo-{_TASK.value}-envs{_ENVS.value}", record, _OUT.value,
                     echo=summary)  # fmt: skip


if __name__ == "__main__":
    app.run(main)
