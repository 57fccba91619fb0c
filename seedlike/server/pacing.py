"""Pacing of actors served far faster than the others: what keeps one actor with thousands of envs
from taking the server from everyone else (issue 33, finding 7).

The reply thread asks `hold_s` for every answered request. With three actor identities or more
served in the last `window_s`, an identity served faster than `factor` x the median of the
other identities' rows per second gets its replies released at that rate (a leaky bucket): its
actor, which waits for each reply before its next request, acts no faster, and the server's
batches, recorder and learner batches stay with the others. Identities at or below that rate
are never held. What a paced actor delivers beyond its share would be kept out of the loss
anyway (seedlike.server.influence.loss_mask). `Pacer` releases held replies on a thread of its own.

The bucket holds whatever the request size: an identity's replies leave one after another at
the allowed rate, each waiting for the ones before it, so 16 streams of 4,096 envs under one
certificate are served at the rate of one actor at the bound (issue 76 measured 10.8x the median
when no reply waited more than 1 s: a big enough request passed once a second). Pacing starts
once the rates cover a whole window (rates over the first few rows would hold replies for
minutes), and an identity is let go only when its bucket has been empty for a window.

The median is of the others: with two honest identities at unequal rates, the median of all
three is the faster honest one's, and the attacker was served 2x that, up to 2.6x the honest
mean (issue 76's oversize runs); the others' median is the honest mean there, and an honest
identity's others include the attacker, so it is never held.
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

# No reply waits longer: what an identity would have to queue beyond it (MAX_HOLD_S x the allowed
# rate, in requests in flight at once) is served above its bound.
MAX_HOLD_S = 20.0


class RowRates:
    """Rows served per identity over the last `window_s` (the reply thread only)."""

    def __init__(self, factor: float, window_s: float = 5.0):
        self.factor = float(factor)
        self.window_s = float(window_s)
        self._served: collections.deque = collections.deque()  # (time, identity, rows)
        self._totals: collections.Counter = collections.Counter()
        self._free_at: dict[int, float] = {}  # identity -> when its bucket is empty
        self._allowed = (None, {})  # (at, {identity: rows/s}): one reading per batch (its now)
        self._since: float | None = None  # the first reply's time: rates cover a window after

    def hold_s(self, identity: int, rows: int, now: float) -> float:
        """How long to hold a reply of `rows` rows to `identity` (0: send it now)."""
        self._since = now if self._since is None else self._since
        self._served.append((now, identity, rows))
        self._totals[identity] += rows
        while self._served[0][0] < now - self.window_s:
            _, old, n = self._served.popleft()
            self._totals[old] -= n
            if self._totals[old] <= 0:
                del self._totals[old]
        if self.factor <= 0 or len(self._totals) < 3 or now < self._since + self.window_s:
            return 0.0
        if self._allowed[0] != now:
            self._allowed = (now, {})
        allowed = self._allowed[1].get(identity)
        if allowed is None:
            others = [n for who, n in self._totals.items() if who != identity]
            median = statistics.median(others)  # a few identities: no numpy
            allowed = self._allowed[1][identity] = self.factor * median / self.window_s
        free_at = self._free_at.get(identity, now)
        # Let go once at the bound and drained for a window: a bucket let go as soon as it
        # drained would pass a burst of every stream's request each time (13% over, simulated).
        if self._totals[identity] / self.window_s <= allowed and free_at <= now - self.window_s:
            self._free_at.pop(identity, None)
            return 0.0
        release = max(free_at, now)  # after every reply of this identity held before it
        self._free_at[identity] = release + rows / allowed
        return min(release - now, MAX_HOLD_S)


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
