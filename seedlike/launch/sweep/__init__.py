"""Hyperparameter sweeps: a grid or a random search over config values, several seeds a cell, from
one command.

  python -m seedlike.launch.sweep --config=configs/cartpole_ppo.py --logdir=runs/sweep \\
      --grid=optimizer.learning_rate=1e-4,3e-4,1e-3 --grid=ppo.epochs=4,10 --seeds=3

A cell is one choice of the swept values; a run is a cell with a seed (config.seed = the config's
seed + k for k < --seeds). Every other `--config.KEY=VALUE` flag applies to every run. Runs are
`scripts/train.sh` jobs (seedlike.launch.api.train) in <logdir>/<cell>/seed_<k>, --parallel at a
time: each is a learner and --num_actors actors, so size --parallel to the cores.

Random search: `--random=N` draws N cells from `--space` flags (KEY=log:LOW:HIGH, uniform:LOW:HIGH,
int:LOW:HIGH inclusive, choice:A,B,...), reproducibly from --sweep_seed; with --grid as well, each
draw is crossed with the grid.

Every value is checked before anything starts (unknown key, a value of the wrong type, a config
that seedlike.config.validate refuses): one line says which. A run that fails later (non-zero
exit: a crash, a killed job) is started again --retries times in its own logdir, so it resumes
from its last checkpoint, and is then marked failed; the other runs go on. Ctrl-C (SIGTERM too)
stops the running jobs, each saving a checkpoint; the same command resumes the sweep: done runs
are skipped, failed and stopped ones continue. <logdir>/sweep_state.json keeps each run's state.

Results, rewritten whenever a run ends: for each run the final value of --metric (the mean over
the last --final_fraction of its metrics rows that have one; CleanRL reports the last 10% of a
run's episodes) and its best; for each cell the IQM and mean of its seeds' finals with stratified
bootstrap 95% intervals (seedlike.aggregate). <logdir>/sweep.md is the table (best cell first),
sweep.json the same numbers, sweep.png each cell's mean curve over its seeds with a bootstrap band
and the finals' IQM with their intervals. Each run's W&B group is the
sweep's name (the logdir's base name), so the W&B UI shows a sweep's runs together.
"""

from __future__ import annotations

import json
import os

import numpy as np

from seedlike import aggregate
from seedlike.launch import jobs
from seedlike.metrics import read_metrics

STATE_FILE = "sweep_state.json"


def summarize(state: dict, logdir: str, metric: str, mode: str, final_fraction: float) -> list:
    """One entry per cell, best final mean first (cells without a result last)."""
    cells: dict[str, dict] = {}
    for run_id, run in sorted(state["runs"].items()):
        cell = cells.setdefault(
            run["name"],
            {"cell": run["name"], "overrides": run["cell"], "seeds": {}, "failed": [],
             "incomplete": []},
        )  # fmt: skip
        result = jobs.run_result(
            read_metrics(os.path.join(logdir, run_id)), metric, mode, final_fraction
        )
        if run["state"] == "failed":
            cell["failed"].append(run["seed"])
        elif run["state"] != "done":  # running, stopped or pending: no final value yet
            cell["incomplete"].append(run["seed"])
        elif result is not None:
            cell["seeds"][run["seed"]] = result
    out = []
    for cell in cells.values():
        for what in ("final", "best"):
            values = [r[what] for r in cell["seeds"].values()]
            cell[what] = aggregate.summarize({cell["cell"]: values}) if values else None
        cell["final_mean"] = cell["final"]["mean"]["value"] if cell["final"] else None
        out.append(cell)
    sign = -1.0 if mode == "max" else 1.0
    return sorted(out, key=lambda c: (c["final_mean"] is None, sign * (c["final_mean"] or 0.0)))


def _stat(summary: dict | None, name: str) -> str:
    """'value [low, high]' of a statistic of aggregate.summarize, '-' without one."""
    if summary is None:
        return "-"
    s = summary[name]
    return f"{s['value']:.4g} [{s['ci95'][0]:.4g}, {s['ci95'][1]:.4g}]"


def markdown(cells: list[dict], metric: str, final_fraction: float) -> str:
    keys = list(dict.fromkeys(k for c in cells for k in c["overrides"]))
    head = [*keys, f"{metric}, final IQM [95%]", "final mean [95%]", "best mean [95%]",
            "per seed (final)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        seeds = ", ".join(f"{s}: {r['final']:.4g}" for s, r in sorted(c["seeds"].items()))
        for what in ("failed", "incomplete"):
            if c[what]:
                seeds += ("; " if seeds else "") + f"{what}: " + ", ".join(map(str, c[what]))
        values = [c["overrides"].get(k, "") for k in keys]
        stats = [_stat(c["final"], "iqm"), _stat(c["final"], "mean"), _stat(c["best"], "mean")]
        lines.append("| " + " | ".join([*values, *stats, seeds or "-"]) + " |")
    note = (
        f"final: the mean of the last {final_fraction:.0%} of a run's rows with {metric}; IQM "
        "and mean over a cell's seeds with stratified bootstrap 95% intervals "
        "(seedlike.aggregate, Agarwal et al. 2021)"
    )
    return "\n".join(lines) + f"\n\n{note}.\n"


def plot(cells: list[dict], state: dict, logdir: str, metric: str, out: str) -> None:
    """Each cell's mean curve over its seeds (left) and the finals with intervals (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seedlike.plot import curve

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    for c in cells:
        curves = [
            curve(read_metrics(os.path.join(logdir, run_id)), metric)
            for run_id, run in sorted(state["runs"].items())
            if run["name"] == c["cell"] and run["seed"] in c["seeds"]
        ]
        curves = [(x, y) for x, y in curves if x.size]
        if not curves:
            continue
        xs, mean, low, high = aggregate.curve_band(curves)
        (line,) = left.plot(xs, mean, label=f"{c['cell']} ({len(curves)})")
        left.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
    left.set(xlabel="env steps", ylabel=metric, title="mean over seeds, 95% bootstrap band")
    left.legend(fontsize=7)
    done = [c for c in cells if c["final_mean"] is not None]
    iqm = np.array([c["final"]["iqm"]["value"] for c in done])
    low, high = (np.array([c["final"]["iqm"]["ci95"][k] for c in done]) for k in (0, 1))
    right.errorbar(range(len(done)), iqm, yerr=[iqm - low, high - iqm], fmt="o", capsize=4)
    right.set_xticks(range(len(done)), [c["cell"] for c in done], rotation=30, ha="right")
    right.set(ylabel=f"final {metric} (IQM)", title="finals' IQM, bootstrap 95% over seeds")
    right.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_results(state: dict, logdir: str, metric: str, mode: str, final_fraction: float):
    cells = summarize(state, logdir, metric, mode, final_fraction)
    with open(os.path.join(logdir, "sweep.json"), "w") as f:
        json.dump({"metric": metric, "mode": mode, "cells": cells}, f, indent=2)
    with open(os.path.join(logdir, "sweep.md"), "w") as f:
        f.write(markdown(cells, metric, final_fraction))
    plot(cells, state, logdir, metric, os.path.join(logdir, "sweep.png"))
    return cells
