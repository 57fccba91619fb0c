"""The sides of the on-device benchmarks (benchmarks/ondevice.py on this machine,
benchmarks/accel_ondevice.py on an accelerator host): each a driver run in a process of its own
that prints one JSON line (compile_s, train_s, env_steps, final_return, and seed_returns: each
seed's, where a side has returns).

* purejaxrl: PureJaxRL's purejaxrl/ppo.py as it is, with a three-method stand-in for
  distrax.Categorical (distrax's TFP substrate does not load with this jax) and empty brax and
  navix modules (wrappers it does not use on gymnax); its config dict updated by `overrides`.
* purejaxql: purejaxql's pqn_gymnax.py (CartPole) or pqn_minatar.py (`game`), with empty hydra,
  omegaconf and safetensors modules (its command line and saving, not called).
* seedlike: the whole run (`seedlike.ondevice.run.train`, rows every 0.25 s), its config updated
  by `overrides` (dotted keys).
* seedlike_program: its program alone, three calls that make `steps` together after two warm-up
  calls, no rows.

Each side vmaps `seeds` agents in its one program (the anchors: jit(vmap(make_train)); seedlike:
config.seeds), and counts every agent's env steps.
"""

import dataclasses
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# PureJaxRL's settings for MinAtar (its examples/brax_minatar.ipynb) over ppo.py's CartPole ones,
# as configs/gymnax_minatar_ppo.py has them.
PUREJAXRL_MINATAR = {"NUM_ENVS": 64, "LR": 5e-3, "NUM_MINIBATCHES": 8, "ACTIVATION": "relu"}

PUREJAXRL_DRIVER = r"""
import json, sys, time, types
import jax, jax.numpy as jnp
class Categorical:  # distrax.Categorical's methods ppo.py calls
    def __init__(self, logits):
        self.logits = jax.nn.log_softmax(logits)
    def sample(self, seed):
        return jax.random.categorical(seed, self.logits)
    def log_prob(self, a):
        return jnp.take_along_axis(self.logits, a[..., None].astype(jnp.int32), -1)[..., 0]
    def entropy(self):
        return -jnp.sum(jnp.exp(self.logits) * self.logits, -1)
sys.modules["distrax"] = types.SimpleNamespace(Categorical=Categorical)
for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
    sys.modules[name] = types.ModuleType(name)
training = sys.modules["brax.envs.wrappers.training"]
training.EpisodeWrapper = training.AutoResetWrapper = object
sys.modules["brax"].envs = sys.modules["brax.envs"]
sys.path.insert(0, sys.argv[1])
import ppo
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": float(sys.argv[2]),
          "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
          "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
          "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False}
config.update(json.loads(sys.argv[5]))  # e.g. NUM_ENVS, ENV_NAME
envs, per = config["NUM_ENVS"], config["NUM_ENVS"] * config["NUM_STEPS"]
seeds = int(sys.argv[4])  # vmapped in one program, as PureJaxRL trains many seeds
key = jax.random.PRNGKey(int(sys.argv[3]))
rng = key[None] if seeds == 1 else jax.random.split(key, seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(ppo.make_train(config))).lower(rng).compile()
compiled_at = time.perf_counter()
out = jax.block_until_ready(compiled(rng))
done = time.perf_counter()
info = out["metrics"]
steps_seen = info["returned_episode"].reshape(seeds, -1, envs)
last = steps_seen.shape[1] // 10  # the last 10% of the env steps
ended = steps_seen[:, -last:]
returns = info["returned_episode_returns"].reshape(seeds, -1, envs)[:, -last:]
steps = seeds * (int(config["TOTAL_TIMESTEPS"]) // per * per)
print(json.dumps({"compile_s": compiled_at - start, "train_s": done - compiled_at,
                  "env_steps": steps, "final_return": float(returns[ended].mean()),
                  "seed_returns": [float(r[e].mean()) for r, e in zip(returns, ended)]}))
"""

PUREJAXQL_DRIVER = r"""
import json, sys, time, types
import jax, numpy as np
for name in ("hydra", "omegaconf", "safetensors", "safetensors.flax"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["hydra"].main = lambda **kw: (lambda f: f)
sys.modules["omegaconf"].OmegaConf = None
sys.modules["safetensors.flax"].load_file = sys.modules["safetensors.flax"].save_file = None
sys.path.insert(0, sys.argv[1])
steps, game = float(sys.argv[2]), sys.argv[5]
if not game:  # config/alg/pqn_cartpole.yaml
    import pqn_gymnax as script
    config = {"NUM_ENVS": 32, "NUM_STEPS": 64, "EPS_START": 1.0, "EPS_FINISH": 0.2,
              "EPS_DECAY": 0.2, "NUM_MINIBATCHES": 16, "NUM_EPOCHS": 4, "NORM_INPUT": False,
              "HIDDEN_SIZE": 256, "NUM_LAYERS": 2, "NORM_TYPE": "layer_norm", "LR": 1e-4,
              "MAX_GRAD_NORM": 10, "LR_LINEAR_DECAY": True, "REW_SCALE": 0.1, "GAMMA": 0.99,
              "LAMBDA": 0.95, "ENV_NAME": "CartPole-v1"}
else:  # config/alg/pqn_minatar.yaml
    import pqn_minatar as script
    config = {"NUM_ENVS": 128, "NUM_STEPS": 32, "EPS_START": 1.0, "EPS_FINISH": 0.05,
              "EPS_DECAY": 0.1, "NUM_MINIBATCHES": 32, "NUM_EPOCHS": 2,
              "NORM_TYPE": "layer_norm", "LR": 5e-4, "MAX_GRAD_NORM": 10,
              "LR_LINEAR_DECAY": True, "GAMMA": 0.99, "LAMBDA": 0.65,
              "ENV_NAME": f"{game}-MinAtar"}
config.update({"TOTAL_TIMESTEPS": steps, "TOTAL_TIMESTEPS_DECAY": steps, "ENV_KWARGS": {},
               "TEST_DURING_TRAINING": False, "WANDB_MODE": "disabled"})
config.update(json.loads(sys.argv[6]))
seeds = int(sys.argv[4])  # vmapped in one program, as purejaxql's NUM_SEEDS
key = jax.random.PRNGKey(int(sys.argv[3]))
rng = key[None] if seeds == 1 else jax.random.split(key, seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(script.make_train(config))).lower(rng).compile()
compiled_at = time.perf_counter()
out = jax.block_until_ready(compiled(rng))
done = time.perf_counter()
returns = np.asarray(out["metrics"]["returned_episode_returns"])  # [seeds, updates]
last = max(returns.shape[1] // 10, 1)
print(json.dumps({"compile_s": compiled_at - start, "train_s": done - compiled_at,
                  "env_steps": int(np.asarray(out["metrics"]["env_step"])[:, -1].sum()),
                  "final_return": float(returns[:, -last:].mean()),
                  "seed_returns": returns[:, -last:].mean(axis=1).tolist()}))
"""

SEEDLIKE_DRIVER = r"""
import json, sys, time
from seedlike.config import load_config_file
from seedlike.metrics import read_metrics
from seedlike.ondevice import run
c = load_config_file(sys.argv[4])
c.unlock(); c.total_env_steps = int(sys.argv[2]); c.seed = int(sys.argv[3])
c.seeds = int(sys.argv[5])
for key, value in json.loads(sys.argv[6]).items():  # dotted keys
    *path, last = key.split("."); node = c
    for part in path: node = node[part]
    node[last] = value
c.log.wandb_mode = "disabled"; c.log.interval_s = 0.25; c.checkpoint.interval_s = 1e9; c.lock()
start = time.time()
run.train(c, sys.argv[1])
dirs = [sys.argv[1]] if c.seeds == 1 else [f"{sys.argv[1]}/seed_{k}" for k in range(c.seeds)]
rows = [read_metrics(d) for d in dirs]
first, last = rows[0][0], rows[0][-1]  # the first call compiles (and makes one update)
tails = [[r for r in rs if r["env_steps"] > 0.9 * last["env_steps"] and r["episodes"]]
         for rs in rows]
def mean_return(tail):
    n = sum(r["episodes"] for r in tail)
    return sum(r["episode_return_mean"] * r["episodes"] for r in tail) / n if n else None
print(json.dumps({"compile_s": first["time"] - start, "train_s": last["time"] - first["time"],
                  "env_steps": c.seeds * (last["env_steps"] - first["env_steps"]),
                  "final_return": mean_return([r for t in tails for r in t]),
                  "seed_returns": [mean_return(t) for t in tails]}))
"""

# seedlike's program alone: three calls that make the run's env steps together, after two warm-up
# calls, no rows written.
PROGRAM_DRIVER = r"""
import json, sys, time
from seedlike.config import load_config_file
from seedlike.ondevice import run
c = load_config_file(sys.argv[4])
c.unlock(); c.seed = int(sys.argv[3]); c.seeds = int(sys.argv[5])
for key, value in json.loads(sys.argv[6]).items():  # dotted keys
    *path, last = key.split("."); node = c
    for part in path: node = node[part]
    node[last] = value
c.log.wandb_mode = "disabled"; c.league.eval_interval_s = 0.0  # the program alone
c.lock()
per_call = max(1, int(sys.argv[2]) // 3 // (c.batch_unrolls * c.unroll_length))
r = run.DeviceRun(c, sys.argv[1])
start = time.perf_counter(); r.call(1); compiled = time.perf_counter(); r.call(1)
times = []
for _ in range(3):
    t = time.perf_counter(); r.call(per_call); times.append(time.perf_counter() - t)
print(json.dumps({"compile_s": compiled - start, "train_s": sum(times),
                  "env_steps": 3 * per_call * c.seeds * c.batch_unrolls * c.unroll_length,
                  "final_return": None}))
"""


@dataclasses.dataclass(frozen=True)
class Side:
    """What one side runs: `steps` env steps per agent of `seeds`, from `seed`; `source` the
    anchor's folder (purejaxrl, purejaxql) or seedlike's config (path[:arg]); `overrides` its
    settings (the anchor's config keys, seedlike's dotted keys); `game` a MinAtar game of
    purejaxql's (else CartPole)."""

    steps: int
    seed: int
    source: str
    seeds: int = 1
    overrides: dict = dataclasses.field(default_factory=dict)
    game: str = ""


def run_side(name: str, side: Side, logdir: str, env: dict) -> dict:
    """The side's JSON line, with sps (env steps / training s), printed as it comes."""
    steps, seed, seeds = str(side.steps), str(side.seed), str(side.seeds)
    overrides = json.dumps(side.overrides)
    if name == "purejaxrl":
        args = [PUREJAXRL_DRIVER, side.source, steps, seed, seeds, overrides]
    elif name == "purejaxql":
        args = [PUREJAXQL_DRIVER, side.source, steps, seed, seeds, side.game, overrides]
    elif name == "seedlike_program":
        program_dir = os.path.join(logdir, f"program_{seed}")
        args = [PROGRAM_DRIVER, program_dir, steps, seed, side.source, seeds, overrides]
    else:
        run_dir = os.path.join(logdir, f"seed_{seed}")
        args = [SEEDLIKE_DRIVER, run_dir, steps, seed, side.source, seeds, overrides]
    out = subprocess.run([sys.executable, "-c", *args], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["sps"] = result["env_steps"] / result["train_s"]
    print(name, seed, result, flush=True)
    return result
