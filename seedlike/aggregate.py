"""Statistics over seeds and tasks, as the field reports them now (Agarwal et al. 2021, "Deep
Reinforcement Learning at the Edge of the Statistical Precipice"; the `rliable` package): the
interquartile mean (IQM) and the mean of the runs' scores, each with a stratified bootstrap 95%
interval, and performance profiles.

Scores are a dict task -> [runs] (one final score per seed). The bootstrap resamples the runs of
each task with replacement, independently per task (stratified: every task keeps its number of
runs), and recomputes the statistic over all tasks' runs together; the interval is its 2.5 and
97.5 percentiles. tests/core/test_aggregate.py checks both against rliable on the same scores.
"""

from __future__ import annotations

import math

import numpy as np


def iqm(values) -> float:
    """The mean of the middle 50% of `values` (25% trimmed at each end, as scipy's trim_mean)."""
    x = np.sort(np.asarray(values, np.float64).ravel())
    cut = int(0.25 * x.size)
    return float(np.mean(x[cut : x.size - cut])) if x.size else math.nan


def mean(values) -> float:
    x = np.asarray(values, np.float64).ravel()
    return float(np.mean(x)) if x.size else math.nan


STATISTICS = {"iqm": iqm, "mean": mean}


def bootstrap_interval(
    scores: dict[str, list[float]], statistic=iqm, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """The stratified bootstrap 95% interval of `statistic` over every task's runs."""
    tasks = [np.asarray(v, np.float64) for v in scores.values() if len(v)]
    if not tasks:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = [
        np.concatenate([t[rng.integers(0, t.size, t.size)] for t in tasks])
        for _ in range(resamples)
    ]
    values = [statistic(d) for d in draws]
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def summarize(scores: dict[str, list[float]], resamples: int = 2000, seed: int = 0) -> dict:
    """{"runs", "tasks", and for "iqm" and "mean": {"value", "ci95"}} of the scores."""
    runs = [x for v in scores.values() for x in v]
    out: dict = {"runs": len(runs), "tasks": len(scores)}
    for name, statistic in STATISTICS.items():
        interval = bootstrap_interval(scores, statistic, resamples, seed)
        out[name] = {"value": statistic(runs), "ci95": list(interval)}
    return out


def performance_profile(scores: dict[str, list[float]], thresholds) -> np.ndarray:
    """The share of all runs whose score exceeds each threshold [K] (a performance profile)."""
    runs = np.asarray([x for v in scores.values() for x in v], np.float64)
    return np.array([float(np.mean(runs > t)) if runs.size else math.nan for t in thresholds])


def describe(summary: dict) -> str:
    """'IQM 487.1 [471.0, 500.0], mean 480.2 [455.3, 499.1] over 3 runs of 1 task'."""
    parts = [
        f"{label} {summary[name]['value']:.1f} "
        f"[{summary[name]['ci95'][0]:.1f}, {summary[name]['ci95'][1]:.1f}]"
        for name, label in (("iqm", "IQM"), ("mean", "mean"))
    ]
    tasks = summary["tasks"]
    return f"{', '.join(parts)} over {summary['runs']} runs of {tasks} task{'s' * (tasks != 1)}"


def curve_band(
    curves: list[tuple[np.ndarray, np.ndarray]], points: int = 100, resamples: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(x [P], mean [P], low [P], high [P]): runs' curves (x, y) read at P points up to the
    shortest run's end, their mean over runs and its bootstrap 95% band (the runs resampled with
    replacement, the same draws at every point)."""
    end = min(x[-1] for x, _ in curves)
    xs = np.linspace(min(x[0] for x, _ in curves), end, points)
    ys = np.stack([np.interp(xs, x, y) for x, y in curves])  # [runs, P]
    pick = np.random.default_rng(seed).integers(0, len(curves), (resamples, len(curves)))
    means = ys[pick].mean(axis=1)  # [resamples, P]
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return xs, ys.mean(axis=0), low, high
