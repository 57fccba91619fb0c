"""Many training jobs from one command, for seedlike.launch.sweep and seedlike.launch.pbt: config
values as grids and distributions, their check against a config before anything starts, a runner
that keeps N `scripts/train.sh` jobs going and survives a failed one, and a run's final metric.

A job's state lives in a JSON file of the directory the jobs share, written whole and renamed into
place, so a command killed at any moment resumes from the last state it wrote.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import math
import os
import re
import time

import numpy as np

from seedlike.config import (
    ConfigError,
    env_spec,
    load_config_file,
    renamed,
    validate,
    validate_network,
)
from seedlike.launch import api
from seedlike.metrics import duration
from seedlike.scores import final_score

POLL_S = 1.0
PROGRESS_S = 30.0  # a line on the runs in progress this often
SPACE_KINDS = ("log", "uniform", "int", "choice")


class SpecError(ValueError):
    """Jobs that cannot start as given; the message says why, in one line."""


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
        raise SpecError(f"--{flag}={spec!r}: expected KEY=VALUES, e.g. --{flag}=ppo.epochs=4,10")
    return key, values


def parse_grid(specs: list[str]) -> dict[str, list[str]]:
    """--grid flags -> {key: [values as text]}, in the order given."""
    grid = {}
    for spec in specs:
        key, values = _key_values(spec, "grid")
        if key in grid:
            raise SpecError(f"--grid: {key} is given twice; list all its values in one flag")
        grid[key] = values.split(",")
    return grid


def parse_space(specs: list[str]) -> dict[str, Dist]:
    """--space flags -> {key: Dist}."""
    space = {}
    for spec in specs:
        key, text = _key_values(spec, "space")
        kind, _, args = text.partition(":")
        if kind not in SPACE_KINDS:
            raise SpecError(f"--space={spec!r}: kind {kind!r} is not one of {SPACE_KINDS}")
        if kind == "choice":
            space[key] = Dist(kind, tuple(args.split(",")))
            continue
        try:
            low, high = (float(a) for a in args.split(":"))
        except ValueError:
            raise SpecError(f"--space={spec!r}: expected {kind}:LOW:HIGH") from None
        if not low < high or (kind == "log" and low <= 0):
            raise SpecError(f"--space={spec!r}: need LOW < HIGH (and LOW > 0 for log)")
        space[key] = Dist(kind, (low, high))
    return space


def make_cells(
    grid: dict[str, list[str]], space: dict[str, Dist], random: int, seed: int
) -> list[dict[str, str]]:
    """The cells: every combination of the grid, crossed with `random` draws from `space`."""
    if random and not space:
        raise SpecError("--random needs --space flags to draw from")
    if space and not random:
        raise SpecError("--space is only drawn from with --random=N")
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
        raise SpecError(
            f"{key}={text!r}: not a {type(current).__name__} like the config's {current!r}"
        ) from None


def _parent(config, key: str):
    """(the section holding dotted `key`, or None if there is none; the key's last part). A key
    of an older name is looked up under its new one (seedlike.config.RENAMED_KEYS)."""
    *parents, last = renamed(key).split(".")
    node = config
    for part in parents:
        node = node.get(part) if hasattr(node, "get") else None
    return node, last


def check_not_set_per_run(keys, flag: str, why: str) -> None:
    """SpecError if `keys` (of a --grid or --space) names a setting the command sets per run."""
    ours = [k for k in keys if k in ("seed", "pause_at_env_steps")]
    if ours:
        raise SpecError(f"{flag} {ours[0]}: {why}")


def canonical(config_path: str, overrides: dict[str, str]) -> dict[str, str]:
    """`overrides` (checked: check_cell) with integer settings written as integers ("2e4" ->
    "20000", "4.0" -> "4"): --config flags read them with int(), which refuses the others."""
    config = load_config_file(config_path)
    out = {}
    for key, text in overrides.items():
        node, last = _parent(config, key)
        current = node.get(last) if hasattr(node, "get") else None
        if isinstance(current, int) and not isinstance(current, bool):
            text = str(_typed(current, text, key))
        out[key] = text
    return out


def check_cell(config_path: str, overrides: dict[str, str]) -> None:
    """Raises SpecError unless `overrides` are known keys with values of their type that
    seedlike.config.validate accepts."""
    configured(config_path, overrides)


def configured(config_path: str, overrides: dict[str, str]):
    """The config of `config_path` with `overrides` (--config.KEY=VALUE texts), validated;
    SpecError naming the first key or value that cannot work."""
    config = load_config_file(config_path)
    with config.unlocked():
        for key, text in overrides.items():
            node, last = _parent(config, key)
            if not hasattr(node, "keys") or last not in node:
                raise SpecError(f"unknown config key {key!r}: {config_path} has no such setting")
            node[last] = _typed(node[last], text, key)
    try:
        validate(config)
        validate_network(config, env_spec(config))
    except ConfigError as e:
        raise SpecError(f"{cell_name(overrides)}: {e}") from None
    return config


def run_result(rows: list[dict], metric: str, mode: str, final_fraction: float) -> dict | None:
    """final (seedlike.scores.final_score: the mean over the last `final_fraction` of the rows
    with `metric`) and best of a run; None before any row has it."""
    values = [r[metric] for r in rows if r.get(metric) is not None and math.isfinite(r[metric])]
    if not values:
        return None
    return {
        "final": final_score(rows, metric, final_fraction),
        "best": float(max(values) if mode == "max" else min(values)),
        "env_steps": int(rows[-1].get("env_steps", 0)),
    }


def base_seed(config_path: str, passed: dict[str, str]) -> int:
    """The seed a command's runs count from (run k gets it + k): --config.seed if given, else the
    config's."""
    if "seed" in passed:
        return as_int(passed["seed"], "seed")
    return int(load_config_file(config_path).seed)


def as_int(text: str, key: str) -> int:
    """A --config.KEY=VALUE integer (1e5 too); SpecError naming it otherwise."""
    try:
        return int(float(text))
    except ValueError:
        raise SpecError(f"--config.{key}={text!r}: not an integer") from None


def load_state(logdir: str, name: str) -> dict:
    path = os.path.join(logdir, name)
    if not os.path.exists(path):
        return {"runs": {}}
    with open(path) as f:
        return json.load(f)


def save_state(logdir: str, state: dict, name: str) -> None:
    path = os.path.join(logdir, name)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=2)
    os.replace(path + ".tmp", path)  # a sweep killed mid-write keeps the previous state


def _last_line(run: api.Run) -> str:
    try:
        lines = [line for line in run.log(2000).splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-200:] if lines else ""


def last_row(run_dir: str) -> dict:
    """The last complete row of a run's metrics.jsonl ({} before its first), read from the end."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:  # the first, cut line, or one being written
            continue
    return {}


@dataclasses.dataclass
class Pace:
    """An active run's steps over time in this command, for its progress and ETA: measured from
    the first sample at which its steps had moved (not from its start: compiling, actors
    connecting, a resumed run's restart)."""

    started: float
    seen: int | None = None  # its steps at the last sample
    steps0: int | None = None  # and at the first sample after they moved
    time0: float = 0.0
    samples: int = 0  # samples since then

    def sample(self, steps: int, now: float) -> float | None:
        """Records a sample; env steps/s once two samples after it began moving measured it."""
        if self.steps0 is not None:
            self.samples += 1
        elif self.seen is not None and steps > self.seen:
            self.steps0, self.time0 = steps, now
        self.seen = steps
        if self.samples < 2 or steps <= self.steps0:
            return None
        return (steps - self.steps0) / (now - self.time0)


class Runner:
    """Runs jobs `parallel` at a time, keeping their states in <logdir>/<state_file>, and prints a
    line for each run that starts, ends or fails, and every PROGRESS_S a line on the runs in
    progress with an ETA (once their speed is measured).

    runs: {run id (its directory under logdir): (cell: config values, seed)}; `flags`: config
    flags every run gets; `on_change(state)` after each run ends; `train` starts a run
    (seedlike.launch.api.train's signature); `label` starts the lines it prints; `metric`: the
    metrics key a finished run's line reports; `actors`: {run id: actor processes} where a run has
    other than `num_actors`; `nice`: {run id: niceness}.
    """

    def __init__(self, config: str, logdir: str, runs: dict, flags: list[str], num_actors: int,
                 parallel: int, retries: int, state_file: str, on_change=lambda state: None,
                 train=api.train, label: str = "jobs", actors=None, nice=None,
                 metric: str = "episode_return_robust"):  # fmt: skip
        self.config, self.logdir, self.flags = config, logdir, flags
        self.actors, self.nice = dict(actors or {}), dict(nice or {})
        self.num_actors, self.parallel, self.retries = num_actors, parallel, retries
        self.on_change, self.state_file, self.train = on_change, state_file, train
        self.label, self.metric = label, metric  # what its lines start with, and report
        self._paces: dict[str, Pace] = {}
        self._durations: list[float] = []  # wall seconds of the runs finished here
        self._config_total: int | None = None  # the config file's total_env_steps, when read
        self.state = load_state(logdir, state_file)
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
        # The run's own values win over the shared flags (which train.sh would read last).
        shared = [f for f in self.flags if f[len("--config.") :].split("=", 1)[0] not in overrides]
        run = self.train(
            self.config,
            os.path.join(self.logdir, run_id),
            num_actors=self.actors.get(run_id, self.num_actors),
            overrides=overrides,
            flags=tuple(shared),
            **({"nice": self.nice[run_id]} if self.nice.get(run_id) else {}),
        )
        entry.update(state="running", pid=run.process.pid)
        self._paces[run_id] = Pace(time.monotonic())
        index = self.order.index(run_id) + 1
        again = f", attempt {entry['attempts']}" if entry["attempts"] > 1 else ""
        print(
            f"{self.label}: started {run_id} (run {index} of {len(self.order)}{again})", flush=True
        )
        return run

    def _target(self, run_id: str) -> int | None:
        """The env steps a run trains to: its pause (PBT's generations), else its total."""
        cell = self.state["runs"][run_id]["cell"]
        values = {**config_values(self.flags), **cell}
        for key in ("pause_at_env_steps", "total_env_steps"):
            if key in values and as_int(str(values[key]), key):  # a pause of 0 is none
                return as_int(str(values[key]), key)
        if self._config_total is None:
            self._config_total = int(load_config_file(self.config).total_env_steps)
        return self._config_total

    def progress(self, active: list[str], pending: int) -> str:
        """One line on the runs: how many done, each active run's steps and return, and an ETA
        once every active run's speed is measured."""
        now = time.monotonic()
        done = sum(self.state["runs"][r]["state"] == "done" for r in self.order)
        parts, left, estimates = [], [], list(self._durations)
        for run_id in active:
            row, pace, target = (
                last_row(os.path.join(self.logdir, run_id)),
                self._paces[run_id],
                self._target(run_id),
            )
            steps = int(row.get("env_steps") or 0)
            text = f"{run_id} {steps / target:.0%}" if target else f"{run_id} {steps} steps"
            if row.get(self.metric) is not None:
                text += f" {self.metric} {row[self.metric]:.4g}"
            parts.append(text)
            rate = pace.sample(steps, now)
            if rate is not None and target:
                left.append(max(target - steps, 0) / rate)
                estimates.append(now - pace.started + left[-1])
        line = f"{self.label}: {done} of {len(self.order)} done"
        if parts:
            line += f", running {'; '.join(parts)}"
        if pending:
            line += f", {pending} waiting"
        if active and len(left) == len(active) and estimates:
            # The active runs' time left, then the waiting ones at the mean run's length, shared
            # among the slots.
            waiting = pending * float(np.mean(estimates)) / self.parallel
            line += f"; ETA {duration(max(left) + waiting)}"
        return line

    def run(self) -> dict:
        pending = [r for r in self.order if self.state["runs"][r]["state"] != "done"]
        active: dict[str, api.Run] = {}
        next_progress = time.monotonic() + PROGRESS_S
        try:
            while (pending or active) and not self.stopping:
                while pending and len(active) < self.parallel:
                    run_id = pending.pop(0)
                    active[run_id] = self._start(run_id)
                    save_state(self.logdir, self.state, self.state_file)
                time.sleep(POLL_S)
                if time.monotonic() >= next_progress and active:
                    print(self.progress(list(active), len(pending)), flush=True)
                    next_progress = time.monotonic() + PROGRESS_S
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
            save_state(self.logdir, self.state, self.state_file)
        return self.state

    def _ended(self, run_id: str, job: api.Run, code: int, pending: list) -> None:
        entry = self.state["runs"][run_id]
        entry["exit"] = code
        pace = self._paces.pop(run_id, None)
        if code == 0:
            entry["state"] = "done"
            wall = time.monotonic() - pace.started if pace else 0.0
            self._durations.append(wall)
            value = last_row(os.path.join(self.logdir, run_id)).get(self.metric)
            said = f": {self.metric} {value:.4g}" if value is not None else ""
            took = duration(wall, precise=True)
            print(f"{self.label}: {run_id} done in {took}{said}", flush=True)
        elif entry["attempts"] <= self.retries and not self.stopping:
            entry["state"] = "pending"
            pending.insert(0, run_id)  # resumes from its checkpoint, in its own logdir
            print(f"{self.label}: {run_id} exited with {code}; starting it again", flush=True)
        else:
            entry.update(state="failed", why=_last_line(job))
            print(f"{self.label}: {run_id} failed (exit {code}): {entry['why']}", flush=True)
        save_state(self.logdir, self.state, self.state_file)
        self.on_change(self.state)


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the sweep's own flags, the --config.KEY=VALUE flags every run gets)."""
    own = [a for a in argv if not a.startswith("--config.")]
    return own, [a for a in argv if a.startswith("--config.")]


def config_values(config_flags: list[str]) -> dict[str, str]:
    """{KEY: VALUE} of --config.KEY=VALUE flags."""
    passed = {}
    for flag in config_flags:
        key, sep, value = flag[len("--config.") :].partition("=")
        if not sep:
            raise SpecError(f"{flag}: expected --config.KEY=VALUE")
        passed[key] = value
    return passed


def flags_parser(config_flags: list[str]):
    """An absl app.run flags_parser for a command whose --config.KEY=VALUE flags go to every
    job: it parses the others and leaves those in `config_flags`."""

    def parse(argv: list[str]):
        from absl import flags

        own, passed = split_argv(argv)
        config_flags[:] = passed
        return flags.FLAGS(own)

    return parse


def command_paths(argv: list[str], logdir: str | None, config: str, what: str) -> tuple[str, str]:
    """(absolute logdir, config path) of a command line; a usage error names what is missing.
    FileNotFoundError: no such config."""
    from absl import app

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not logdir:
        raise app.UsageError(f"--logdir is required ({what})")
    return os.path.abspath(logdir), api._config_path(config)
