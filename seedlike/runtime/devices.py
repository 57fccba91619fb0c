"""Device helpers shared by the learner and the inference service."""

from __future__ import annotations

import threading

import jax


class ComputeGuard:
    """Runs JAX computations of the learner and inference threads, serialized where needed.

    On CPU with several (forced host) devices, XLA runs the per-device parts of a collective on a
    shared thread pool. A computation dispatched concurrently from the inference thread can leave a
    learner all-reduce waiting for a participant that never gets a thread; XLA then aborts the
    process after 40 s ("Expected 2 threads to join the rendezvous"). There the guard holds a lock
    until each computation has finished. Elsewhere (GPU/TPU, or one device) it only dispatches, so
    acting and learning overlap as in SEED RL and dispatch stays asynchronous.
    """

    def __init__(self, devices):
        devices = list(devices)
        serialize = len(devices) > 1 and all(d.platform == "cpu" for d in devices)
        self._lock = threading.Lock() if serialize else None

    @property
    def serializes(self) -> bool:
        return self._lock is not None

    def __call__(self, fn, *args):
        if self._lock is None:
            return fn(*args)
        with self._lock:
            return jax.block_until_ready(fn(*args))
