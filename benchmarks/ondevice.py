"""The on-device runtime against the anchors' own single-file scripts (fetched, not copied), on
gymnax CartPole-v1 with their settings, in the same process layout (one program per run),
alternating, same machine:

    python -m benchmarks.ondevice --purejaxrl=/path/to/purejaxrl/purejaxrl --pairs=3
    python -m benchmarks.ondevice --algo=pqn --purejaxql=/path/to/purejaxql/purejaxql --pairs=3
    python -m benchmarks.ondevice --purejaxrl=... --seeds=8   # 8 agents vmapped, each side
    python -m benchmarks.ondevice --algo=pqn --purejaxql=... --game=Breakout --steps=2000000

PPO: PureJaxRL's purejaxrl/ppo.py (github luchris429/purejaxrl) against
configs/gymnax_cartpole_ppo.py, 4 envs x 128 steps. PQN: purejaxql's purejaxql/pqn_gymnax.py
(github mttga/purejaxql) with its config/alg/pqn_cartpole.yaml against
configs/gymnax_cartpole_pqn.py, 32 envs x 64 steps; its evaluation during training is off
(TEST_DURING_TRAINING), as seedlike's run has none, and it keeps its RAdam where seedlike has Adam.
With --game=GAME (PQN): purejaxql/pqn_minatar.py with config/alg/pqn_minatar.yaml against
configs/gymnax_minatar_pqn.py:GAME, 128 envs x 32 steps, both annealing over the run's --steps.

Each side runs in a process of its own with one CPU device. PureJaxRL's script imports distrax
(whose TFP substrate does not load with this jax), brax and navix (not installed) for wrappers
it does not use on gymnax: the driver below gives it a categorical distribution of the same three
methods and an empty brax module, and changes nothing of its code. purejaxql's imports hydra,
omegaconf and safetensors for its command line and saving, which the driver does not call: empty
modules stand in. Reported apart: compile time (the anchor: jit lowering and compiling;
seedlike: its first call, one update with it) and training time, env steps/s of training, and the
mean return of the episodes that ended in the last 10% of the env steps (purejaxql: the mean over
those updates of its LogWrapper's returned_episode_returns, the last finished episode's return of
each env). A third side times seedlike's program alone (three calls that make the run's env
steps together, after two warm-up calls, no rows): what the host loop around it costs is the
difference. With --seeds=N each side trains N agents vmapped in its one program (the anchors'
own way to train seeds: jit(vmap(make_train)); seedlike's config.seeds), env steps/s counting
every agent's. Writes JSON (--out).
"""

import json
import os
import subprocess
import sys

from absl import app, flags

from benchmarks import results_io

_ALGO = flags.DEFINE_enum("algo", "ppo", ["ppo", "pqn"], "ppo: against PureJaxRL; pqn: purejaxql.")
_PUREJAXRL = flags.DEFINE_string("purejaxrl", None, "Folder of purejaxrl's ppo.py and wrappers.py.")
_PUREJAXQL = flags.DEFINE_string("purejaxql", None, "Folder of purejaxql's pqn_gymnax.py.")
_PAIRS = flags.DEFINE_integer("pairs", 3, "Alternating runs of each side.")
_STEPS = flags.DEFINE_integer("steps", 500_000, "Env steps per run (per seed).")
_PROGRAM = flags.DEFINE_bool("program", True, "Also time seedlike's program alone (a third side).")
_GAME = flags.DEFINE_string(
    "game", "", "A gymnax MinAtar game (Breakout, ...) instead of CartPole (--algo=pqn only)."
)
_SEEDS = flags.DEFINE_integer(
    "seeds", 1, "Agents vmapped in each side's one program (seedlike: config.seeds)."
)
_OUT = flags.DEFINE_string("out", None, "JSON path (default: benchmarks/results/ondevice-*.json).")

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
seeds = int(sys.argv[4])  # vmapped in one program, as PureJaxRL trains many seeds
key = jax.random.PRNGKey(int(sys.argv[3]))
rng = key[None] if seeds == 1 else jax.random.split(key, seeds)
start = time.perf_counter()
compiled = jax.jit(jax.vmap(ppo.make_train(config))).lower(rng).compile()
compiled_at = time.perf_counter()
out = jax.block_until_ready(compiled(rng))
done = time.perf_counter()
info = out["metrics"]
steps_seen = info["returned_episode"].reshape(seeds, -1, 4)
last = steps_seen.shape[1] // 10  # the last 10% of the env steps
ended = steps_seen[:, -last:]
returns = info["returned_episode_returns"].reshape(seeds, -1, 4)[:, -last:]
steps = seeds * (int(config["TOTAL_TIMESTEPS"]) // 512 * 512)
print(json.dumps({"compile_s": compiled_at - start, "train_s": done - compiled_at,
                  "env_steps": steps, "final_return": float(returns[ended].mean())}))
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
                  "final_return": float(returns[:, -last:].mean())}))
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
tail = [r for rs in rows for r in rs if r["env_steps"] > 0.9 * last["env_steps"] and r["episodes"]]
print(json.dumps({"compile_s": first["time"] - start, "train_s": last["time"] - first["time"],
                  "env_steps": c.seeds * (last["env_steps"] - first["env_steps"]),
                  "final_return": sum(r["episode_return_mean"] * r["episodes"] for r in tail)
                  / sum(r["episodes"] for r in tail)}))
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
c.log.wandb_mode = "disabled"; c.lock()
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


CONFIGS = {"ppo": "configs/gymnax_cartpole_ppo.py", "pqn": "configs/gymnax_cartpole_pqn.py"}
GAME_CONFIGS = {"pqn": "configs/gymnax_minatar_pqn.py"}
ANCHORS = {"ppo": "purejaxrl", "pqn": "purejaxql"}


def side(name: str, seed: int, logdir: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env.pop("XLA_FLAGS", None)  # one device on each side
    game, steps = _GAME.value, _STEPS.value
    config = f"{GAME_CONFIGS[_ALGO.value]}:{game}" if game else CONFIGS[_ALGO.value]
    # A game's run anneals over its own env steps on both sides (purejaxql's decays are shares
    # of TOTAL_TIMESTEPS_DECAY: 10% for epsilon, all of it for the learning rate).
    overrides = json.dumps({"pqn.anneal_steps": steps // 10} if game else {})
    seeds = str(_SEEDS.value)
    if name == "purejaxrl":
        args = ["-c", PUREJAXRL_DRIVER, _PUREJAXRL.value, str(steps), str(seed), seeds]
    elif name == "purejaxql":
        args = ["-c", PUREJAXQL_DRIVER, _PUREJAXQL.value, str(steps), str(seed), seeds, game]
    elif name == "seedlike_program":
        args = ["-c", PROGRAM_DRIVER, os.path.join(logdir, f"program_{seed}"), str(steps),
                str(seed), config, seeds, overrides]  # fmt: skip
    else:
        args = ["-c", SEEDLIKE_DRIVER, os.path.join(logdir, f"seed_{seed}"), str(steps),
                str(seed), config, seeds, overrides]  # fmt: skip
    out = subprocess.run([sys.executable, *args], cwd=results_io.ROOT, env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["sps"] = result["env_steps"] / result["train_s"]
    print(name, seed, result, flush=True)
    return result


def main(argv):
    del argv
    import tempfile

    logdir = tempfile.mkdtemp(prefix="ondevice-")
    anchor = ANCHORS[_ALGO.value]
    if _GAME.value and _ALGO.value not in GAME_CONFIGS:
        raise app.UsageError(f"--game is for --algo={sorted(GAME_CONFIGS)}")
    if not {"purejaxrl": _PUREJAXRL, "purejaxql": _PUREJAXQL}[anchor].value:
        raise app.UsageError(f"--algo={_ALGO.value} runs against {anchor}: pass --{anchor}=FOLDER")
    runs = {anchor: [], "seedlike": [], **({"seedlike_program": []} if _PROGRAM.value else {})}
    for seed in range(_PAIRS.value):
        for name in runs:
            runs[name].append(side(name, seed, logdir))

    def median(values):  # of the runs that report the value (the program alone has no return)
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    keys = ("compile_s", "train_s", "sps", "final_return")
    summary = {name: {k: median([r[k] for r in rs]) for k in keys} for name, rs in runs.items()}
    for name in ("seedlike", "seedlike_program")[: 1 + _PROGRAM.value]:
        summary[name]["sps_ratio"] = summary[name]["sps"] / summary[anchor]["sps"]
    game = _GAME.value or "CartPole"
    record = {"algo": _ALGO.value, "game": game, "steps": _STEPS.value, "seeds": _SEEDS.value,
              "runs": runs, "median": summary}  # fmt: skip
    results_io.write(f"ondevice-{_ALGO.value}-{game}-seeds{_SEEDS.value}", record,
                     _OUT.value, echo=summary)  # fmt: skip


if __name__ == "__main__":
    app.run(main)
