"""A long run, watched: does anything grow without bound?

Starts a training command in its own process group with `--logdir=DIR` added, samples every
process it starts (learners, actors, launchers) every --interval_s from /proc
(seedlike/runtime/procstats.py: resident memory, threads, open files, CPU) and the run directory's
disk use, then stops the run with Ctrl-C (SIGINT to the group) as a user would and times the stop.

The baseline is the same run after its warm-up (--warmup, a fraction of the minutes: compiled
programs, buffer pools, a league's pool up to its cap): for each process, the resident memory at
the warm-up's end and at the last sample, and the least-squares slope of the samples after the
warm-up in MiB per hour; threads and open files as a range after the warm-up. A process that
leaks shows a slope that does not fall as the run gets longer; one that only warms up shows a
slope near 0. Writes the samples and the summary as JSON (benchmarks/results/soak-*.json).

  python -m benchmarks.soak --minutes=40 --logdir=runs/soak -- \\
      scripts/train.sh --config=configs/connect4_selfplay.py
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

from absl import app, flags

from benchmarks import results_io
from seedlike.runtime import procstats

_MINUTES = flags.DEFINE_float("minutes", 30.0, "How long the run lasts before Ctrl-C.")
_INTERVAL = flags.DEFINE_float("interval_s", 15.0, "Seconds between samples.")
_WARMUP = flags.DEFINE_float("warmup", 0.25, "Fraction of the minutes before the baseline.")
_LOGDIR = flags.DEFINE_string("logdir", None, "The run's directory (added as --logdir=).")
_STOP_S = flags.DEFINE_float("stop_s", 180.0, "Seconds the run may take to stop.")
_FROM = flags.DEFINE_string(
    "from_json", None, "Summarize the samples of an earlier soak's JSON again (no run)."
)
_OUT = flags.DEFINE_string("out", None, "JSON path (default benchmarks/results/soak-<time>.json).")


# What a launcher's shell runs for a moment between its checks on the processes it started.
_TRANSIENT = ("sleep",)


def descendants(root: int) -> dict[int, int]:
    """`root` and every process below it, each with its parent (parents first), from /proc."""
    parent = {pid: process.ppid for pid, process in procstats.processes().items()}
    found, frontier = {root: 0}, {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier}
        found.update({pid: parent[pid] for pid in sorted(frontier)})
    return found


def group(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies left out)."""
    return [
        pid
        for pid, process in procstats.processes().items()
        if process.pgid == pgid and process.state != "Z"
    ]


def label(pid: int) -> str | None:
    """What a process of the run is: learner, actor_<actor_id>, a launcher script with the run
    directory it was given (train.sh:<dir's last part>), a module run with -m, or the program's
    name; None once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except (FileNotFoundError, ProcessLookupError):
        return None
    if not argv:
        return None  # a zombie
    value = {
        a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a
    }
    scripts = [os.path.basename(a) for a in argv[1:] if a.endswith((".py", ".sh"))]
    if "learner.py" in scripts:
        return "learner"
    if "actor.py" in scripts:
        return f"actor_{value.get('--actor_id', '?')}"
    if "-m" in argv:
        return argv[argv.index("-m") + 1]
    if scripts and scripts[0].endswith(".sh"):
        return scripts[0] + ":" + os.path.basename(os.path.normpath(value.get("--logdir", "")))
    return os.path.basename(scripts[0] if scripts else argv[0])


def disk_mb(logdir: str) -> dict[str, float]:
    """MiB under each top-level entry of the run directory."""
    sizes = {}
    for entry in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
        total = 0
        path = os.path.join(logdir, entry)
        for parent, _, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
            for name in files:
                try:
                    total += os.lstat(os.path.join(parent, name)).st_size
                except FileNotFoundError:
                    continue
        sizes[entry] = total / 2**20
    return sizes


def env_steps(logdir: str) -> int:
    """Env steps of the run's learners so far: the newest metrics row of each learner's
    metrics.jsonl under the run directory, summed."""
    total = 0
    for parent, dirs, files in os.walk(logdir):
        dirs[:] = [d for d in dirs if d not in ("wandb", "checkpoints", "league")]
        if "metrics.jsonl" in files:
            with open(os.path.join(parent, "metrics.jsonl"), "rb") as f:
                lines = f.read().splitlines()
            for line in reversed(lines):
                try:
                    total += int(json.loads(line).get("env_steps") or 0)
                    break
                except (ValueError, AttributeError):
                    continue  # a row being written
    return total


def sample(root: int, logdir: str, t0: float) -> dict:
    processes, names = {}, {}
    for pid, parent in descendants(root).items():
        name = label(pid)
        if name is None or name in _TRANSIENT:
            continue
        # A path of labels (train.sh:main/learner/wandb-core) names a process across restarts.
        name = names[parent] + "/" + name if parent in names else name
        names[pid] = name if name not in processes else f"{name}#{pid}"
        use = procstats.usage(pid)
        if use is not None:
            processes[names[pid]] = {"pid": pid, **vars(use)}
    return {
        "t_s": time.monotonic() - t0,
        "env_steps": env_steps(logdir),
        "processes": processes,
        "disk_mb": disk_mb(logdir),
    }


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour; None under 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return 3600 * sum((t - mt) * (v - mv) for t, v in points) / var


def quarter_medians(values: list[float]) -> list[float]:
    """Medians of the four consecutive quarters of `values` (fewer with under 4 values)."""
    k = min(4, len(values))
    bounds = [round(i * len(values) / k) for i in range(k + 1)] if k else []
    return [float(statistics.median(values[a:b])) for a, b in zip(bounds, bounds[1:])]


def summarize(samples: list[dict], warmup_s: float) -> dict:
    """Per process and per directory entry: the value at the warm-up's end, at the end, and the
    slope after the warm-up."""
    after = [s for s in samples if s["t_s"] >= warmup_s] or samples[-1:]
    names = sorted({n for s in samples for n in s["processes"]})
    processes = {}
    for name in names:
        seen = [(s["t_s"], s["processes"][name]) for s in after if name in s["processes"]]
        if not seen:
            continue
        whole = [(s["t_s"], s["processes"][name]) for s in samples if name in s["processes"]]
        span = whole[-1][0] - whole[0][0]
        processes[name] = {
            "rss_mb_after_warmup": seen[0][1]["rss_mb"],
            "rss_mb_end": seen[-1][1]["rss_mb"],
            "rss_mb_max": max(u["rss_mb"] for _, u in seen),
            "rss_mb_per_hour": slope_per_hour([(t, u["rss_mb"]) for t, u in seen]),
            # Robust to the allocator's swings of tens of MiB: a leak rises quarter by quarter.
            "rss_mb_quarter_medians": quarter_medians([u["rss_mb"] for _, u in seen]),
            "threads": [min(u["threads"] for _, u in seen), max(u["threads"] for _, u in seen)],
            "open_files": [
                min(u["open_files"] for _, u in seen),
                max(u["open_files"] for _, u in seen),
            ],
            "cores": (whole[-1][1]["cpu_s"] - whole[0][1]["cpu_s"]) / span if span else None,
            "pids": sorted({u["pid"] for _, u in whole}),
        }
    entries = sorted({e for s in samples for e in s["disk_mb"]})
    disk = {
        e: {
            "mb_after_warmup": after[0]["disk_mb"].get(e, 0.0),
            "mb_end": after[-1]["disk_mb"].get(e, 0.0),
            "mb_per_hour": slope_per_hour([(s["t_s"], s["disk_mb"].get(e, 0.0)) for s in after]),
        }
        for e in entries
    }
    steps = [(s["t_s"], s["env_steps"]) for s in after]
    return {
        "env_steps_end": samples[-1]["env_steps"],
        "env_steps_per_s_after_warmup": (
            (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0])
            if len(steps) > 1 and steps[-1][0] > steps[0][0]
            else None
        ),
        "processes": processes,
        "disk": disk,
    }


def table(summary: dict) -> str:
    def num(v, fmt="{:.0f}"):
        return "-" if v is None else fmt.format(v)

    lines = [
        "| process | RSS after warm-up (MiB) | RSS end | MiB/hour after warm-up | medians by "
        "quarter after warm-up | threads | open files | cores |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, p in summary["processes"].items():
        lines.append(
            f"| {name} | {num(p['rss_mb_after_warmup'])} | {num(p['rss_mb_end'])} | "
            f"{num(p['rss_mb_per_hour'], '{:+.1f}')} | "
            f"{', '.join(f'{m:.0f}' for m in p['rss_mb_quarter_medians'])} | "
            f"{p['threads'][0]}-{p['threads'][1]} | "
            f"{p['open_files'][0]}-{p['open_files'][1]} | {num(p['cores'], '{:.2f}')} |"
        )
    lines += [
        "",
        "| run directory | MiB after warm-up | MiB end | MiB/hour |",
        "| --- | ---: | ---: | ---: |",
    ]
    for entry, d in summary["disk"].items():
        lines.append(
            f"| {entry} | {d['mb_after_warmup']:.1f} | {d['mb_end']:.1f} | "
            f"{num(d['mb_per_hour'], '{:+.1f}')} |"
        )
    return "\n".join(lines)


def main(argv):
    if _FROM.value:
        with open(_FROM.value) as f:
            earlier = json.load(f)
        warmup = _WARMUP.value if _WARMUP.present else earlier["warmup"]
        summary = summarize(earlier["samples"], warmup * 60 * earlier["minutes"])
        earlier.update({**summary, "warmup": warmup})
        with open(_FROM.value, "w") as f:
            json.dump(earlier, f, indent=2)
        print(table(summary))
        return
    command = argv[1:]
    if not command or _LOGDIR.value is None:
        raise app.UsageError("give --logdir=DIR and the run's command after --")
    if not os.path.isdir("/proc"):
        raise app.UsageError("benchmarks/soak.py reads /proc: it runs on Linux")
    command = command + [f"--logdir={_LOGDIR.value}"]
    # Started in the background by a shell, this process ignores SIGINT and so would the run,
    # which then could not be stopped as a user stops it: the run gets the default back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("running:", shlex.join(command), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    run = subprocess.Popen(command, start_new_session=True)
    samples = []
    end = t0 + 60 * _MINUTES.value
    try:  # Ctrl-C here ends the sampling early and stops the run as the time's end does
        while time.monotonic() < end and run.poll() is None:
            samples.append(sample(run.pid, _LOGDIR.value, t0))
            last = samples[-1]
            print(
                f"{last['t_s']:7.0f} s  {last['env_steps']:>12,} env steps  "
                + "  ".join(f"{n} {p['rss_mb']:.0f} MiB" for n, p in last["processes"].items()),
                file=sys.stderr,
                flush=True,
            )
            time.sleep(max(0.0, min(_INTERVAL.value, end - time.monotonic())))
    except KeyboardInterrupt:
        print("interrupted: stopping the run", file=sys.stderr)
    ended_early = run.poll()
    stop_s = None
    if ended_early is None:
        samples.append(sample(run.pid, _LOGDIR.value, t0))
        stopped = time.monotonic()
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=_STOP_S.value)
            stop_s = time.monotonic() - stopped
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    time.sleep(2.0)
    left_behind = [f"{pid} {label(pid)}" for pid in group(run.pid)]
    if left_behind:
        os.killpg(run.pid, signal.SIGKILL)
    summary = summarize(samples, _WARMUP.value * 60 * _MINUTES.value)
    result = {
        "command": shlex.join(command),
        "minutes": _MINUTES.value,
        "interval_s": _INTERVAL.value,
        "warmup": _WARMUP.value,
        "ended_before_the_time": ended_early is not None,
        "exit_code": run.returncode,
        "stop_s": stop_s,
        "left_behind": left_behind,
        **summary,
        "samples": samples,
    }
    out = results_io.write("soak", result, _OUT.value, echo={"stop_s": stop_s})
    print(table(summary))
    print(
        f"exit code {run.returncode}; stopped in {num_s(stop_s)}; processes left behind: "
        f"{left_behind or 'none'}; JSON in {out}"
    )
    if ended_early is not None:
        print(f"the run ended by itself after {samples[-1]['t_s']:.0f} s", file=sys.stderr)


def num_s(v):
    return "-" if v is None else f"{v:.1f} s"


if __name__ == "__main__":
    app.run(main)
