"""The on-device runtime against PureJaxRL's own single-file PPO (github luchris429/purejaxrl,
purejaxrl/ppo.py, fetched, not copied), on gymnax CartPole-v1 with its settings: 4 envs x 128
steps, 500k env steps, in the same process layout (one program per run), alternating, same
machine:

    python -m benchmarks.ondevice --purejaxrl=/path/to/purejaxrl/purejaxrl --pairs=3

Each side runs in a process of its own with one CPU device. PureJaxRL's script imports distrax
(whose TFP substrate does not load with this jax), brax and navix (not installed) for wrappers
it does not use on gymnax: the driver below gives it a categorical distribution of the same three
methods and an empty brax module, and changes nothing of its code. Reported apart: compile
time (PureJaxRL: jit lowering and compiling; seedlike: its first call, one update with it) and
training time, env steps/s of training, and the mean return of the episodes that ended in the
last 10% of the env steps. A third side times seedlike's program alone (three calls of 200
updates after two warm-up calls, no rows): what the host loop around it costs is the difference.
Writes JSON (--out).
"""

import json
import os
import subprocess
import sys

from absl import app, flags

from benchmarks import results_io

_PUREJAXRL = flags.DEFINE_string("purejaxrl", None, "Folder of purejaxrl's ppo.py and wrappers.py.")
_PAIRS = flags.DEFINE_integer("pairs", 3, "Alternating runs of each side.")
_STEPS = flags.DEFINE_integer("steps", 500_000, "Env steps per run.")
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
rng = jax.random.PRNGKey(int(sys.argv[3]))
start = time.perf_counter()
compiled = jax.jit(ppo.make_train(config)).lower(rng).compile()
compiled_at = time.perf_counter()
out = jax.block_until_ready(compiled(rng))
done = time.perf_counter()
info = out["metrics"]
steps_seen = info["returned_episode"].reshape(-1, 4)
last = len(steps_seen) // 10  # the last 10% of the env steps
ended, returns = steps_seen[-last:], info["returned_episode_returns"].reshape(-1, 4)[-last:]
steps = int(config["TOTAL_TIMESTEPS"]) // 512 * 512
print(json.dumps({"compile_s": compiled_at - start, "train_s": done - compiled_at,
                  "env_steps": steps, "final_return": float(returns[ended].mean())}))
"""

SEEDLIKE_DRIVER = r"""
import json, sys, time
from seedlike.config import load_config_file
from seedlike.metrics import read_metrics
from seedlike.ondevice import run
c = load_config_file("configs/gymnax_cartpole_ppo.py")
c.unlock(); c.total_env_steps = int(sys.argv[2]); c.seed = int(sys.argv[3])
c.log.wandb_mode = "disabled"; c.log.interval_s = 0.25; c.checkpoint.interval_s = 1e9; c.lock()
start = time.time()
run.train(c, sys.argv[1])
rows = read_metrics(sys.argv[1])
first, last = rows[0], rows[-1]  # the first call compiles (and makes one update)
tail = [r for r in rows if r["env_steps"] > 0.9 * last["env_steps"] and r["episodes"]]
print(json.dumps({"compile_s": first["time"] - start, "train_s": last["time"] - first["time"],
                  "env_steps": last["env_steps"] - first["env_steps"],
                  "final_return": sum(r["episode_return_mean"] * r["episodes"] for r in tail)
                  / sum(r["episodes"] for r in tail)}))
"""

# seedlike's program alone: calls of 200 updates after two warm-up calls, no rows written.
PROGRAM_DRIVER = r"""
import json, sys, time
from seedlike.config import load_config_file
from seedlike.ondevice import run
c = load_config_file("configs/gymnax_cartpole_ppo.py")
c.unlock(); c.seed = int(sys.argv[3]); c.log.wandb_mode = "disabled"; c.lock()
r = run.DeviceRun(c, sys.argv[1])
start = time.perf_counter(); r.call(1); compiled = time.perf_counter(); r.call(1)
times = []
for _ in range(3):
    t = time.perf_counter(); r.call(200); times.append(time.perf_counter() - t)
print(json.dumps({"compile_s": compiled - start, "train_s": sum(times),
                  "env_steps": 600 * c.batch_unrolls * c.unroll_length, "final_return": None}))
"""


def side(name: str, seed: int, logdir: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env.pop("XLA_FLAGS", None)  # one device on each side
    if name == "purejaxrl":
        args = ["-c", PUREJAXRL_DRIVER, _PUREJAXRL.value, str(_STEPS.value), str(seed)]
    elif name == "seedlike_program":
        args = ["-c", PROGRAM_DRIVER, os.path.join(logdir, f"program_{seed}"), "0", str(seed)]
    else:
        args = ["-c", SEEDLIKE_DRIVER, os.path.join(logdir, f"seed_{seed}"), str(_STEPS.value),
                str(seed)]  # fmt: skip
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
    runs = {"purejaxrl": [], "seedlike": [], "seedlike_program": []}
    for seed in range(_PAIRS.value):
        for name in runs:
            runs[name].append(side(name, seed, logdir))

    def median(values):  # of the runs that report the value (the program alone has no return)
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    keys = ("compile_s", "train_s", "sps", "final_return")
    summary = {name: {k: median([r[k] for r in rs]) for k in keys} for name, rs in runs.items()}
    for name in ("seedlike", "seedlike_program"):
        summary[name]["sps_ratio"] = summary[name]["sps"] / summary["purejaxrl"]["sps"]
    results_io.write("ondevice", {"steps": _STEPS.value, "runs": runs, "median": summary},
                     _OUT.value, echo=summary)  # fmt: skip


if __name__ == "__main__":
    flags.mark_flag_as_required("purejaxrl")
    app.run(main)
