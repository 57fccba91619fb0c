"""Names Python threads in the operating system too, so `top -H`, `/proc/<pid>/task/*/comm` and
the benchmarks' per-thread CPU accounting can tell seedlike's threads apart (Python leaves every
thread it starts under the process's name). Linux only; elsewhere a no-op.

Every name starts with PREFIX: a thread named so is one of seedlike's Python threads, which share
the interpreter lock, unlike the native pools of XLA and gRPC (benchmarks/server_capacity.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

PREFIX = "sl-"
_PR_SET_NAME = 15
_libc = None


def name_this_thread(name: str) -> None:
    """Sets the calling thread's OS name to PREFIX + name (15 bytes at most)."""
    global _libc
    if not sys.platform.startswith("linux"):
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _libc.prctl(_PR_SET_NAME, (PREFIX + name)[:15].encode(), 0, 0, 0)


def named(name: str, target):
    """`target` wrapped to name its thread first (for threading.Thread(target=...))."""

    def run(*args, **kwargs):
        name_this_thread(name)
        return target(*args, **kwargs)

    return run


def thread_ids() -> set[int]:
    """The OS ids of this process's threads (empty where /proc is not there)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def name_new_threads(name: str, before: set[int]) -> None:
    """Names `name` (no PREFIX: they do not share the interpreter lock) the threads started since
    `before` (thread_ids()) that nobody has named yet: a native pool a library starts, such as
    envpool's workers, which would otherwise pass for Python threads."""
    try:
        with open("/proc/self/comm") as f:
            unnamed = f.read().strip()
    except OSError:
        return
    for tid in thread_ids() - before:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != unnamed:
                    continue  # named by its own code (gRPC's, seedlike's)
            with open(f"/proc/self/task/{tid}/comm", "w") as f:
                f.write(name[:15])
        except OSError:  # a thread that has ended, or no /proc
            pass
