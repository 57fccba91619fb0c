"""Stacked frames sent once (seedlike/rpc/frames.py) on real Atari frames.

  python -m benchmarks.stack_once [--config=configs/atari_ppo.py] [--envs=64] [--steps=300]

Steps `--envs` envs of the config's task (random actions) and encodes every step twice, whole
and with `actor.stack_once`; decodes both as the server does (in-place reader, checks, the
stack rebuild) and checks that they give the same observations. Reports the share of rows that
continue their stack, the message bytes per env step (scale_model.py's --step_bytes) and the
encode and decode time per message of each form. Writes JSON (benchmarks/results/ or --out).
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from benchmarks import results_io
from seedlike.config import env_spec
from seedlike.envs import make_env
from seedlike.rpc import codec, frames, wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(ROOT, "configs", "atari_ppo.py"), "An Atari config."
)
_ENVS = flags.DEFINE_integer("envs", 64, "Envs stepped together (rows per message).")
_STEPS = flags.DEFINE_integer("steps", 300, "Messages.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")


def main(argv):
    del argv
    config = _CONFIG.value
    config.env.num_envs = n = _ENVS.value
    spec = env_spec(config)
    keys = frames.keys_from_config("auto", spec)
    if not keys:
        raise app.UsageError(f"{config.env.name} has no frame stack ('auto' picks none)")
    env = make_env(config.env, spec, seed=1)
    env.reset()
    deltas, stacks = frames.Deltas(spec, keys, n), frames.Stacks(spec, keys, n)
    readers = {"whole": wire.StepReader(), "once": wire.StepReader()}
    seconds = {f"{form}_{stage}": 0.0 for form in readers for stage in ("encode", "decode")}
    sizes = {"whole": 0, "once": 0}
    continued = rows_seen = 0
    rng = np.random.default_rng(0)
    for t in range(_STEPS.value):
        rows = env.recv()
        decoded = {}
        for form, form_deltas, form_stacks in (("whole", None, None), ("once", deltas, stacks)):
            start = time.perf_counter()
            raw = codec.encode_step(t, rows, form_deltas).SerializeToString()
            encoded = time.perf_counter()
            step = codec.parse_step(raw, readers[form])
            decoded[form] = codec.decode_step(step, spec, n, stacks=form_stacks)
            seconds[f"{form}_encode"] += encoded - start
            seconds[f"{form}_decode"] += time.perf_counter() - encoded
            sizes[form] += len(raw)
        for key in spec.observation:
            np.testing.assert_array_equal(decoded["once"].obs[key], decoded["whole"].obs[key])
        flags_sent = codec.parse_actor_message(raw).step.continued
        continued += int(codec.decode(flags_sent, "continued").sum())
        rows_seen += rows.reward.shape[0]
        env.send(rng.integers(0, spec.num_actions, rows.reward.shape[0]).astype(np.int32), rows)
    env.close()
    steps = _STEPS.value
    result = {
        "benchmark": "stack_once",
        "env": config.env.name,
        "envs": n,
        "steps": steps,
        "keys": list(keys),
        "continued_fraction": continued / rows_seen,
        "bytes_per_env_step": {form: size / rows_seen for form, size in sizes.items()},
        "bytes_ratio": sizes["once"] / sizes["whole"],
        "us_per_message": {k: 1e6 * v / steps for k, v in seconds.items()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    results_io.write("stack_once", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
