"""The batching rule: batches grow with load, a lone actor is served, a stalled one holds nobody."""

import concurrent.futures
import threading
import time

import numpy as np

from seedlike.server.batcher import STOP, Batcher, Control, Request


class Rows:
    def __init__(self, n):
        self.reward = np.zeros(n, np.float32)


def request(session, rows=8, waited_s=0.0):
    future = concurrent.futures.Future()
    return Request(session, Rows(rows), future, time.perf_counter() - waited_s)


def opened(batcher, sessions):
    for s in sessions:
        batcher.put(Control(s, num_envs=8))
    batch = batcher.gather()
    assert [c.session_id for c in batch.controls] == list(sessions) and not batch.requests


def gather_in_thread(batcher):
    """The next batch, gathered in a thread (None if it has not closed within 10 s)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(batcher.gather(idle_timeout_s=30)))
    thread.start()
    thread.join(timeout=10)
    return out[0] if out else None


def test_requests_that_waited_in_the_inbox_form_one_batch():
    """Under load requests wait longer than the timeout before gathering starts; they must still
    be batched together (a deadline counted from their arrival would close at once)."""
    batcher = Batcher(max_rows=1024, timeout_s=0.005)
    opened(batcher, [1, 2, 3, 4])
    for s in [1, 2, 3, 4]:
        batcher.put(request(s, waited_s=1.0))
    batch = batcher.gather()
    assert [r.session_id for r in batch.requests] == [1, 2, 3, 4]
    assert batcher.in_flight == 4
    batcher.replied([1, 2, 3, 4])
    assert batcher.in_flight == 0


def test_everything_waiting_is_taken_up_to_max_rows():
    batcher = Batcher(max_rows=16, timeout_s=10.0)
    opened(batcher, range(5))
    for s in range(5):
        batcher.put(request(s, rows=8))
    # The request that would overflow a batch opens the next one; nobody waits for the timeout
    # (the last batch closes at once: everyone else is in flight).
    sizes = [[r.session_id for r in batcher.gather().requests] for _ in range(3)]
    assert sizes == [[0, 1], [2, 3], [4]]


def test_a_lone_actor_is_served_at_once():
    batcher = Batcher(max_rows=1024, timeout_s=30.0)
    opened(batcher, [1])
    batcher.put(request(1))
    batch = gather_in_thread(batcher)
    assert batch is not None and [r.session_id for r in batch.requests] == [1]


def test_a_stalled_actor_holds_the_others_for_the_timeout_only():
    batcher = Batcher(max_rows=1024, timeout_s=0.05)
    opened(batcher, [1, 2, 3])  # session 3 never sends
    batcher.put(request(1))
    batcher.put(request(2))
    batch = gather_in_thread(batcher)
    assert batch is not None and [r.session_id for r in batch.requests] == [1, 2]
    batcher.replied([1, 2])
    assert batcher.late == 1
    # Session 3 missed a batch: the next ones close as soon as 1 and 2 are in, without a wait.
    batcher.put(request(1))
    batcher.put(request(2))
    batch = gather_in_thread(batcher)
    assert batch is not None and [r.session_id for r in batch.requests] == [1, 2]
    assert batch.closed - batch.started < 0.04
    batcher.replied([1, 2])
    # Once it sends again it is waited for again; now 2 is the one that misses the deadline.
    batcher.put(request(3))
    batcher.put(request(1))
    batch = gather_in_thread(batcher)
    assert [r.session_id for r in batch.requests] == [3, 1]
    assert batch.closed - batch.started >= 0.05
    assert batcher._late == {2}


def test_sessions_in_flight_are_not_waited_for():
    """While a batch is being answered its actors cannot send; the next batch closes as soon as
    everyone else has sent."""
    batcher = Batcher(max_rows=1024, timeout_s=30.0)
    opened(batcher, [1, 2, 3])
    for s in (1, 2):
        batcher.put(request(s))
    batcher.put(request(3))
    first = batcher.gather()
    assert len(first.requests) == 3
    batcher.replied([1])  # session 1 got its actions; 2 and 3 are still in flight
    batcher.put(request(1))
    batch = gather_in_thread(batcher)
    assert batch is not None and [r.session_id for r in batch.requests] == [1]


def test_controls_keep_their_order_and_stop_ends_gathering():
    batcher = Batcher(max_rows=1024, timeout_s=0.01)
    opened(batcher, [1, 2])
    batcher.put(request(1))
    batcher.put(Control(3, num_envs=4))  # opens while a batch is gathering
    batcher.put(Control(2))  # closes
    batch = batcher.gather()
    assert [r.session_id for r in batch.requests] == [1]
    assert [(c.session_id, c.opens) for c in batch.controls] == [(3, True), (2, False)]
    batcher.put(STOP)
    assert batcher.gather() is None


def test_a_burst_spread_over_more_than_the_timeout_stays_one_batch():
    """Requests 0.6 timeouts apart (a front end checking them one after another) keep the batch
    open; requests that keep trickling in close it after WINDOW_LIMIT timeouts."""
    from seedlike.server.batcher import WINDOW_LIMIT

    timeout = 0.2
    batcher = Batcher(max_rows=1024, timeout_s=timeout)
    opened(batcher, range(12))

    def send(sessions, gap):
        for s in sessions:
            batcher.put(request(s))
            time.sleep(gap)

    sender = threading.Thread(target=send, args=([0, 1, 2, 3], 0.6 * timeout))
    sender.start()
    batch = gather_in_thread(batcher)
    sender.join()
    assert [r.session_id for r in batch.requests] == [0, 1, 2, 3]  # 1.8 timeouts, first to last
    batcher.replied(range(4))
    sender = threading.Thread(target=send, args=(range(4, 12), 0.8 * timeout))
    sender.start()
    batch = gather_in_thread(batcher)
    sender.join()
    # All 8 would span 5.6 timeouts: the window ends WINDOW_LIMIT = 4 timeouts after the first.
    assert WINDOW_LIMIT == 4 and 3 <= len(batch.requests) <= 6
