"""What a process holds of its host: resident memory, threads, open files and CPU time.

A run that lasts days fails on what grows slowly: a cache without a bound, a thread per
reconnecting actor, a file left open per snapshot. The learner writes its own usage into every
metrics row (docs/metrics.md) and benchmarks/soak.py follows every process of a run this way.

Linux reads /proc/<pid>; elsewhere only the calling process is known, and only what `resource`
(POSIX) and `threading` say of it (peak memory, Python threads); values not known are NaN.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading

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
        with open(os.path.join(root, "stat")) as f:
            # The command name in parentheses may hold spaces: fields count after its ')'.
            fields = f.read().rsplit(")", 1)[1].split()
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
        cpu_s=(int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
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
