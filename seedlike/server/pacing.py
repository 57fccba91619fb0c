"""Pacing of actors served far faster than the others: what keeps one actor with thousands of envs
from taking the server from everyone else (issue 33, finding 7).

The reply thread asks `hold_s` for every answered request. With three actor identities or more
served in the last `window_s`, an identity served faster than `factor` x the median identity's
rows per second gets its replies released at that rate (a leaky bucket; no reply waits more than
MAX_HOLD_S): its actor, which waits
for each reply before its next request, acts no faster, and the server's batches, recorder and
learner batches stay with the others. Identities at or below that rate are never held. What a
paced actor delivers beyond its share would be kept out of the loss anyway
(seedlike.server.influence.loss_mask). `Pacer` releases held replies on a thread of its own.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import statistics
import threading
import time

from seedlike.runtime.threadnames import named

# No reply waits longer (rates measured over few rows, at the start, would hold one for minutes).
MAX_HOLD_S = 1.0


class RowRates:
    """Rows served per identity over the last `window_s` (the reply thread only)."""

    def __init__(self, factor: float, window_s: float = 5.0):
        self.factor = float(factor)
        self.window_s = float(window_s)
        self._served: collections.deque = collections.deque()  # (time, identity, rows)
        self._totals: collections.Counter = collections.Counter()
        self._free_at: dict[int, float] = {}  # identity -> when its bucket is empty
        self._allowed = (None, 0.0)  # (at, rows/s): one median per batch (the replies share now)

    def hold_s(self, identity: int, rows: int, now: float) -> float:
        """How long to hold a reply of `rows` rows to `identity` (0: send it now)."""
        self._served.append((now, identity, rows))
        self._totals[identity] += rows
        while self._served[0][0] < now - self.window_s:
            _, old, n = self._served.popleft()
            self._totals[old] -= n
            if self._totals[old] <= 0:
                del self._totals[old]
        if self.factor <= 0 or len(self._totals) < 3:
            return 0.0
        if self._allowed[0] != now:
            median = statistics.median(self._totals.values())  # a few identities: no numpy
            self._allowed = (now, self.factor * median / self.window_s)
        allowed = self._allowed[1]
        if self._totals[identity] / self.window_s <= allowed:
            self._free_at.pop(identity, None)
            return 0.0
        hold = min(max(self._free_at.get(identity, now) - now, 0.0), MAX_HOLD_S)
        self._free_at[identity] = now + hold + rows / allowed
        return hold


class Pacer:
    """Calls functions at given times on a thread of its own ("pacer"); `stop` drops the rest."""

    def __init__(self):
        self._heap: list = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=named("pacer", self._run), daemon=True)
        self._thread.start()

    def at(self, when: float, fn) -> None:
        """Calls fn() at time.monotonic() `when`."""
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), fn))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # one reply lost, not every later one: its stream ends by timeout
                logging.exception("pacer: a held reply could not be delivered")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=5)
