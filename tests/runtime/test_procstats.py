"""seedlike/runtime/procstats.py against what a process itself knows: its allocations, threads, open
files and the CPU time Python measures.

The counts are taken in a fresh interpreter: a test worker may still hold threads and memory of
earlier tests that end or free while these are measured."""

import os
import subprocess
import sys
import textwrap
import time

from seedlike.runtime import procstats
from tests.procs import ROOT, wait_for


def run_fresh(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,  # the checkout
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_resident_memory_follows_an_allocation_that_is_touched_and_freed():
    run_fresh("""
        import numpy as np
        from seedlike.runtime import procstats

        before = procstats.usage().rss_mb
        block = np.ones(256 * 2**20, dtype=np.uint8)  # every page written, so resident
        held = procstats.usage().rss_mb
        del block  # an allocation this large is its own mapping: freeing it returns the pages
        after = procstats.usage().rss_mb
        assert 256 * 0.95 <= held - before <= 256 * 1.2, (before, held)
        assert abs(after - before) <= 32, (before, after)
    """)


def test_threads_and_open_files_count_the_ones_opened_and_closed():
    run_fresh("""
        import tempfile, threading, time
        from seedlike.runtime import procstats

        start = procstats.usage()
        release = threading.Event()
        worker = threading.Thread(target=release.wait)
        worker.start()
        f = tempfile.TemporaryFile()
        during = procstats.usage()
        release.set()
        worker.join()
        f.close()
        # join() returns once the thread's Python code is done; the kernel lists the thread in
        # /proc a moment longer (a full suite saw 2 threads of 1 once): up to 5 s for it to go.
        for _ in range(500):
            end = procstats.usage()
            if end.threads == start.threads:
                break
            time.sleep(0.01)
        assert during.threads == start.threads + 1 and end.threads == start.threads, (
            start, during, end)
        assert during.open_files == start.open_files + 1 and end.open_files == start.open_files, (
            start, during, end)
    """)


def test_cpu_seconds_are_the_ones_python_measures_for_the_process():
    own, ref = procstats.usage().cpu_s, time.process_time()
    while time.process_time() - ref < 0.3:
        pass
    spent = procstats.usage().cpu_s - own
    # /proc counts in clock ticks (10 ms): the two clocks agree to a few ticks.
    assert abs(spent - (time.process_time() - ref)) < 0.05, spent


def test_another_process_is_read_until_it_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:

        def loaded():
            seen = procstats.usage(child.pid)
            return seen if seen is not None and seen.rss_mb > 1 else None

        seen = wait_for(loaded, 5, what="the interpreter loaded")
        assert seen.threads == 1
        assert child.pid in procstats.children(os.getpid())
        process = procstats.processes()[child.pid]
        assert process.ppid == os.getpid() and process.state != "Z"
        assert procstats.cpu_s(child.pid) >= process.cpu_s  # CPU time only grows
    finally:
        child.kill()
        child.wait()
    assert procstats.usage(child.pid) is None
    assert procstats.cpu_s(child.pid) == 0.0 and procstats.thread_usage(child.pid) == []
    assert child.pid not in procstats.children(os.getpid())


def test_a_named_python_thread_is_counted_apart_from_the_rest():
    run_fresh("""
        import os, threading, time
        from seedlike.runtime import procstats
        from seedlike.runtime.threadnames import name_this_thread

        def spin():
            name_this_thread("probe")
            while time.thread_time() < 0.2:  # this thread's own CPU
                pass
            spun.set()
            done.wait()

        spun, done = threading.Event(), threading.Event()
        worker = threading.Thread(target=spin)
        worker.start()
        spun.wait()
        by_thread = {}
        names = [t.name for t in procstats.thread_usage(os.getpid())]
        total, interpreter = procstats.interpreter_cpu_s(os.getpid(), None, by_thread)
        done.set()
        worker.join()
        assert "sl-probe" in names, names
        assert by_thread.get("python:sl-probe", 0) > 0, by_thread
        assert total >= interpreter >= by_thread["python:sl-probe"], (total, interpreter)
    """)
