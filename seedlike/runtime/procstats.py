"""What a process holds of its host: resident memory, threads, open files and CPU time, and
where that CPU time goes: by thread, Python's against native, and the processes below it.

A run that lasts days fails on what grows slowly: a cache without a bound, a thread per
reconnecting actor, a file left open per snapshot. The learner writes its own usage into every
metrics row (docs/metrics.md) and benchmarks/soak.py follows every process of a run this way;
the benchmarks that split a process's CPU (benchmarks/server_capacity.py, scale_model.py,
actor_overhead.py, accel_host.py) read its threads and children here.

Linux reads /proc/<pid>; elsewhere only the calling process is known, and only what `resource`
(POSIX) and `threading` say of it (peak memory, Python threads); values not known are NaN, and
the thread and process tables are empty.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import threading
from typing import NamedTuple

from seedlike.runtime.threadnames import PREFIX

_PROC = "/proc"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclasses.dataclass(frozen=True)
class Usage:
    """One process at one moment."""

    rss_mb: float  # resident set: pages of the process in memory now, in MiB
    threads: int | float  # OS threads (Python's and native pools', XLA's and gRPC's)
    open_files: int | float  # file descriptors: files, sockets, pipes
    cpu_s: float  # user + system CPU seconds since the process started, every thread counted


def usage(pid: int | None = None) -> Usage | None:
    """The usage of process `pid` (None: this one); None if that process is gone."""
    if not os.path.isdir(_PROC):
        return _usage_without_proc() if pid in (None, os.getpid()) else None
    root = os.path.join(_PROC, "self" if pid is None else str(pid))
    try:
        fields = _stat(os.path.join(root, "stat"))
        with open(os.path.join(root, "status")) as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        try:
            open_files = len(os.listdir(os.path.join(root, "fd")))
        except PermissionError:  # another user's process
            open_files = math.nan
    except (FileNotFoundError, ProcessLookupError):
        return None
    # A zombie has no VmRSS line: it holds no memory.
    rss_kb = int(status.get("VmRSS", "0 kB").split()[0])
    return Usage(
        rss_mb=rss_kb / 1024,
        threads=int(status["Threads"]),
        open_files=open_files,
        cpu_s=_cpu_s(fields),
    )


def _usage_without_proc() -> Usage:
    try:
        import resource  # POSIX only
    except ImportError:
        return Usage(math.nan, threading.active_count(), math.nan, math.nan)
    own = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss is the peak, in bytes on macOS and KiB elsewhere: an upper bound of the present.
    peak = own.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return Usage(
        rss_mb=peak,
        threads=threading.active_count(),
        open_files=math.nan,
        cpu_s=own.ru_utime + own.ru_stime,
    )


def _stat(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (state, ppid, pgrp, ...: field 3 of
    proc(5) is index 0)."""
    with open(path) as f:
        # The command name in parentheses may hold spaces: fields count after its ')'.
        return f.read().rsplit(")", 1)[1].split()


def _cpu_s(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid`, every thread counted; 0 once it is gone (a
    child that ended between listing and reading adds nothing to a sum)."""
    try:
        return _cpu_s(_stat(os.path.join(_PROC, str(pid), "stat")))
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


class ThreadUsage(NamedTuple):
    """One OS thread of a process."""

    tid: int
    name: str  # what top -H shows (seedlike's own start with threadnames.PREFIX)
    cpu_s: float


def thread_usage(pid: int) -> list[ThreadUsage]:
    """Each thread of process `pid`; [] once it is gone."""
    task = os.path.join(_PROC, str(pid), "task")
    try:
        tids = os.listdir(task)
    except FileNotFoundError:
        return []
    table = []
    for tid in tids:
        try:
            with open(os.path.join(task, tid, "comm")) as f:
                name = f.read().strip()
            fields = _stat(os.path.join(task, tid, "stat"))
        except FileNotFoundError:
            continue  # a thread that just ended
        table.append(ThreadUsage(int(tid), name, _cpu_s(fields)))
    return table


def python_threads(pid: int) -> set[int] | None:
    """The OS thread ids of a process's Python threads (they share its interpreter lock), from
    `py-spy dump`; None without py-spy (pip install py-spy) or permission to trace."""
    try:
        dump = subprocess.run(
            ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    tids = {int(m) for m in re.findall(r"^Thread (\d+) ", dump, re.MULTILINE)}
    return tids or None


def interpreter_cpu_s(
    pid: int, python: set[int] | None = None, by_thread: dict | None = None
) -> tuple[float, float]:
    """(all threads, Python threads) CPU seconds of process `pid`; `by_thread` collects them by
    thread name ("python:" before a Python thread's). Python threads: those of `python` (py-spy's
    list, `python_threads`); without it, those with the process's name or seedlike's prefix,
    which also takes in the native threads XLA leaves unnamed (its CPU executor's), so it
    overcounts."""
    with open(os.path.join(_PROC, str(pid), "comm")) as f:
        name = f.read().strip()
    total = interpreter = 0.0
    for thread in thread_usage(pid):
        total += thread.cpu_s
        if python:
            is_python = thread.tid in python
        else:
            is_python = thread.name == name or thread.name.startswith(PREFIX)
        if is_python:
            interpreter += thread.cpu_s
        if by_thread is not None:
            key = ("python:" if is_python else "") + thread.name
            by_thread[key] = by_thread.get(key, 0.0) + thread.cpu_s
    return total, interpreter


class Process(NamedTuple):
    """One live process, from its stat line."""

    state: str  # R running, S sleeping, Z zombie, ... (proc(5))
    ppid: int
    pgid: int  # its process group
    cpu_s: float


def processes() -> dict[int, Process]:
    """Every live process, by process id."""
    if not os.path.isdir(_PROC):
        return {}
    table = {}
    for entry in os.listdir(_PROC):
        if entry.isdigit():
            try:
                fields = _stat(os.path.join(_PROC, entry, "stat"))
            except (FileNotFoundError, ProcessLookupError):
                continue  # it ended while the table was read
            table[int(entry)] = Process(fields[0], int(fields[1]), int(fields[2]), _cpu_s(fields))
    return table


def children(pid: int) -> list[int]:
    """The process ids whose parent is `pid`."""
    return [child for child, process in processes().items() if process.ppid == pid]
