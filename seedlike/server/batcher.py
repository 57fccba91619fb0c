"""The batching rule of central inference: which waiting requests form the next policy batch.

Actors stream in lockstep: an actor sends its next request only after it has the actions for the
previous one. A batch should therefore hold every request that can still come soon, and no more:

* Gathering starts when the first request is taken. Everything already waiting joins at once, up
  to `max_rows` rows (a request that would overflow the batch opens the next one).
* The batch closes as soon as every session that can still send has a request in it: open
  sessions minus those whose previous request is still being answered (in flight). Nobody else
  can add to it, so waiting longer would only add latency.
* Otherwise it closes a window (`timeout_s`, or longer: below) after the latest request joined
  it, and at the latest WINDOW_LIMIT windows after gathering started (not after the first
  request arrived: a request that waited in the inbox while the server was busy must not close
  the batch on the spot, or under load every batch would be one request). Counting from the
  latest arrival keeps a burst of requests together when something upstream spreads it out:
  stream front ends check one request after another, and a window counted from the first
  arrival split every burst of four Atari requests; its remainder then ran as a group of its own
  for good, since a batch never waits for sessions in flight (RESULTS.md, "One learner host,
  many actor hosts").
* How far apart a burst arrives is the time its sender spends per request, which each request
  reports (`Request.spread_s`: a front end's CPU time since its previous request). The window
  after the latest arrival is SPREAD times the running mean of it, at least `timeout_s` and at
  most WINDOW_LIMIT x `timeout_s`. Where the mean itself is over WINDOW_LIMIT x `timeout_s`
  the window is `timeout_s` again: no window allowed would hold such a burst, so waiting would
  only add latency. A front end on a busy host can spend longer per request than the configured
  timeout, and then only the window that follows the spread keeps a burst in one batch
  (RESULTS.md, "One learner host, many actor hosts"). Small requests (CartPole) leave the window
  at `timeout_s`.
* The batch's size cap follows the rows in circulation: `share` of the rows the open sessions
  send per request, together, within [`min_rows`, `max_rows`]. A batch of every row in flight
  makes the actors wait for all of its stages and the server for all of their steps; with a
  quarter, a batch computes while the next is gathered and the one before is answered. 4 actors x
  64 Atari rows then close at 64, each batch one front end's rows, read in place; 16 x 64 close
  at 256 and 8 x 8 CartPole at all 64 (RESULTS.md, "Batches that close at a quarter"). A session
  counts the rows of its latest request (at first its env count).
* A session that could have sent but missed such a batch is late, and later batches do not wait
  for it until it sends again: a stalled actor costs the others one window, not one per batch
  (waiting for it every batch cost every other actor a timeout per batch until its stream was
  closed: benchmarks/faults.py stalled_actor, RESULTS.md "Faults on a live run").
* ... unless the policy is still busy with earlier batches (`busy()`): a batch dispatched now would
  only wait behind them, so it keeps growing until the policy can take it. Under load batches
  grow; when the server keeps up, nobody waits longer than the timeout.

Session openings and closings travel through the same inbox, so they keep their order relative to
the requests; the batch reports them beside its requests (alone, if no request is waiting). A
session that closes while its last request is still being answered (its stream broke while it
waited) is closed for the rule at once, but its closing is reported only after that reply
(`replied`): its seats are not given to another session while that step is still recorded.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from typing import Any


@dataclasses.dataclass
class Request:
    """One actor message waiting for actions."""

    session_id: int
    rows: Any  # seedlike.types.Rows
    future: Any  # concurrent.futures.Future
    arrived: float  # time.perf_counter() when it was submitted
    # A front end that wrote the rows' steps in place (seedlike.server.unrolls): bool [n] which
    # rows, and int64 [n] where it wrote them. None: nobody did.
    written: Any = None
    wrote_at: Any = None
    # (arena, start): the rows' observations and extras are rows [start, start + n) of
    # `arena.obs` / `arena.extras` (seedlike.rpc.shm.Arena), whose neighbours may be other
    # requests' rows; None: they are only where `rows` says.
    span: Any = None
    # Seconds the sender spent per request (a front end: its CPU time since its previous one),
    # about how far apart one sender's requests of a burst arrive.
    spread_s: float = 0.0

    @property
    def num_rows(self) -> int:
        return int(self.rows.reward.shape[0])


@dataclasses.dataclass
class Control:
    """A session opening (num_envs > 0) or closing (num_envs == 0)."""

    session_id: int
    num_envs: int = 0
    identity: int = 0  # an opening session's actor identity (seedlike.server.influence)

    @property
    def opens(self) -> bool:
        return self.num_envs > 0


@dataclasses.dataclass
class Batch:
    requests: list[Request]
    controls: list[Control]
    started: float  # when gathering started (perf_counter)
    closed: float = 0.0  # when the batch closed

    @property
    def num_rows(self) -> int:
        return sum(r.num_rows for r in self.requests)


STOP = object()  # put into the inbox to end gathering
BUSY_POLL_S = 0.0005  # how often a batch past its timeout checks whether the policy is free
WINDOW_LIMIT = 4  # a batch gathers for at most this many windows, however requests trickle in
SPREAD = 2.0  # the window after the latest arrival, in senders' recent seconds per request
SPREAD_MEMORY = 0.1  # weight of the newest request in the running mean of `spread_s`


class Batcher:
    """The inbox of the inference service and the batching rule above.

    Handler threads `enqueue` requests and controls; one thread calls `gather`. The thread that
    answers a batch reports `replied(session_ids)` for its requests, so the rule knows who is in
    flight.
    """

    def __init__(self, max_rows: int, timeout_s: float, share: float = 1.0, min_rows: int = 1):
        self.max_rows = int(max_rows)
        self.timeout_s = float(timeout_s)
        self.share = float(share)
        self.min_rows = min(int(min_rows), self.max_rows)
        # Rows per request of each open session, and their sum (the cap above).
        self._session_rows: dict[int, int] = {}
        self._open_rows = 0
        self._spread_s = 0.0  # running mean of the requests' spread_s
        # C-level put and get (queue.Queue's Python Condition cost the interpreter per request).
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._held: Request | None = None  # the request that would have overflowed the last batch
        # Sessions as seen by the gathering thread: opened and not closed, and late (above).
        self._open: set[int] = set()
        self._late: set[int] = set()
        self._in_flight: set[int] = set()  # sessions with a request handed out and not replied
        self._closing: dict[int, Control] = {}  # closings held until their session's reply
        self._lock = threading.Lock()

    def enqueue(self, item) -> None:
        self.inbox.put(item)

    def replied(self, session_ids: list[int]) -> None:
        with self._lock:
            self._in_flight.difference_update(session_ids)
            if not self._closing:
                return
            for session_id in session_ids:
                closing = self._closing.pop(session_id, None)
                if closing is not None:  # reported by the next batch
                    self.inbox.put(closing)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    @property
    def late(self) -> int:
        return len(self._late)

    def _expected(self, present: set[int]) -> set[int]:
        """Sessions that can still send and are not in this batch or late."""
        with self._lock:
            return self._open - self._in_flight - self._late - present

    def gather(self, idle_timeout_s: float = 0.1, busy=lambda: False) -> Batch | None:
        """The next batch (possibly only controls, or empty after `idle_timeout_s` without any
        item); None once STOP was taken. `busy()`: earlier batches still occupy the policy."""
        requests: list[Request] = []
        present: set[int] = set()
        controls: list[Control] = []
        rows = 0
        deadline = None
        started = time.perf_counter()
        while True:
            if self._held is not None:
                item, self._held = self._held, None
            else:
                if deadline is not None:
                    wait = max(deadline - time.perf_counter(), 0.0)
                    if wait == 0.0 and busy():
                        wait = BUSY_POLL_S
                else:  # controls alone are handed out as soon as nothing else is waiting
                    wait = 0.0 if controls else idle_timeout_s
                try:
                    # Whatever is already waiting is taken without a wait, even past the deadline.
                    item = self.inbox.get_nowait() if wait == 0.0 else self.inbox.get(timeout=wait)
                except queue.Empty:
                    if requests:  # the deadline passed: whoever could have sent is late
                        self._late |= self._expected(present)
                    return self._close(requests, present, controls, started)
            if item is STOP:
                return None
            if isinstance(item, Control):
                if item.opens:
                    self._open.add(item.session_id)
                    self._count_rows(item.session_id, item.num_envs)
                else:
                    self._open.discard(item.session_id)
                    self._late.discard(item.session_id)
                    self._count_rows(item.session_id, 0)
                    with self._lock:
                        if item.session_id in self._in_flight or item.session_id in present:
                            self._closing[item.session_id] = item
                            continue
                controls.append(item)
                continue
            if self._session_rows.get(item.session_id, 0) != item.num_rows:
                self._count_rows(item.session_id, item.num_rows)
            cap = self.cap
            if requests and rows + item.num_rows > cap:
                self._held = item
                return self._close(requests, present, controls, started)
            now = time.perf_counter()
            if deadline is None:
                started = now
            self._report(item.spread_s)
            window = self.window_s
            deadline = min(now + window, started + WINDOW_LIMIT * window)
            requests.append(item)
            present.add(item.session_id)
            self._late.discard(item.session_id)
            rows += item.num_rows
            if rows >= cap or not self._expected(present):
                return self._close(requests, present, controls, started)

    @property
    def cap(self) -> int:
        """Rows at which a batch closes (module docstring)."""
        return min(self.max_rows, max(self.min_rows, int(self.share * self._open_rows)))

    def _count_rows(self, session_id: int, rows: int) -> None:
        """Sets a session's rows per request (0: closed; only open sessions count)."""
        if session_id not in self._open:
            rows = 0
        self._open_rows += rows - self._session_rows.pop(session_id, 0)
        if rows:
            self._session_rows[session_id] = rows

    @property
    def window_s(self) -> float:
        """How long a batch stays open after its latest arrival (module docstring)."""
        limit = WINDOW_LIMIT * self.timeout_s
        if self._spread_s > limit:  # no window allowed would catch the sender's next request
            return self.timeout_s
        return min(max(SPREAD * self._spread_s, self.timeout_s), limit)

    def _report(self, spread_s: float) -> None:
        """Adds an arrival's `spread_s` to the running mean the window follows."""
        # Reports beyond twice the longest window all mean the same (window_s), and stay bounded.
        bound = 2 * WINDOW_LIMIT * self.timeout_s
        spread_s = min(max(spread_s, 0.0), bound) if math.isfinite(spread_s) else 0.0
        self._spread_s += SPREAD_MEMORY * (spread_s - self._spread_s)

    def _close(self, requests, present, controls, started) -> Batch:
        with self._lock:
            self._in_flight |= present
        return Batch(requests, controls, started, time.perf_counter())
