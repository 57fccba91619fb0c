"""Metrics sinks: <logdir>/metrics.jsonl (one JSON object per interval), wandb, the console and
optionally TensorBoard event files."""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import time
import uuid

from seedlike.runtime import storage
from seedlike.runtime.storage import StorageError

# Shown on the one-line console summary after the progress, in this order: (key, label, format).
CONSOLE_FIELDS = (
    ("sps", "sps", "{:,.0f}"),
    ("episode_return_mean", "return", "{:.2f}"),
    ("episode_length_mean", "len", "{:.1f}"),
    ("episodes", "eps", "{:.0f}"),
    ("policy_version", "version", "{:.0f}"),
    ("staleness_mean", "stale", "{:.2f}"),
    ("loss/total", "loss", "{:.4f}"),
    ("actors_connected", "actors", "{:.0f}"),
)
# Shown only in runs whose rows have them (success threshold set, league, TrueSkill evaluation):
# the numbers that say whether such a run is progressing, where the return alone does not.
CONSOLE_OPTIONAL = (
    ("episode_success_rate", "success", "{:.2f}"),
    ("league/win_rate_vs_pool", "win vs pool", "{:.2f}"),
    ("trueskill_mu", "trueskill", "{:.1f}"),
)
WANDB_ID_FILE = "wandb_run_id"
CONFIG_FILE = "config.json"  # the run's resolved config, written when it starts
SUMMARY_FILE = "summary"  # summary.json and summary.md, written when it ends
RATE_WINDOW_S = 60.0  # the ETA follows the speed of the last minute
TENSORBOARD_DIR = "tensorboard"
_VS_POOL = "league/win_rate_vs_pool"  # the other league/win_rate_vs_* keys are bots


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


class MetricsWriter:
    """Appends rows to metrics.jsonl and mirrors them to wandb and the console.

    Args:
      logdir: run directory.
      config: the experiment config, stored with the wandb run.
      wandb_mode: "offline" (default), "online" or "disabled"; the WANDB_MODE environment
        variable overrides it.
      wandb_project: wandb project name.
      wandb_group: wandb group of the run ("": none; a sweep's cells share one).
      total_env_steps: the run's length, for the console's progress and ETA (None: no ETA).
      use_wandb: False keeps this writer off wandb whatever the mode (learner processes other
        than 0 of a multi-host run: one wandb run per job).
      tensorboard: also write every number as a TensorBoard scalar (x: env steps) to
        <logdir>/tensorboard; a resumed run adds a file there and its curves continue.
    """

    def __init__(
        self,
        logdir: str,
        config,
        wandb_mode: str = "offline",
        wandb_project: str = "seedlike",
        wandb_group: str = "",
        total_env_steps: int | None = None,
        tensorboard: bool = False,
        use_wandb: bool = True,
        label: str = "",
    ):
        os.makedirs(logdir, exist_ok=True)
        self.path = os.path.join(logdir, "metrics.jsonl")
        _drop_partial_row(self.path)
        self._file = open(self.path, "a", buffering=1)
        self._write_failed = False
        self._start = self.started = time.time()
        self._total = total_env_steps
        self._label = label
        # (time, env_steps) of this process's recent rows since its steps began to move, for the
        # rate behind the ETA (compiling, actors connecting and a resume's restart come before).
        self._recent: collections.deque = collections.deque()
        self._previous_steps: int | None = None
        self.rows_written = 0
        self.best_return: float | None = None
        self.last_return: float | None = None  # the newest row's that had episodes
        self.last: dict = {}  # the last row (values as written)
        self._wandb = None
        mode = os.environ.get("WANDB_MODE") or wandb_mode
        if use_wandb and mode != "disabled":
            self._wandb = self._init_wandb(logdir, config, wandb_project, wandb_group, mode)
        self._tensorboard = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            # Event files are named by the second they start in; the suffix keeps a resume within
            # that second from overwriting the first file.
            self._tensorboard = SummaryWriter(
                os.path.join(logdir, TENSORBOARD_DIR), filename_suffix=f".{uuid.uuid4().hex[:8]}"
            )

    @staticmethod
    def _init_wandb(logdir, config, project, group, mode):
        try:
            import wandb

            run = wandb.init(
                project=project,
                group=group or None,
                name=os.path.basename(os.path.abspath(logdir)),
                id=_wandb_run_id(logdir),
                resume="allow",
                dir=logdir,
                mode=mode,
                config=config.to_dict() if hasattr(config, "to_dict") else dict(config),
                reinit="finish_previous",
                # Its banner and history summary are ~30 console lines a run; one line here.
                settings=wandb.Settings(silent=True, console="off"),
            )
            where = os.path.dirname(getattr(run, "dir", "") or "") or logdir  # not its files/
            if mode == "offline":
                logging.info("wandb: offline run in %s (wandb sync uploads it)", where)
            else:
                logging.info("wandb: %s", getattr(run, "url", None) or where)
            return run
        except Exception as e:  # noqa: BLE001 - metrics must never take training down
            logging.warning("wandb disabled: %s: %s", type(e).__name__, e)
            return None

    def write(self, row: dict) -> None:
        row = {k: _jsonable(v) for k, v in row.items()}
        try:
            self._file.write(json.dumps(row, sort_keys=True) + "\n")
        except OSError as e:
            self._write_failed = True
            raise StorageError(f"cannot write {self.path}: {storage.reason(e)}") from None
        if self._wandb is not None:
            self._wandb.log(
                {k: v for k, v in row.items() if v is not None}, step=int(row["env_steps"])
            )
        if self._tensorboard is not None:
            step = int(row["env_steps"])
            for key, value in row.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._tensorboard.add_scalar(key, value, step)
        steps = row["env_steps"]
        moving = self._previous_steps is not None and steps > self._previous_steps
        self._previous_steps = steps
        if self._recent or moving:
            self._recent.append((row["time"], steps))
        while len(self._recent) > 3 and row["time"] - self._recent[1][0] >= RATE_WINDOW_S:
            self._recent.popleft()
        self.rows_written += 1
        self.last = row
        returns = row.get("episode_return_mean")
        if returns is not None and (self.best_return is None or returns > self.best_return):
            self.best_return = returns
        if returns is not None:
            self.last_return = returns
        elapsed = time.time() - self._start
        # A row's sps once its whole interval was in motion; an ETA after two such intervals.
        shown = row if len(self._recent) >= 2 else {**row, "sps": None}
        line = console_line(shown, elapsed, self._total, self._rate())
        logging.info("%s%s", f"{self._label}: " if self._label else "", line)

    def _rate(self) -> float | None:
        """Env steps per second over this process's rows of the last RATE_WINDOW_S seconds, from
        the second interval in motion on: steadier than one row's `sps`, and it follows the run's
        speed now (not its start's: compiling, actors connecting, a resume)."""
        if len(self._recent) < 3:
            return None
        (t0, steps0), (t1, steps1) = self._recent[0], self._recent[-1]
        steps, seconds = steps1 - steps0, t1 - t0
        return steps / seconds if steps > 0 and seconds > 0 else None

    def summary(self, outcome: str, checkpoint: str | None) -> str:
        """One line for the end of a run: what it reached, how fast, where it is."""
        row = self.last
        elapsed = time.time() - self._start
        parts = [
            f"{self._label + ': ' if self._label else ''}{outcome} at "
            f"{_si(row.get('env_steps') or 0)} env steps, policy version "
            f"{row.get('policy_version', '-')}, after {duration(elapsed, precise=True)}"
        ]
        if self.last_return is not None:
            # The newest row with episodes: a row cut short by a stop may have none.
            parts.append(f"return {self.last_return:.2f} (best {self.best_return:.2f})")
        if checkpoint:
            parts.append(f"checkpoint {checkpoint}")
        parts.append(f"metrics {self.path}")
        return "; ".join(parts)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            if not self._write_failed:
                raise
            # else the line write() could not write is still buffered; write() has said why
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def write_config(logdir: str, config) -> str:
    """<logdir>/config.json: the run's resolved config, every setting, readable (and loadable:
    configs/of_run.py)."""
    path = os.path.join(logdir, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(json.dumps(json.loads(config.to_json()), indent=2, sort_keys=True) + "\n")
    return path


def run_summary(logdir: str, outcome: str, total_env_steps: int, wall_s: float, **extra) -> dict:
    """What a run ended with, from its metrics rows: its outcome ("finished", "stopped",
    "paused"), env steps against the budget, the wall time and env steps/s of this process's
    session, and the final return (over its last 10% of episodes) with a bootstrap 95% interval
    over those rows; `extra`: the checkpoint and the like."""
    from seedlike.scores import final_interval, final_score

    rows = read_metrics(logdir)
    last = rows[-1] if rows else {}
    returns = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None]
    session = [r for r in rows if r["time"] >= last.get("time", 0) - wall_s]
    steps = [r["env_steps"] for r in session] or [0]
    return {
        "outcome": outcome,
        "env_steps": last.get("env_steps", 0),
        "total_env_steps": int(total_env_steps),
        "policy_version": last.get("policy_version"),
        "wall_s": round(wall_s, 1),
        # This session's env steps over its whole wall time, its start and compiling included.
        "env_steps_per_s": round((steps[-1] - steps[0]) / wall_s) if wall_s > 0 else None,
        "final_return": _jsonable(final_score(rows, weight="episodes")),
        "final_return_ci95": [_jsonable(x) for x in final_interval(rows, weight="episodes")],
        "best_return": max(returns) if returns else None,
        "episodes": sum(r.get("episodes") or 0 for r in rows),
        **extra,
        "metrics": os.path.join(logdir, "metrics.jsonl"),
        "config": os.path.join(logdir, CONFIG_FILE),
    }


def write_summary(logdir: str, summary: dict) -> None:
    """<logdir>/summary.json and summary.md (a table of the same)."""
    with open(os.path.join(logdir, SUMMARY_FILE + ".json"), "w") as f:
        f.write(json.dumps(summary, indent=2) + "\n")
    lines = [f"# {os.path.basename(os.path.abspath(logdir))}", "", "| | |", "| --- | --- |"]
    for key, value in summary.items():
        if isinstance(value, float):
            value = f"{value:,.2f}"
        elif isinstance(value, list):
            value = " to ".join("-" if v is None else f"{v:,.2f}" for v in value)
        lines.append(f"| {key} | {'-' if value is None else value} |")
    with open(os.path.join(logdir, SUMMARY_FILE + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def read_summary(logdir: str) -> dict | None:
    """A run's summary.json, or None (a run still going, or from before summaries)."""
    try:
        with open(os.path.join(logdir, SUMMARY_FILE + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _wandb_run_id(logdir: str) -> str:
    """The run's wandb id, kept in the logdir: every resume and curriculum stage of a run logs to
    one wandb run (offline, `wandb sync` uploads the pieces in order), not a new one each time."""
    path = os.path.join(logdir, WANDB_ID_FILE)
    if os.path.exists(path):
        with open(path) as f:
            run_id = f.read().strip()
        if run_id:
            return run_id
    run_id = uuid.uuid4().hex[:12]
    with open(path, "w") as f:
        f.write(run_id + "\n")
    return run_id


def console_line(
    row: dict, elapsed: float, total_env_steps: int | None = None, rate: float | None = None
) -> str:
    """`[hh:mm:ss] steps 1.2M / 10M 12% ETA 14m  sps ...`; `rate` (env steps/s) gives the ETA."""
    parts = [f"[{_clock(elapsed)}]", _progress(row.get("env_steps"), total_env_steps, rate)]
    fields = CONSOLE_FIELDS + tuple(f for f in CONSOLE_OPTIONAL if f[0] in row)
    bots = sorted(k for k in row if k.startswith("league/win_rate_vs_") and k != _VS_POOL)
    fields += tuple((k, "win vs " + k.rsplit("_vs_", 1)[1], "{:.2f}") for k in bots)
    for key, label, fmt in fields:
        value = row.get(key)
        parts.append(f"{label} {fmt.format(value) if value is not None else '-'}")
    return "  ".join(parts)


def _clock(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    return f"{h:02d}:{rem // 60:02d}:{rem % 60:02d}"


def _progress(steps, total, rate) -> str:
    if steps is None:
        return "steps -"
    if not total:
        return f"steps {_si(steps)}"
    text = f"steps {_si(steps)} / {_si(total)} {min(steps / total, 1.0):.0%}"
    if rate and steps < total:
        text += f" ETA {duration((total - steps) / rate)}"
    return text


def _si(n: float) -> str:
    """1234 -> 1.2k, 10_000_000 -> 10M."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def duration(seconds: float, precise: bool = False) -> str:
    """1h05m, 14m, 9s; `precise`: 14m05s."""
    minutes = int(seconds // 60)
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    if minutes and precise:
        return f"{minutes}m{int(seconds) % 60:02d}s"
    return f"{minutes}m" if minutes else f"{int(seconds)}s"


def read_metrics(logdir: str) -> list[dict]:
    """All rows of <logdir>/metrics.jsonl (None for missing values). A live run's last line may
    be half written; it is left out, as is any other line that is not a row (a run stopped
    while writing it and resumed by an older seedlike, which appended after it), with a warning."""
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    rows, bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                bad.append(number)
    if bad:
        logging.warning("%s: lines %s are not metrics rows; left out", path, bad[:5])
    return rows


def _drop_partial_row(path: str) -> None:
    """Cuts the row a run was writing when it stopped (the file does not end in a newline), so
    that the rows a resumed run appends start on lines of their own."""
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        if not end:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        at = end
        while at > 0:  # back to the last newline, 64 KiB at a time
            start = max(0, at - (1 << 16))
            f.seek(start)
            newline = f.read(at - start).rfind(b"\n")
            at = start if newline < 0 else start + newline + 1
            if newline >= 0:
                break
        f.truncate(at)
    logging.warning("%s ended in a half-written row (the run stopped while writing it); cut", path)
