"""Hyperparameter sweeps: a grid or a random search over config values, several seeds a cell, from
one command.

  python -m seedlike.sweep --config=configs/cartpole_ppo.py --logdir=runs/sweep \\
      --grid=optimizer.learning_rate=1e-4,3e-4,1e-3 --grid=ppo.epochs=4,10 --seeds=3

A cell is one choice of the swept values; a run is a cell with a seed (config.seed = the config's
seed + k for k < --seeds). Every other `--config.KEY=VALUE` flag applies to every run. Runs are
`scripts/train.sh` jobs (seedlike.api.train) in <logdir>/<cell>/seed_<k>, --parallel at a time:
each is a learner and --num_actors actors, so size --parallel to the cores.

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
run's episodes) and its best; for each cell their mean over seeds with a 95% Student-t interval.
<logdir>/sweep.md is the table (best cell first), sweep.json the same numbers, sweep.png each
cell's mean curve over its seeds and the finals with their intervals. Each run's W&B group is the
sweep's name (the logdir's base name), so the W&B UI shows a sweep's runs together.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import math
import os
import re
import signal
import sys
import time

import numpy as np
from absl import app, flags

from seedlike import api
from seedlike.config import ConfigError, load_config_file, validate
from seedlike.metrics import read_metrics

STATE_FILE = "sweep_state.json"
POLL_S = 1.0
SPACE_KINDS = ("log", "uniform", "int", "choice")

_CONFIG = flags.DEFINE_string("config", "configs/cartpole_ppo.py", "Config of every run.")
_LOGDIR = flags.DEFINE_string("logdir", None, "The sweep's directory (rerun with it to resume).")
_GRID = flags.DEFINE_multi_string("grid", [], "KEY=V1,V2,...: a swept config value (repeatable).")
_SPACE = flags.DEFINE_multi_string(
    "space", [], "KEY=KIND:ARGS for --random, KIND one of log, uniform, int, choice."
)
_RANDOM = flags.DEFINE_integer("random", 0, "Cells drawn from --space (0: grid only).")
_SWEEP_SEED = flags.DEFINE_integer("sweep_seed", 0, "Seeds the draws of --random.")
_SEEDS = flags.DEFINE_integer("seeds", 1, "Runs per cell, with config.seed + 0, 1, ...")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actor processes per run.")
_RETRIES = flags.DEFINE_integer("retries", 1, "Restarts of a failed run before it counts failed.")
_METRIC = flags.DEFINE_string("metric", "episode_return_mean", "The metrics key the table ranks.")
_MODE = flags.DEFINE_enum("mode", "max", ["max", "min"], "Whether more of --metric is better.")
_FINAL_FRACTION = flags.DEFINE_float(
    "final_fraction", 0.1, "A run's final value: the mean over this last share of its rows."
)


class SweepError(ValueError):
    """A sweep that cannot start as given; the message says why, in one line."""


# Specification -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dist:
    """A random-search distribution: log / uniform (floats in [low, high]), int (low..high
    inclusive) or choice (one of the values)."""

    kind: str
    args: tuple

    def sample(self, rng: np.random.Generator) -> str:
        if self.kind == "choice":
            return str(self.args[int(rng.integers(len(self.args)))])
        low, high = self.args
        if self.kind == "int":
            return str(int(rng.integers(int(low), int(high) + 1)))
        if self.kind == "log":
            return f"{math.exp(rng.uniform(math.log(low), math.log(high))):.6g}"
        return f"{rng.uniform(low, high):.6g}"


def _key_values(spec: str, flag: str) -> tuple[str, str]:
    key, sep, values = spec.partition("=")
    if not sep or not key or not values:
        raise SweepError(f"--{flag}={spec!r}: expected KEY=VALUES, e.g. --{flag}=ppo.epochs=4,10")
    return key, values


def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """--grid flags -> {key: [values as text]}, in the order given."""
    grid = {}
    for spec in specs:
        key, values = _key_values(spec, "grid")
        if key in grid:
            raise SweepError(f"--grid: {key} is given twice; list all its values in one flag")
        grid[key] = values.split(",")
    return grid


def parse_space(specs: list[str]) -> dict[str, Dist]:
    """--space flags -> {key: Dist}."""
    space = {}
    for spec in specs:
        key, text = _key_values(spec, "space")
        kind, _, args = text.partition(":")
        if kind not in SPACE_KINDS:
            raise SweepError(f"--space={spec!r}: kind {kind!r} is not one of {SPACE_KINDS}")
        if kind == "choice":
            space[key] = Dist(kind, tuple(args.split(",")))
            continue
        try:
            low, high = (float(a) for a in args.split(":"))
        except ValueError:
            raise SweepError(f"--space={spec!r}: expected {kind}:LOW:HIGH") from None
        if not low < high or (kind == "log" and low <= 0):
            raise SweepError(f"--space={spec!r}: need LOW < HIGH (and LOW > 0 for log)")
        space[key] = Dist(kind, (low, high))
    return space


def make_cells(
    grid: dict[str, list[str]], space: dict[str, Dist], random: int, seed: int
) -> list[dict[str, str]]:
    """The cells: every combination of the grid, crossed with `random` draws from `space`."""
    if random and not space:
        raise SweepError("--random needs --space flags to draw from")
    if space and not random:
        raise SweepError("--space is only drawn from with --random=N")
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    if not random:
        return combos
    rng = np.random.default_rng(seed)
    draws = [{key: dist.sample(rng) for key, dist in space.items()} for _ in range(random)]
    return [{**combo, **draw} for draw in draws for combo in combos]


def cell_name(cell: dict[str, str]) -> str:
    """A directory name for a cell: its key=value pairs (unsafe characters as '_')."""
    if not cell:
        return "base"
    name = "__".join(f"{key}={value}" for key, value in cell.items())
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name)


def _typed(current, text: str, key: str):
    """`text` as the type of the config's current value at `key`."""
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if isinstance(current, int):
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return int(number)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, str):
            return text
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise SweepError(
            f"{key}={text!r}: not a {type(current).__name__} like the config's {current!r}"
        ) from None


def check_cell(config_path: str, overrides: dict[str, str]) -> None:
    """Raises SweepError unless `overrides` are known keys with values of their type that
    seedlike.config.validate accepts."""
    config = load_config_file(config_path)
    with config.unlocked():
        for key, text in overrides.items():
            *parents, last = key.split(".")
            node = config
            for part in parents:
                node = node.get(part) if hasattr(node, "get") else None
            if not hasattr(node, "keys") or last not in node:
                raise SweepError(f"unknown config key {key!r}: {config_path} has no such setting")
            node[last] = _typed(node[last], text, key)
    try:
        validate(config)
    except ConfigError as e:
        raise SweepError(f"{cell_name(overrides)}: {e}") from None


# Results -------------------------------------------------------------------------------------


def run_result(rows: list[dict], metric: str, mode: str, final_fraction: float) -> dict | None:
    """final (mean over the last `final_fraction` of the rows with `metric`) and best of a run;
    None before any row has it."""
    values = [r[metric] for r in rows if r.get(metric) is not None and math.isfinite(r[metric])]
    if not values:
        return None
    last = max(1, math.ceil(len(values) * final_fraction))
    return {
        "final": float(np.mean(values[-last:])),
        "best": float(max(values) if mode == "max" else min(values)),
        "env_steps": int(rows[-1].get("env_steps", 0)),
    }


def interval(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of its 95% Student-t interval; None for one value)."""
    from scipy import stats

    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None
    sem = float(np.std(values, ddof=1)) / math.sqrt(len(values))
    return mean, float(stats.t.ppf(0.975, len(values) - 1)) * sem


def summarize(state: dict, logdir: str, metric: str, mode: str, final_fraction: float) -> list:
    """One entry per cell, best final mean first (cells without a result last)."""
    cells: dict[str, dict] = {}
    for run_id, run in sorted(state["runs"].items()):
        cell = cells.setdefault(
            run["name"],
            {"cell": run["name"], "overrides": run["cell"], "seeds": {}, "failed": []},
        )
        result = run_result(
            read_metrics(os.path.join(logdir, run_id)), metric, mode, final_fraction
        )
        if run["state"] == "failed":
            cell["failed"].append(run["seed"])
        if result is not None and run["state"] != "failed":
            cell["seeds"][run["seed"]] = result
    out = []
    for cell in cells.values():
        finals = [r["final"] for r in cell["seeds"].values()]
        bests = [r["best"] for r in cell["seeds"].values()]
        cell["final_mean"], cell["final_ci"] = interval(finals) if finals else (None, None)
        cell["best_mean"], cell["best_ci"] = interval(bests) if bests else (None, None)
        out.append(cell)
    sign = -1.0 if mode == "max" else 1.0
    return sorted(out, key=lambda c: (c["final_mean"] is None, sign * (c["final_mean"] or 0.0)))


def _pm(mean, half) -> str:
    if mean is None:
        return "-"
    return f"{mean:.4g}" if half is None else f"{mean:.4g} ± {half:.3g}"


def markdown(cells: list[dict], metric: str, final_fraction: float) -> str:
    keys = list(dict.fromkeys(k for c in cells for k in c["overrides"]))
    head = [*keys, f"{metric}, final (mean ± 95%)", "best (mean ± 95%)", "per seed (final)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in cells:
        seeds = ", ".join(f"{s}: {r['final']:.4g}" for s, r in sorted(c["seeds"].items()))
        if c["failed"]:
            seeds += ("; " if seeds else "") + "failed: " + ", ".join(map(str, c["failed"]))
        values = [c["overrides"].get(k, "") for k in keys]
        final, best = _pm(c["final_mean"], c["final_ci"]), _pm(c["best_mean"], c["best_ci"])
        lines.append("| " + " | ".join([*values, final, best, seeds or "-"]) + " |")
    note = f"final: the mean of the last {final_fraction:.0%} of a run's rows with {metric}"
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
        xs = np.linspace(0, min(x[-1] for x, _ in curves), 100)
        mean = np.mean([np.interp(xs, x, y) for x, y in curves], axis=0)
        left.plot(xs, mean, label=f"{c['cell']} ({len(curves)})")
    left.set(xlabel="env steps", ylabel=metric, title="mean over seeds")
    left.legend(fontsize=7)
    done = [c for c in cells if c["final_mean"] is not None]
    right.errorbar(
        range(len(done)),
        [c["final_mean"] for c in done],
        yerr=[c["final_ci"] or 0.0 for c in done],
        fmt="o",
        capsize=4,
    )
    right.set_xticks(range(len(done)), [c["cell"] for c in done], rotation=30, ha="right")
    right.set(ylabel=f"final {metric}", title="finals, 95% interval over seeds")
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


# Running -------------------------------------------------------------------------------------


def load_state(logdir: str) -> dict:
    path = os.path.join(logdir, STATE_FILE)
    if not os.path.exists(path):
        return {"runs": {}}
    with open(path) as f:
        return json.load(f)


def save_state(logdir: str, state: dict) -> None:
    path = os.path.join(logdir, STATE_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=2)
    os.replace(path + ".tmp", path)  # a sweep killed mid-write keeps the previous state


def _last_line(run: api.Run) -> str:
    try:
        lines = [line for line in run.log(2000).splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-200:] if lines else ""


class Sweeper:
    """Runs a sweep's runs `parallel` at a time, keeping their states in the sweep's directory.

    runs: {run id (its directory under logdir): (cell, seed)}; `flags`: config flags every run
    gets; `on_change(state)` after each run ends (the results are rewritten there).
    """

    def __init__(self, config: str, logdir: str, runs: dict, flags: list[str], num_actors: int,
                 parallel: int, retries: int, on_change=lambda state: None):  # fmt: skip
        self.config, self.logdir, self.flags = config, logdir, flags
        self.num_actors, self.parallel, self.retries = num_actors, parallel, retries
        self.on_change = on_change
        self.state = load_state(logdir)
        for run_id, (cell, seed) in runs.items():
            entry = self.state["runs"].setdefault(
                run_id, {"cell": cell, "name": cell_name(cell), "seed": seed, "state": "pending"}
            )
            if entry["state"] != "done":
                entry.update(state="pending", attempts=0)
        self.order = list(runs)
        self.stopping = False

    def _start(self, run_id: str) -> api.Run:
        entry = self.state["runs"][run_id]
        entry["attempts"] = entry.get("attempts", 0) + 1
        overrides = {**entry["cell"], "seed": entry["seed"]}
        run = api.train(
            self.config,
            os.path.join(self.logdir, run_id),
            num_actors=self.num_actors,
            overrides=overrides,
            flags=tuple(self.flags),
        )
        entry.update(state="running", pid=run.process.pid)
        return run

    def run(self) -> dict:
        pending = [r for r in self.order if self.state["runs"][r]["state"] != "done"]
        active: dict[str, api.Run] = {}
        try:
            while (pending or active) and not self.stopping:
                while pending and len(active) < self.parallel:
                    run_id = pending.pop(0)
                    active[run_id] = self._start(run_id)
                    save_state(self.logdir, self.state)
                time.sleep(POLL_S)
                for run_id, job in list(active.items()):
                    code = job.process.poll()
                    if code is None:
                        continue
                    del active[run_id]
                    self._ended(run_id, job, code, pending)
        finally:
            for run_id, job in active.items():
                job.stop()
                self.state["runs"][run_id]["state"] = "stopped"
            save_state(self.logdir, self.state)
        return self.state

    def _ended(self, run_id: str, job: api.Run, code: int, pending: list) -> None:
        entry = self.state["runs"][run_id]
        entry["exit"] = code
        if code == 0:
            entry["state"] = "done"
        elif entry["attempts"] <= self.retries and not self.stopping:
            entry["state"] = "pending"
            pending.insert(0, run_id)  # resumes from its checkpoint, in its own logdir
            print(f"sweep: {run_id} exited with {code}; starting it again", flush=True)
        else:
            entry.update(state="failed", why=_last_line(job))
            print(f"sweep: {run_id} failed (exit {code}): {entry['why']}", flush=True)
        save_state(self.logdir, self.state)
        self.on_change(self.state)


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the sweep's own flags, the --config.KEY=VALUE flags every run gets)."""
    own = [a for a in argv if not a.startswith("--config.")]
    return own, [a for a in argv if a.startswith("--config.")]


_PASS_THROUGH: list[str] = []


def _parse(argv: list[str]):
    own, passed = _split_argv(argv)
    _PASS_THROUGH[:] = passed
    return flags.FLAGS(own)


def main(argv) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _LOGDIR.value:
        raise app.UsageError("--logdir is required (the sweep's directory)")
    logdir = os.path.abspath(_LOGDIR.value)
    try:
        config = api._config_path(_CONFIG.value)
        passed = {}
        for flag in _PASS_THROUGH:
            key, sep, value = flag[len("--config.") :].partition("=")
            if not sep:
                raise SweepError(f"{flag}: expected --config.KEY=VALUE")
            passed[key] = value
        cells = make_cells(
            parse_grid(_GRID.value), parse_space(_SPACE.value), _RANDOM.value, _SWEEP_SEED.value
        )
        base_seed = int(load_config_file(config).seed)
        for cell in cells:
            check_cell(config, {**passed, **cell})
    except (SweepError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    if _SEEDS.value < 1 or _PARALLEL.value < 1 or not 0 < _FINAL_FRACTION.value <= 1:
        sys.exit("error: --seeds and --parallel must be >= 1 and --final_fraction in (0, 1]")
    passed.setdefault("log.wandb_group", os.path.basename(logdir))
    run_flags = [f"--config.{key}={value}" for key, value in passed.items()]
    runs = {
        f"{cell_name(cell)}/seed_{k}": (cell, base_seed + k)
        for cell in cells
        for k in range(_SEEDS.value)
    }
    os.makedirs(logdir, exist_ok=True)
    args = (_METRIC.value, _MODE.value, _FINAL_FRACTION.value)
    sweeper = Sweeper(
        config, logdir, runs, run_flags, _NUM_ACTORS.value, _PARALLEL.value, _RETRIES.value,
        on_change=lambda state: write_results(state, logdir, *args),
    )  # fmt: skip

    def stop(signum, frame):
        sweeper.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    done = sum(sweeper.state["runs"][r]["state"] == "done" for r in runs)
    print(f"sweep: {len(runs)} runs in {len(cells)} cells ({done} done before); {logdir}")
    state = sweeper.run()
    write_results(state, logdir, *args)
    mine = [state["runs"][r] for r in runs]
    failed = [r for r in runs if state["runs"][r]["state"] == "failed"]
    if sweeper.stopping:
        print("sweep: stopped; rerun the same command to resume", flush=True)
        return 130
    print(f"sweep: {sum(r['state'] == 'done' for r in mine)} of {len(runs)} runs done; "
          f"table in {os.path.join(logdir, 'sweep.md')}")  # fmt: skip
    if failed:
        print(f"sweep: {len(failed)} failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=_parse)
