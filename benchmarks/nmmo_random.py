"""Neural MMO with uniformly random legal actions: the baseline of configs/nmmo_entities.py.

Runs in the nmmo virtualenv (scripts/nmmo_venv.sh; no jax needed) with the env settings of a
config, and reports agent-steps/s and, per ended agent episode, the mean lifetime, return and
achievements (nmmo's event counts) in the same world a trained policy lives in:

    .nmmo-venv/bin/python -m benchmarks.nmmo_random --config=configs/nmmo_entities.py --seconds=60

`--path=adapter` (default) steps the env through the PettingZoo adapter the actors use, with
random legal (direction, style, target) actions; `--path=raw` steps nmmo.Env directly with random
legal Move and Attack actions and no wrapper, for the wrapper's cost. Writes JSON to --out.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
from absl import app, flags

from seedlike.config import load_config_file
from seedlike.envs import make_env, make_env_spec
from seedlike.types import LEGAL_ACTION_MASK

_CONFIG = flags.DEFINE_string("config", "configs/nmmo_entities.py", "config whose env to run")
_SECONDS = flags.DEFINE_float("seconds", 60.0, "how long to step")
_PATH = flags.DEFINE_enum("path", "adapter", ["adapter", "raw"], "what to step (module doc)")
_SEED = flags.DEFINE_integer("seed", 0, "env and action seed")
_OUT = flags.DEFINE_string("out", "", "JSON file for the results ('' = print only)")


def random_legal(mask: np.ndarray, sizes, rng) -> np.ndarray:
    """One uniformly random legal choice per head for each row of mask bool [n, sum(sizes)], as
    mixed-radix actions (EnvSpec.action_heads)."""
    args = []
    for part in np.split(mask, np.cumsum(sizes)[:-1], axis=1):
        scores = np.where(part, rng.random(part.shape), -1.0)
        args.append(scores.argmax(1))
    return np.ravel_multi_index(args, sizes).astype(np.int32)


def run_adapter(config, seconds: float, seed: int) -> dict:
    spec = make_env_spec(config.env)
    env = make_env(config.env, spec, seed)
    rng = np.random.default_rng(seed)
    env.reset()
    steps, returns, ended = 0, [], []
    episode_return = {}
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        rows = env.recv()
        for e, p, r, done in zip(
            rows.env_id, rows.player_id, rows.reward, rows.terminated | rows.truncated
        ):
            key = (int(e), int(p))
            episode_return[key] = episode_return.get(key, 0.0) + float(r)
            if done:
                returns.append(episode_return.pop(key))
        ended.extend(numbers for _, numbers in env.episode_infos())
        env.send(random_legal(rows.extras[LEGAL_ACTION_MASK], spec.head_sizes, rng), rows)
        steps += int(rows.acting.sum())
    elapsed = time.monotonic() - start
    env.close()
    keys = sorted({k for numbers in ended for k in numbers})
    return {
        "agent_steps_per_s": steps / elapsed,
        "episodes": len(ended),
        "episode_return_mean": float(np.mean(returns)) if returns else None,
        **{k: float(np.mean([n.get(k, 0.0) for n in ended])) for k in keys},
    }


def run_raw(config, seconds: float, seed: int) -> dict:
    from seedlike.envs import nmmo_env

    wrapper = nmmo_env.parallel_env(**dict(config.env.kwargs))  # owns the maps directory
    env = wrapper.nmmo_env
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    steps, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        if not env.agents:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        actions = {}
        for agent, o in obs.items():
            targets = o["ActionTargets"]
            move = rng.choice(np.flatnonzero(targets["Move"]["Direction"]))
            target = np.flatnonzero(targets["Attack"]["Target"][: nmmo_env.NO_TARGET])
            actions[agent] = {"Move": {"Direction": int(move)}}
            if target.size:
                actions[agent]["Attack"] = {"Style": int(rng.integers(3)),
                                            "Target": int(rng.choice(target))}  # fmt: skip
        obs, *_ = env.step(actions)
        steps += len(actions)
    elapsed = time.monotonic() - start
    wrapper.close()
    return {"agent_steps_per_s": steps / elapsed}


def main(argv):
    del argv
    config = load_config_file(_CONFIG.value)
    run = run_adapter if _PATH.value == "adapter" else run_raw
    result = {
        "config": _CONFIG.value,
        "path": _PATH.value,
        "seconds": _SECONDS.value,
        "env": dict(config.env.kwargs),
        **run(config, _SECONDS.value, _SEED.value),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if _OUT.value:
        os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
        with open(_OUT.value, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    app.run(main)
