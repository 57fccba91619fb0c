"""Learning curves from runs' metrics.jsonl, several runs on one figure.

  python -m seedlike.plot runs/cartpole --out=curve.png
  python -m seedlike.plot runs/a runs/b --keys=episode_return_mean,sps --x=minutes --out=ab.png

One panel per key, one line per run (labelled with the run directory's name). The x axis is env
steps (the default) or wall-clock minutes since the run's first row; a resumed run's rows keep
counting env steps, and its minutes leave out the time it was stopped. Rows where a key is null
(no episode ended in that interval, no update) are skipped, not drawn as zero. `--smooth=N`
averages each point with the N-1 before it. `--seeds` takes the runs as seeds of one setting:
one line, their mean, with a bootstrap 95% band across them, and the final returns' IQM and mean
with their intervals printed (seedlike.aggregate).
"""

from __future__ import annotations

import os

import numpy as np
from absl import app, flags

from seedlike import aggregate
from seedlike.metrics import read_metrics
from seedlike.scores import final_score

X_AXES = ("env_steps", "minutes")


class PlotError(ValueError):
    """A run or key that cannot be plotted; the message says which and what exists."""


def curve(rows: list[dict], key: str, x: str = "env_steps", smooth: int = 1):
    """(x values, y values) of `key` over `rows`, nulls skipped, y smoothed over `smooth` points."""
    if x == "env_steps":
        xs = np.array([r["env_steps"] for r in rows], np.float64)
    elif x == "minutes":
        xs = _minutes(np.array([r["time"] for r in rows], np.float64))
    else:
        raise PlotError(f"--x={x!r} is not one of {X_AXES}")
    ys = np.array([np.nan if r.get(key) is None else r[key] for r in rows], np.float64)
    keep = np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if smooth > 1 and ys.size:
        sums = np.cumsum(np.insert(ys, 0, 0.0))
        counts = np.minimum(np.arange(1, ys.size + 1), smooth)
        ys = (sums[1:] - sums[np.arange(1, ys.size + 1) - counts]) / counts
    return xs, ys


def _minutes(times: np.ndarray) -> np.ndarray:
    """Minutes of running time: a gap much longer than the logging interval (the run was stopped
    and resumed) counts as one interval."""
    if times.size < 2:
        return np.zeros_like(times)
    steps = np.diff(times)
    typical = float(np.median(steps))
    steps = np.where(steps > 10 * max(typical, 1e-9), typical, steps)
    return np.concatenate([[0.0], np.cumsum(steps)]) / 60.0


def load_runs(paths: list[str]) -> dict[str, list[dict]]:
    """Run name -> metrics rows, for run directories (or their metrics.jsonl files)."""
    runs = {}
    for path in paths:
        logdir = os.path.dirname(path) if path.endswith(".jsonl") else path
        rows = read_metrics(logdir)
        if not rows:
            raise PlotError(f"{path}: no metrics.jsonl rows there; pass a run's --logdir")
        name = os.path.basename(os.path.normpath(logdir))
        while name in runs:
            name += "'"
        runs[name] = rows
    return runs


def plot_runs(
    runs: dict[str, list[dict]], keys: list[str], x: str = "env_steps", smooth=1, seeds=False
):
    """A matplotlib Figure with one panel per key and one line per run (with `seeds`, one line:
    the runs' mean with a bootstrap 95% band across them)."""
    # No backend is forced: without a display matplotlib picks Agg by itself, and a notebook
    # keeps its inline one (the figure shows under the cell).
    import matplotlib.pyplot as plt

    for key in keys:
        if not any(key in row for rows in runs.values() for row in rows):
            known = sorted({k for rows in runs.values() for row in rows for k in row})
            raise PlotError(f"no run has the key {key!r}; keys in these runs: {', '.join(known)}")
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 3 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        curves = {name: curve(rows, key, x, smooth) for name, rows in runs.items()}
        curves = {name: c for name, c in curves.items() if c[0].size}
        if seeds and curves:
            xs, mean, low, high = aggregate.curve_band(list(curves.values()))
            ax.plot(xs, mean, label=f"mean of {len(curves)} runs")
            ax.fill_between(xs, low, high, alpha=0.25, label="95% bootstrap band")
        else:
            for name, (xs, ys) in curves.items():
                ax.plot(xs, ys, label=name)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel("env steps" if x == "env_steps" else "minutes")
    fig.tight_layout()
    return fig


def define_flags() -> None:
    """The entrypoint's flags, defined when it runs rather than on import: the sweep imports
    `curve` and has a --seeds flag of its own."""
    flags.DEFINE_list("keys", ["episode_return_mean"], "metrics.jsonl keys, one panel each.")
    flags.DEFINE_enum("x", "env_steps", X_AXES, "x axis: env steps or wall-clock minutes.")
    flags.DEFINE_integer("smooth", 1, "Average each point with the N-1 points before it.")
    flags.DEFINE_string("out", "curve.png", "Image to write (.png, .pdf, .svg).")
    flags.DEFINE_bool(
        "seeds",
        False,
        "The runs are seeds of one setting: their mean with a 95% band, and the "
        "final return's IQM and mean with bootstrap intervals.",
    )


def main(argv):
    if len(argv) < 2:
        raise app.UsageError("pass one or more run directories: python -m seedlike.plot RUN ...")
    f = flags.FLAGS
    try:
        runs = load_runs(argv[1:])
        fig = plot_runs(runs, f.keys, f.x, max(f.smooth, 1), f.seeds)
    except PlotError as e:
        raise SystemExit(f"error: {e}") from None
    fig.savefig(f.out, dpi=120)
    print(f"wrote {f.out}")
    if f.seeds:
        key = f.keys[0]  # a mean over episodes weighs by them; any other key by rows
        weight = "episodes" if key.startswith("episode_") else ""
        finals = [final_score(rows, key, weight=weight) for rows in runs.values()]
        summary = aggregate.summarize({"runs": [v for v in finals if v == v]})
        print(f"final {key}: {aggregate.describe(summary)}")


if __name__ == "__main__":
    from seedlike.cli import check_flags

    define_flags()
    check_flags()
    app.run(main)
