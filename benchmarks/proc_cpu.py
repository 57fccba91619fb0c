"""CPU seconds of a process's threads from /proc, split into its Python threads and the rest
(used by server_capacity.py and scale_model.py)."""

import os
import re
import subprocess


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


def thread_table(pid: int) -> list[tuple[int, str, float]]:
    """(thread id, name, CPU seconds) of each thread of a process; [] once it is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    table = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a thread that just ended
        table.append((int(tid), name, (int(fields[11]) + int(fields[12])) / ticks))
    return table


def threads_cpu(pid: int, python: set[int] | None = None, by_thread: dict | None = None):
    """(all threads, Python threads) CPU seconds of a process; `by_thread` collects them by
    thread name. Python threads: those of `python` (py-spy's list); without it, those with the
    process's name or seedlike's prefix (seedlike/runtime/threadnames.py), which also takes in the
    native threads XLA leaves unnamed (its CPU executor's), so it overcounts."""
    with open(f"/proc/{pid}/comm") as f:
        name = f.read().strip()
    total = interpreter = 0.0
    for tid, thread, seconds in thread_table(pid):
        total += seconds
        is_python = tid in python if python else thread == name or thread.startswith("sl-")
        if is_python:
            interpreter += seconds
        if by_thread is not None:
            key = ("python:" if is_python else "") + thread
            by_thread[key] = by_thread.get(key, 0.0) + seconds
    return total, interpreter


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...: field 3
    of proc(5) is index 0); None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name in parentheses may hold spaces: fields count after its ')'.
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def processes() -> dict[int, list[str]]:
    """Every live process's stat fields (`stat_fields`), by process id."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                table[int(entry)] = fields
    return table


def process_cpu(pid: int) -> float:
    """CPU seconds of a process (every thread); 0 once it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The process ids whose parent is `pid`."""
    return [child for child, fields in processes().items() if int(fields[1]) == pid]
