"""Bounded FIFO handoffs between the inference pipeline's threads, on queue.SimpleQueue.

queue.Queue and threading.Semaphore wait and wake through threading.Condition, which is Python:
every put and get runs a few dozen lines under the interpreter lock, and the learner process's
stages hand over a few items per batch; a profile of the serving threads found Condition.notify a
large share of their interpreter time (RESULTS.md, "One learner host, many actor hosts").
SimpleQueue's put and get are C, so a Handoff costs two C calls per item: the items, and tokens for
the free places (a put takes one, a get gives one back).
"""

from __future__ import annotations

import queue
import threading


class Handoff:
    """A FIFO of at most `maxsize` items for any number of threads.

    put(item, timeout) raises queue.Full and get(timeout) queue.Empty, as queue.Queue's do;
    `done()` marks an item taken with get as handled, and `unfinished` counts the items put and
    not yet handled (queue.Queue's task_done and unfinished_tasks)."""

    def __init__(self, maxsize: int):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(max(int(maxsize), 1)):
            self._free.put(None)
        self._count = threading.Lock()  # a plain lock: uncontended, it costs about a C call
        self._unfinished = 0

    def put(self, item, timeout: float | None = None) -> None:
        try:
            self._free.get(timeout=timeout)
        except queue.Empty:
            raise queue.Full from None
        with self._count:
            self._unfinished += 1
        self._items.put(item)

    def get(self, timeout: float | None = None):
        """The oldest item; timeout 0 takes only one already there."""
        item = self._items.get(timeout=timeout)
        self._free.put(None)
        return item

    def done(self) -> None:
        with self._count:
            self._unfinished -= 1

    @property
    def unfinished(self) -> int:
        return self._unfinished

    def empty(self) -> bool:
        return self._items.empty()


class Counter:
    """A count that one thread raises and another lowers, and anyone reads without waiting (the
    batches dispatched to the policy and not yet fetched; a learner batch queue's free slots);
    threading.Semaphore without its Condition."""

    def __init__(self, count: int = 0):
        self._tokens: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(count):
            self._tokens.put(None)

    def up(self) -> None:
        self._tokens.put(None)

    def down(self, timeout: float | None = None) -> bool:
        """Waits until the count is positive, then lowers it; False if `timeout` seconds passed
        first (the count is left as it was)."""
        try:
            self._tokens.get(timeout=timeout)
        except queue.Empty:
            return False
        return True

    def positive(self) -> bool:
        return not self._tokens.empty()
