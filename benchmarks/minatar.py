"""MinAtar (Young & Tian 2019) at 2M env steps: configs/minatar_rainbow.py on several seeds and
configs/minatar_ppo.py beside it, against MinAtar's own DQN curves at 5M frames (read from the
repository's plot: about 10 on Breakout, 43 on SpaceInvaders).

    python benchmarks/minatar.py --logdir=runs/minatar                      # 2 games, 3 + 1 seeds
    python benchmarks/minatar.py --logdir=runs/m --games=Breakout --rainbow_seeds=1 --ppo_seeds=0

Runs go one after another through scripts/train.sh (rerun the same command to resume: a finished
run is read, an interrupted one continues from its checkpoint). Writes <logdir>/minatar.json,
minatar.md (per-seed final returns: the mean of the last 10% of a run's episodes, wall times)
and minatar.png (every run's curve).
"""

import json
import os
import subprocess
import sys

import numpy as np
from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from results_io import run_summary  # noqa: E402

DQN_5M = {"Breakout": 10.0, "SpaceInvaders": 43.0}  # MinAtar's DQN, 5M frames (plot)

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the runs and the results go.")
_GAMES = flags.DEFINE_list("games", list(DQN_5M), "MinAtar games.")
_RAINBOW = flags.DEFINE_integer("rainbow_seeds", 3, "Rainbow runs per game.")
_PPO = flags.DEFINE_integer("ppo_seeds", 1, "PPO runs per game.")
_STEPS = flags.DEFINE_integer("steps", 2_000_000, "Env steps per run.")
_ACTORS = flags.DEFINE_integer("actors", 2, "Actor processes per run.")
_FLAGS = flags.DEFINE_multi_string("flag", [], "Extra --config.x=v flags for every run.")


def finished(run_dir: str) -> bool:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return bool(rows) and rows[-1]["env_steps"] >= _STEPS.value


def run(algo: str, game: str, seed: int, run_dir: str) -> None:
    if finished(run_dir):
        return
    command = [
        "scripts/train.sh", f"--logdir={run_dir}", f"--num_actors={_ACTORS.value}",
        f"--config=configs/minatar_{algo}.py:{game}", f"--config.seed={seed}",
        f"--config.total_env_steps={_STEPS.value}", "--config.log.wandb_mode=disabled",
        *_FLAGS.value,
    ]  # fmt: skip
    print(" ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    results = {}
    for game in _GAMES.value:
        for algo, seeds in (("rainbow", _RAINBOW.value), ("ppo", _PPO.value)):
            runs = []
            for seed in range(seeds):
                run_dir = os.path.join(logdir, game, algo, f"seed_{seed}")
                run(algo, game, seed, run_dir)
                runs.append(run_summary(run_dir))
            if runs:
                finals = [r["final"] for r in runs]
                results[f"{game}/{algo}"] = {
                    "finals": finals,
                    "mean": float(np.mean(finals)),
                    "wall_s": [r["wall_s"] for r in runs],
                    "sps": [r["sps"] for r in runs],
                    "dqn_5m": DQN_5M.get(game),
                    "curves": [r["curve"] for r in runs],
                }
    with open(os.path.join(logdir, "minatar.json"), "w") as f:
        json.dump({"steps": _STEPS.value, "flags": _FLAGS.value, "runs": results}, f, indent=1)
    lines = [
        "| game / algo | seeds (final) | mean | MinAtar DQN 5M | wall min/run | env steps/s |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for key, r in results.items():
        lines.append(
            f"| {key} | {' / '.join(f'{x:.1f}' for x in r['finals'])} | {r['mean']:.1f} | "
            f"{r['dqn_5m'] or '-'} | {np.mean(r['wall_s']) / 60:.0f} | {np.mean(r['sps']):,.0f} |"
        )
    table = "\n".join(lines)
    with open(os.path.join(logdir, "minatar.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    plot(results, os.path.join(logdir, "minatar.png"))
    return 0


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({k.split("/")[0] for k in results})
    fig, axes = plt.subplots(1, len(games), figsize=(5 * len(games), 3.4), squeeze=False)
    for ax, game in zip(axes[0], games):
        for key, r in results.items():
            if not key.startswith(game + "/"):
                continue
            for k, curve in enumerate(r["curves"]):
                x, y = zip(*[(s, v) for s, v in curve if v is not None])
                ax.plot(np.asarray(x) / 1e6, y, label=f"{key.split('/')[1]} seed {k}")
        if DQN_5M.get(game):
            ax.axhline(DQN_5M[game], color="gray", ls="--", label="MinAtar DQN at 5M frames")
        ax.set_title(game)
        ax.set_xlabel("env steps (M)")
        ax.set_ylabel("episode return")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(main)
