"""R2D2 on the partially observed CartPole (configs/cartpole_pomdp_r2d2.py: the velocities
hidden), with its switches measured: the LSTM against the same config feed-forward, and the
stored state and the burn-in each turned off, and sequences that overlap by half.

    python -m benchmarks.r2d2 --logdir=runs/r2d2          # lstm and feedforward, 3 seeds each
    python -m benchmarks.r2d2 --logdir=runs/r2d2 --variants=lstm,zero_state,no_burn_in --seeds=1

Runs go one after another through scripts/train.sh (rerun to resume); each finished run's last
checkpoint is played greedily (evaluate.py --greedy). Writes <logdir>/r2d2.json, r2d2.md (per
seed: the mean of the last 10% of the training episodes, the greedy evaluation, the best row,
the first env step at which a row reached 475) and r2d2.png.
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

CONFIG = "configs/cartpole_pomdp_r2d2.py"
VARIANTS = {
    "lstm": (),
    "feedforward": ("--config.network.core=none",),
    "zero_state": ("--config.r2d2.stored_state=false",),
    "no_burn_in": ("--config.r2d2.burn_in=0",),
    # R2D2's overlapping sequences (half of each shared with the next): each env step is stored
    # twice, so the same replay_ratio makes twice the sgd steps per env step.
    "overlap": ("--config.r2d2.overlap=20",),
}
SOLVED = 475.0

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the runs and the results go.")
_VARIANTS = flags.DEFINE_list("variants", ["lstm", "feedforward"], f"Of {list(VARIANTS)}.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Runs per variant.")
_STEPS = flags.DEFINE_integer("steps", 1_000_000, "Env steps per run.")
_ACTORS = flags.DEFINE_integer("actors", 2, "Actor processes per run.")
_EVAL = flags.DEFINE_integer("eval_episodes", 20, "Greedy episodes of each final checkpoint.")


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    results = {}
    for variant in _VARIANTS.value:
        runs = []
        for seed in range(_SEEDS.value):
            run_dir = os.path.join(logdir, variant, f"seed_{seed}")
            train(run_dir, CONFIG, seed, _STEPS.value, _ACTORS.value, VARIANTS[variant])
            summary = run_summary(run_dir)
            reached = [s for s, r in summary["curve"] if r is not None and r >= SOLVED]
            runs.append({**summary, "greedy": greedy_return(run_dir, _EVAL.value),
                         "solved_at": reached[0] if reached else None})  # fmt: skip
        results[variant] = {
            "finals": [r["final"] for r in runs],
            "over_seeds": over_seeds([r["final"] for r in runs]),
            "greedy": [r["greedy"] for r in runs],
            "best_row": [r["best_row"] for r in runs],
            "solved_at": [r["solved_at"] for r in runs],
            "wall_s": [r["wall_s"] for r in runs],
            "curves": [r["curve"] for r in runs],
        }
    with open(os.path.join(logdir, "r2d2.json"), "w") as f:
        json.dump({"steps": _STEPS.value, "config": CONFIG, "runs": results}, f, indent=1)
    lines = [
        "| variant | final (per seed) | IQM [95%] | mean [95%] | greedy (20 episodes) | best row "
        "| first row >= 475 | wall min/run |",
        "| --- | --- | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for name, r in results.items():
        solved = " / ".join(f"{s / 1e3:.0f}k" if s else "never" for s in r["solved_at"])
        lines.append(
            f"| {name} | {per_seed(r['finals'])} | {stat_cell(r['over_seeds'], 'iqm')} | "
            f"{stat_cell(r['over_seeds'], 'mean')} | {per_seed(r['greedy'])} | "
            f"{per_seed(r['best_row'])} | {solved} | {np.mean(r['wall_s']) / 60:.1f} |"
        )
    write_markdown(os.path.join(logdir, "r2d2.md"), lines)
    curves = [(f"{n} seed {k}", c) for n, r in results.items() for k, c in enumerate(r["curves"])]
    panel = "CartPole-v1, velocities hidden"
    plot_curves({panel: (curves, (SOLVED, "475"))}, os.path.join(logdir, "r2d2.png"))
    return 0


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(main)
