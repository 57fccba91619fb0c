"""What a PPO update costs per env step with each Procgen torso, on this machine's JAX backend.

  .venv/bin/python -m benchmarks.torso_cost [--rounds=2] [--out=...]   # minutes per round

Builds the learner of `configs/procgen_coinrun.py:cpu` (2,048 env steps per update: 32 unrolls of
64 steps, 3 epochs of 4 minibatches) with each torso below and times `Learner.update` on the
same batch of random 64x64x3 frames, one update of each torso in turn per round, so load from
other work falls on all of them alike. Reports the median microseconds per env step and each
torso's cost against the Nature CNN of the `:cpu` config (the baseline, measured in the same run).

  impala_paper: the IMPALA CNN of the Procgen paper (16-32-32 channels, 256 units)
  impala_small: the same with 8-16-16 channels
  nature:       the Nature CNN with 16-32-32 channels and 256 units (the :cpu config's)
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np
from absl import app, flags

from benchmarks import results_io
from networks import make_network
from seedlike.config import load_config_file
from seedlike.envs import make_env_spec
from seedlike.learning.update import Learner
from seedlike.runtime import xla_flags
from seedlike.types import Unroll

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_ROUNDS = flags.DEFINE_integer("rounds", 2, "Timed updates per torso (after one to compile).")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")

TORSOS = {
    "impala_paper": {"torso": "impala_cnn", "cnn_channels": (16, 32, 32), "cnn_hidden": 256},
    "impala_small": {"torso": "impala_cnn", "cnn_channels": (8, 16, 16), "cnn_hidden": 256},
    "nature": {"torso": "nature_cnn", "cnn_channels": (16, 32, 32), "cnn_hidden": 256},
}
BASELINE = "nature"


def frames(spec, batch: int, horizon: int, seed: int = 0) -> Unroll:
    """A learner batch of random frames and outcomes [B, T+1, ...] (the update's cost does not
    depend on the values)."""
    rng = np.random.default_rng(seed)
    obs = {k: rng.integers(0, 256, (batch, horizon + 1, *s.shape), s.dtype)
           for k, s in spec.observation.items()}  # fmt: skip
    steps = (batch, horizon + 1)
    return Unroll(
        obs=obs,
        extras={},
        action=rng.integers(0, spec.num_actions, steps).astype(np.int32),
        behaviour_logp=np.full(steps, -np.log(spec.num_actions), np.float32),
        behaviour_value=rng.normal(size=steps).astype(np.float32),
        valid=np.ones(steps, bool),
        first=np.zeros(steps, bool),
        policy_version=np.zeros(steps, np.int32),
        reward=rng.normal(size=(batch, horizon)).astype(np.float32),
        terminated=np.zeros((batch, horizon), bool),
        truncated=np.zeros((batch, horizon), bool),
        carry=(),
    )


def main(_):
    xla_flags.tune_cpu()
    base = load_config_file(os.path.join(ROOT, "configs", "procgen_coinrun.py:cpu"))
    spec = make_env_spec(base.env)
    batch = frames(spec, base.batch_unrolls, base.unroll_length)
    steps = base.batch_unrolls * base.unroll_length
    learners = {}
    for name, network_config in TORSOS.items():
        config = base.copy_and_resolve_references()
        config.unlock()
        config.network.update(network_config)
        learner = Learner(
            config,
            make_network(config.network, spec),
            window_s=config.server.fair_window_s,
            devices=jax.devices()[:1],
        )
        learner.set_state(learner.init_state(jax.random.key(0)))
        learner.update(batch)  # compiles
        learners[name] = learner
    times = {name: [] for name in TORSOS}
    for _ in range(_ROUNDS.value):
        for name, learner in learners.items():
            start = time.perf_counter()
            learner.update(batch)
            times[name].append(time.perf_counter() - start)
    per_step = {name: 1e6 * float(np.median(t)) / steps for name, t in times.items()}
    result = {
        "config": "configs/procgen_coinrun.py:cpu",
        "backend": jax.default_backend(),
        "env_steps_per_update": steps,
        "rounds": _ROUNDS.value,
        "torsos": TORSOS,
        "us_per_env_step": per_step,
        "vs_" + BASELINE: {n: v / per_step[BASELINE] for n, v in per_step.items()},
        "update_s": times,
    }
    results_io.write("torso_cost", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
