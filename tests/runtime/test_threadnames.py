"""Thread names in the operating system: seedlike's Python threads carry its prefix, and a
library's native pool started under a call is named after it, leaving named threads alone."""

import threading

from seedlike.runtime import threadnames


def _comm(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/comm") as f:
        return f.read().strip()


def test_new_unnamed_threads_are_named_and_named_ones_kept():
    before = threadnames.thread_ids()
    started, stop = [], threading.Event()

    def idle():
        started.append(threading.get_native_id())
        stop.wait()

    def named_idle():
        threadnames.name_this_thread("mine")
        idle()

    threads = [threading.Thread(target=idle), threading.Thread(target=named_idle)]
    try:
        for thread in threads:
            thread.start()
        while len(started) < 2 or "sl-mine" not in {_comm(t) for t in started}:
            pass
        threadnames.name_new_threads("pool", before)
        assert sorted(_comm(t) for t in started) == ["pool", "sl-mine"]
        assert _comm(threading.get_native_id()) != "pool"  # this thread existed before
    finally:
        stop.set()
        for thread in threads:
            thread.join()
