"""The Rainbow-style learner's full-size results, beside PPO, with seeds and curves.

    python -m benchmarks.rainbow --logdir=runs/minatar                      # MinAtar, 2 games
    python -m benchmarks.rainbow --logdir=runs/m --games=Breakout --rainbow_seeds=1 --ppo_seeds=0
    python -m benchmarks.rainbow --logdir=runs/cartpole --games=CartPole --steps=500000 \
        --rainbow_seeds=3 --ppo_seeds=0

MinAtar (Young & Tian 2019): configs/minatar_rainbow.py:GAME and configs/minatar_ppo.py:GAME at
2M env steps, against MinAtar's own DQN curves at 5M frames (read from the repository's plot:
about 10 on Breakout, 43 on SpaceInvaders). CartPole: configs/cartpole_rainbow.py (and
cartpole_ppo.py), against CleanRL's dqn.py (488.7 +- 16.1 at 500k steps).

Runs go one after another through scripts/train.sh (rerun the same command to resume: a finished
run is read, an interrupted one continues from its checkpoint); each finished run's last
checkpoint is then played greedily (evaluate.py --greedy, --eval_episodes). Writes
<logdir>/rainbow.json, rainbow.md (per-seed final returns: the mean of the last 10% of a run's
training episodes, the greedy evaluation, wall times) and rainbow.png (every run's curve).
"""

import json
import os

import numpy as np
from absl import app, flags

from benchmarks.results_io import (
    greedy_return,
    over_seeds,
    per_seed,
    plot_curves,
    run_summary,
    stat_cell,
    train,
    write_markdown,
)

# MinAtar's DQN at 5M frames (its plot); CleanRL dqn.py on CartPole-v1 at 500k steps.
REFERENCE = {"Breakout": 10.0, "SpaceInvaders": 43.0, "CartPole": 488.7}

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the runs and the results go.")
_GAMES = flags.DEFINE_list("games", ["Breakout", "SpaceInvaders"], "MinAtar games or CartPole.")
_RAINBOW = flags.DEFINE_integer("rainbow_seeds", 3, "Rainbow runs per game.")
_PPO = flags.DEFINE_integer("ppo_seeds", 1, "PPO runs per game.")
_STEPS = flags.DEFINE_integer("steps", 2_000_000, "Env steps per run.")
_ACTORS = flags.DEFINE_integer("actors", 2, "Actor processes per run.")
_FLAGS = flags.DEFINE_multi_string("flag", [], "Extra --config.x=v flags for every run.")
_EVAL = flags.DEFINE_integer("eval_episodes", 20, "Greedy episodes of each final checkpoint.")


def config_path(algo: str, game: str) -> str:
    if game == "CartPole":
        return f"configs/cartpole_{algo}.py"
    return f"configs/minatar_{algo}.py:{game}"


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    results = {}
    for game in _GAMES.value:
        for algo, seeds in (("rainbow", _RAINBOW.value), ("ppo", _PPO.value)):
            runs = []
            for seed in range(seeds):
                run_dir = os.path.join(logdir, game, algo, f"seed_{seed}")
                train(run_dir, config_path(algo, game), seed, _STEPS.value, _ACTORS.value,
                      _FLAGS.value)  # fmt: skip
                greedy = greedy_return(run_dir, _EVAL.value)
                runs.append({**run_summary(run_dir), "greedy": greedy})
            if runs:
                finals = [r["final"] for r in runs]
                results[f"{game}/{algo}"] = {
                    "finals": finals,
                    "mean": float(np.mean(finals)),
                    "over_seeds": over_seeds(finals),
                    "greedy": [r["greedy"] for r in runs],
                    "best_row": [r["best_row"] for r in runs],
                    "wall_s": [r["wall_s"] for r in runs],
                    "sps": [r["sps"] for r in runs],
                    "reference": REFERENCE.get(game),
                    "curves": [r["curve"] for r in runs],
                }
    with open(os.path.join(logdir, "rainbow.json"), "w") as f:
        json.dump({"steps": _STEPS.value, "flags": _FLAGS.value, "runs": results}, f, indent=1)
    lines = [
        "| game / algo | seeds (final) | IQM [95%] | mean [95%] | greedy | best row | reference "
        "| wall min/run | env steps/s |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for key, r in results.items():
        lines.append(
            f"| {key} | {per_seed(r['finals'])} | {stat_cell(r['over_seeds'], 'iqm')} | "
            f"{stat_cell(r['over_seeds'], 'mean')} | {per_seed(r['greedy'])} | "
            f"{per_seed(r['best_row'])} | {r['reference'] or '-'} | "
            f"{np.mean(r['wall_s']) / 60:.0f} | {np.mean(r['sps']):,.0f} |"
        )
    write_markdown(os.path.join(logdir, "rainbow.md"), lines)
    plot(results, os.path.join(logdir, "rainbow.png"))
    return 0


def plot(results: dict, path: str) -> None:
    panels = {}
    for key, r in results.items():
        game, algo = key.split("/")
        curves, _ = panels.setdefault(game, ([], None))
        curves += [(f"{algo} seed {k}", curve) for k, curve in enumerate(r["curves"])]
        if REFERENCE.get(game):
            panels[game] = (curves, (REFERENCE[game], "reference (docstring)"))
    plot_curves(panels, path)


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(main)
