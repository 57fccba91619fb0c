"""The on-device runtime against the anchors' own single-file scripts (fetched, not copied), on
gymnax CartPole-v1 with their settings, in the same process layout (one program per run),
alternating, same machine:

    python -m benchmarks.ondevice --purejaxrl=/path/to/purejaxrl/purejaxrl --pairs=3
    python -m benchmarks.ondevice --algo=pqn --purejaxql=/path/to/purejaxql/purejaxql --pairs=3
    python -m benchmarks.ondevice --purejaxrl=... --seeds=8   # 8 agents vmapped, each side
    python -m benchmarks.ondevice --algo=pqn --purejaxql=... --game=Breakout --steps=2000000
    python -m benchmarks.ondevice --purejaxrl=... --game=SpaceInvaders --steps=10000000 --seeds=3

PPO: PureJaxRL's purejaxrl/ppo.py (github luchris429/purejaxrl) against
configs/gymnax_cartpole_ppo.py, 4 envs x 128 steps. PQN: purejaxql's purejaxql/pqn_gymnax.py
(github mttga/purejaxql) with its config/alg/pqn_cartpole.yaml against
configs/gymnax_cartpole_pqn.py, 32 envs x 64 steps; its evaluation during training is off
(TEST_DURING_TRAINING), as seedlike's run has none, and it keeps its RAdam where seedlike has Adam.
With --game=GAME (a gymnax MinAtar game): PPO runs ppo.py at the settings PureJaxRL tuned for
MinAtar (examples/brax_minatar.ipynb: 64 envs x 128 steps, 8 minibatches, Adam 5e-3, relu)
against configs/gymnax_minatar_ppo.py:GAME; PQN runs purejaxql/pqn_minatar.py with
config/alg/pqn_minatar.yaml against configs/gymnax_minatar_pqn.py:GAME, 128 envs x 32 steps;
both sides anneal over the run's --steps.

Each side runs in a process of its own with one CPU device (the drivers and what they stand in
for: benchmarks/ondevice_sides.py). Reported apart: compile time (the anchor: jit lowering and
compiling; seedlike: its first call, one update with it) and training time, env steps/s of
training, and the mean return of the episodes that ended in the last 10% of the env steps
(purejaxql: the mean over those updates of its LogWrapper's returned_episode_returns, the last
finished episode's return of each env). A third side times seedlike's program alone: what the
host loop around it costs is the difference. With --seeds=N each side trains N agents vmapped in
its one program, env steps/s counting every agent's. Writes JSON (--out).
"""

import os

from absl import app, flags

from benchmarks import ondevice_sides as sides
from benchmarks import results_io

_ALGO = flags.DEFINE_enum("algo", "ppo", ["ppo", "pqn"], "ppo: against PureJaxRL; pqn: purejaxql.")
_PUREJAXRL = flags.DEFINE_string("purejaxrl", None, "Folder of purejaxrl's ppo.py and wrappers.py.")
_PUREJAXQL = flags.DEFINE_string("purejaxql", None, "Folder of purejaxql's pqn_gymnax.py.")
_PAIRS = flags.DEFINE_integer("pairs", 3, "Alternating runs of each side.")
_STEPS = flags.DEFINE_integer("steps", 500_000, "Env steps per run (per seed).")
_FIRST_SEED = flags.DEFINE_integer(
    "first_seed", 0, "The first pair's seed (pair k runs first_seed + k): new seeds for a rerun."
)
_PROGRAM = flags.DEFINE_bool("program", True, "Also time seedlike's program alone (a third side).")
_GAME = flags.DEFINE_string(
    "game", "", "A gymnax MinAtar game (Breakout, ...) instead of CartPole."
)
_SEEDS = flags.DEFINE_integer(
    "seeds", 1, "Agents vmapped in each side's one program (seedlike: config.seeds)."
)
_OUT = flags.DEFINE_string("out", None, "JSON path (default: benchmarks/results/ondevice-*.json).")

CONFIGS = {"ppo": "configs/gymnax_cartpole_ppo.py", "pqn": "configs/gymnax_cartpole_pqn.py"}
GAME_CONFIGS = {"ppo": "configs/gymnax_minatar_ppo.py", "pqn": "configs/gymnax_minatar_pqn.py"}
ANCHORS = {"ppo": "purejaxrl", "pqn": "purejaxql"}


def side(name: str, seed: int, logdir: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env.pop("XLA_FLAGS", None)  # one device on each side
    game, steps = _GAME.value, _STEPS.value
    anchors = {"purejaxrl": _PUREJAXRL.value, "purejaxql": _PUREJAXQL.value}
    if name == "purejaxrl":
        minatar = {**sides.PUREJAXRL_MINATAR, "ENV_NAME": f"{game}-MinAtar"} if game else {}
        spec = sides.Side(steps, seed, anchors[name], _SEEDS.value, minatar)
    elif name in anchors:
        spec = sides.Side(steps, seed, anchors[name], _SEEDS.value, game=game)
    else:
        config = f"{GAME_CONFIGS[_ALGO.value]}:{game}" if game else CONFIGS[_ALGO.value]
        # A game's run anneals over its own env steps on both sides (purejaxql's decays are
        # shares of TOTAL_TIMESTEPS_DECAY: 10% for epsilon, all of it for the learning rate).
        overrides = {"pqn.anneal_steps": steps // 10} if game and _ALGO.value == "pqn" else {}
        spec = sides.Side(steps, seed, config, _SEEDS.value, overrides)
    return sides.run_side(name, spec, logdir, env)


def main(argv):
    del argv
    import tempfile

    logdir = tempfile.mkdtemp(prefix="ondevice-")
    anchor = ANCHORS[_ALGO.value]
    if not {"purejaxrl": _PUREJAXRL, "purejaxql": _PUREJAXQL}[anchor].value:
        raise app.UsageError(f"--algo={_ALGO.value} runs against {anchor}: pass --{anchor}=FOLDER")
    runs = {anchor: [], "seedlike": [], **({"seedlike_program": []} if _PROGRAM.value else {})}
    for seed in range(_FIRST_SEED.value, _FIRST_SEED.value + _PAIRS.value):
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
