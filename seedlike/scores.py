"""Scoring a trained policy: episodes of its own env, with the mean and spread of their return and
length (`evaluate.py --checkpoint=RUN`, `seedlike.evaluate`); and a run's final score from its
metrics rows (`final_score`: sweeps, population-based training and the benchmarks).

The env is the checkpoint's (seedlike.watch plays it locally, one copy, no server). Two-player
games are played against an opponent (the policy itself by default, a bot or another run) and also
counted as wins, draws and losses; team games score team 0's summed return.
"""

from __future__ import annotations

import json
import math

import numpy as np


def evaluate(
    checkpoint: str, episodes: int = 10, greedy: bool = False, opponent: str = "self", seed: int = 0
) -> dict:
    """Plays `episodes` episodes of the checkpoint's policy (sampled actions unless `greedy`) and
    returns the report: return and length mean, std, min, max and a 95% interval of the mean;
    win/draw/loss in two-player games."""
    from seedlike.league import games
    from seedlike.watch import record_episodes

    if episodes < 1:
        raise ValueError(f"episodes={episodes}: play at least one")
    agent = None if opponent in ("", "self") else games.make_agent(opponent, greedy=greedy)
    rec = record_episodes(
        checkpoint, episodes, greedy, opponent=agent, seed=seed, max_frames=1 << 62, render=False
    )
    report = {
        "checkpoint": checkpoint,
        "env": rec.env_name,
        "policy_version": rec.policy_version,
        "env_steps": rec.env_steps,
        "episodes": len(rec.returns),
        "greedy": greedy,
        "seed": seed,
        "return": _stats(rec.returns),
        "length": _stats(rec.lengths),
    }
    if rec.num_players == 2:
        report["opponent"] = opponent or "self"
        outcomes = np.sign(np.asarray(rec.returns))
        wins = int((outcomes > 0).sum())
        report["games"] = {
            "wins": wins,
            "draws": int((outcomes == 0).sum()),
            "losses": int((outcomes < 0).sum()),
            "win_rate": wins / len(outcomes),
            "win_rate_ci95": list(games.wilson_interval(wins, len(outcomes))),
        }
    return report


def final_score(
    rows: list[dict], metric: str = "episode_return_mean", share: float = 0.1, weight: str = ""
) -> float:
    """A run's final score: the mean of `metric` over the last `share` of the run, from its
    metrics rows (those holding a finite `metric`); NaN before any row holds one.

    Without `weight` the run is counted in rows: the last ceil(share x rows) of them, at least
    one, each weighing one (what the sweeps and population-based training rank). With `weight`,
    a key of the rows that counts what their `metric` is a mean over ("episodes"), it is counted
    in those: each row weighs by its count and the earliest row taken counts only in part, so
    that exactly `share` of the episodes weigh (the benchmarks' final return; rows without
    episodes hold no mean)."""
    values, weights = _final_rows(rows, metric, share, weight)
    return float(np.dot(values, weights) / weights.sum()) if weights.size else math.nan


def final_interval(
    rows: list[dict], metric: str = "episode_return_mean", share: float = 0.1, weight: str = "",
    resamples: int = 2000, seed: int = 0,
) -> tuple[float, float]:  # fmt: skip
    """A 95% interval of `final_score` (the same rows and weights): the percentile bootstrap of
    the weighted mean over the final rows, resampled with replacement. (NaN, NaN) before any
    row holds `metric`; a single row's value twice."""
    values, weights = _final_rows(rows, metric, share, weight)
    if not weights.size:
        return math.nan, math.nan
    pick = np.random.default_rng(seed).integers(0, values.size, (resamples, values.size))
    means = (values[pick] * weights[pick]).sum(1) / weights[pick].sum(1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _final_rows(rows, metric, share, weight) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights) of the final rows `final_score` averages, oldest first."""
    held = [
        r
        for r in rows
        if r.get(metric) is not None and math.isfinite(r[metric]) and (not weight or r.get(weight))
    ]
    counts = [float(r[weight]) if weight else 1.0 for r in held]
    # Counted in rows, whole rows are taken: 10% of 15 rows is the last 2.
    need = share * sum(counts) if weight else max(1, math.ceil(len(held) * share))
    values, weights, taken = [], [], 0.0
    for row, count in zip(reversed(held), reversed(counts)):
        take = min(count, need - taken)
        values.append(row[metric])
        weights.append(take)
        taken += take
        if taken >= need:
            break
    return np.asarray(values[::-1], np.float64), np.asarray(weights[::-1], np.float64)


def _stats(values) -> dict:
    x = np.asarray(values, np.float64)
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    half = 1.96 * std / math.sqrt(x.size)  # normal approximation of the mean's 95% interval
    return {
        "mean": float(x.mean()),
        "std": std,
        "min": float(x.min()),
        "max": float(x.max()),
        "ci95": [float(x.mean()) - half, float(x.mean()) + half],
    }


def markdown(report: dict) -> str:
    r, n = report["return"], report["length"]
    lines = [
        f"# Evaluation: {report['checkpoint']}",
        "",
        f"{report['env']}, policy version {report['policy_version']} "
        f"({report['env_steps']} env steps), {report['episodes']} episodes, "
        f"{'greedy' if report['greedy'] else 'sampled'} actions"
        + (f", against {report['opponent']}" if "opponent" in report else ""),
        "",
        "| | mean ± std | 95% interval of the mean | min | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, s in (("return", r), ("length", n)):
        lines.append(
            f"| {name} | {s['mean']:.2f} ± {s['std']:.2f} | [{s['ci95'][0]:.2f}, "
            f"{s['ci95'][1]:.2f}] | {s['min']:g} | {s['max']:g} |"
        )
    if "games" in report:
        g = report["games"]
        low, high = g["win_rate_ci95"]
        lines += [
            "",
            f"Games: {g['wins']} won, {g['draws']} drawn, {g['losses']} lost; win rate "
            f"{g['win_rate']:.3f} [{low:.3f}, {high:.3f}]",
        ]
    return "\n".join(lines) + "\n"


def write(report: dict, out: str, to_markdown=markdown) -> tuple[str, str]:
    """Writes `out` (JSON) and `to_markdown(report)` beside it (same name, .md); returns both
    paths."""
    md = out[: -len(".json")] + ".md" if out.endswith(".json") else out + ".md"
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    with open(md, "w") as f:
        f.write(to_markdown(report))
    return out, md
