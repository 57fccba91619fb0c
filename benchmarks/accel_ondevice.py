"""On-device env steps/s at accelerator sizes, one device: gymnax CartPole-v1 at 2^12-2^16 envs,
MinAtar Breakout at 2^10-2^13 envs, pgx Connect Four self-play with the league
(configs/pgx_connect4.py; learner moves/s, each with the opponent's reply; about 14 per game) at
2^12-2^14 envs and brax ant (configs/brax_ppo.py:ant, 5 steps per env and update) at 2^12-2^14
envs, seedlike's compiled program beside PureJaxRL's
purejaxrl/ppo.py at the same sizes and settings (128 steps per env and update, its 64 x 64 MLPs
on the flattened observation; CartPole at ppo.py's own settings, Breakout at those PureJaxRL
tuned for MinAtar, as configs/gymnax_minatar_ppo.py has them), one size after another:

  python3 -m benchmarks.accel_ondevice --site=.gpu/site --purejaxrl=shared/purejaxrl \\
      --out=$OUT/ondevice.json

Made for the accelerator host of ../shared/gpu/README.md, within 5 minutes there: --site puts
.gpu's site-packages (which must hold gymnax, pgx, brax and their imports) on every process's
path, and PureJaxRL's ppo.py and wrappers.py travel in the working tree in a folder git ignores
(fetched from github luchris429/purejaxrl, not committed); without --purejaxrl only seedlike
runs. Each side trains --updates policy versions per size in a process of its own
(benchmarks/ondevice_sides.py: seedlike's program alone, three timed calls after two warm-up
ones; PureJaxRL's whole jitted run, compiled apart). --budget_s stops starting new sizes.
Writes JSON and prints a Markdown table.
"""

import json
import os
import tempfile
import time

from absl import app, flags

from benchmarks import ondevice_sides as sides
from benchmarks import results_io

_CARTPOLE = flags.DEFINE_list("cartpole_envs", ["4096", "16384", "65536"], "CartPole env counts.")
_BREAKOUT = flags.DEFINE_list("breakout_envs", ["1024", "8192"], "MinAtar Breakout env counts.")
_CONNECT4 = flags.DEFINE_list("connect4_envs", ["4096", "16384"], "pgx Connect Four env counts.")
_ANT = flags.DEFINE_list("ant_envs", ["4096", "16384"], "brax ant env counts.")
_UPDATES = flags.DEFINE_integer("updates", 6, "Policy versions each side trains per size.")
_PUREJAXRL = flags.DEFINE_string("purejaxrl", "", "Folder of purejaxrl's ppo.py and wrappers.py.")
_SITE = flags.DEFINE_string("site", "", "Packages for every process (.gpu/site on the host).")
_BUDGET = flags.DEFINE_float("budget_s", 270.0, "No new size starts after this many seconds.")
_OUT = flags.DEFINE_string("out", None, "JSON path (default benchmarks/results/...).")

LENGTH = 128  # PureJaxRL's NUM_STEPS
# task -> (seedlike config, PureJaxRL's settings for it: ppo.py's own for CartPole; None where
# no PureJaxRL side runs, and the config's own unroll_length is the steps per env and update)
TASKS = {
    "CartPole": ("configs/gymnax_cartpole_ppo.py", {"ENV_NAME": "CartPole-v1"}),
    "Breakout": (
        "configs/gymnax_minatar_ppo.py:Breakout",
        {**sides.PUREJAXRL_MINATAR, "ENV_NAME": "Breakout-MinAtar"},
    ),
    "ConnectFour": ("configs/pgx_connect4.py", None),
    "Ant": ("configs/brax_ppo.py:ant", None),
}


def child_env() -> dict:
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)  # one device
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)  # set for this process only (main)
    paths = [sides.ROOT] + ([os.path.abspath(_SITE.value)] if _SITE.value else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def unroll_length(config: str) -> int:
    from seedlike.config import load_config_file

    return int(load_config_file(os.path.join(sides.ROOT, config)).unroll_length)


def measure(task: str, envs: int, logdir: str) -> dict:
    """Both sides at one size: {side: its JSON line}."""
    config, anchor = TASKS[task]
    length = LENGTH if anchor is not None else unroll_length(config)
    steps = envs * length * _UPDATES.value
    ours = sides.Side(steps, 0, config, overrides={"batch_unrolls": envs})
    out = {"seedlike_program": sides.run_side("seedlike_program", ours, logdir, child_env())}
    if _PUREJAXRL.value and anchor is not None:
        theirs = sides.Side(steps, 0, _PUREJAXRL.value,
                            overrides={**anchor, "NUM_ENVS": envs})  # fmt: skip
        out["purejaxrl"] = sides.run_side("purejaxrl", theirs, logdir, child_env())
    return out


def markdown(rows: list[dict]) -> str:
    lines = [
        "| task | envs | seedlike env steps/s | PureJaxRL env steps/s | ratio | compile s |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        ours, theirs = r["sides"]["seedlike_program"], r["sides"].get("purejaxrl")
        ratio = f"{ours['sps'] / theirs['sps']:.2f}x" if theirs else "-"
        compile_s = f"{ours['compile_s']:.1f} / " + (
            f"{theirs['compile_s']:.1f}" if theirs else "-"
        )
        their_sps = f"{theirs['sps']:,.0f}" if theirs else "-"
        row = (r["task"], r["envs"], f"{ours['sps']:,.0f}", their_sps, ratio, compile_s)
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    # This process only names the device: it must not take the memory its children measure in.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax

    started, logdir, rows = time.monotonic(), tempfile.mkdtemp(prefix="accel-ondevice-"), []
    sizes = [("CartPole", int(n)) for n in _CARTPOLE.value]
    sizes += [("Breakout", int(n)) for n in _BREAKOUT.value]
    sizes += [("ConnectFour", int(n)) for n in _CONNECT4.value]
    sizes += [("Ant", int(n)) for n in _ANT.value]
    for task, envs in sizes:
        if time.monotonic() - started > _BUDGET.value:
            print(f"budget spent: {task} at {envs} envs and later sizes not run", flush=True)
            break
        rows.append({"task": task, "envs": envs, "sides": measure(task, envs, logdir)})
    record = {"device": str(jax.devices()[0]), "updates": _UPDATES.value, "rows": rows}
    print(markdown(rows))
    results_io.write("accel-ondevice", record, _OUT.value)
    if _OUT.value:
        with open(os.path.splitext(_OUT.value)[0] + ".md", "w") as f:
            f.write(markdown(rows) + "\n")
    print(json.dumps({"wall_s": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    app.run(main)
