"""Device placement helpers shared by the learner and the inference service."""

from __future__ import annotations

import contextlib
import threading

import jax


def compute_lock(devices) -> contextlib.AbstractContextManager:
    """A lock that serializes learner and inference computations where that is needed.

    On CPU with several (forced host) devices, XLA runs the per-device parts of a collective on a
    shared thread pool. A computation dispatched concurrently from the inference thread can leave a
    learner all-reduce waiting for a participant that never gets a thread; XLA then aborts the
    process after 40 s ("Expected 2 threads to join the rendezvous"). Serializing the two threads'
    computations avoids it. On GPU/TPU, or with one device, this is a no-op so acting and learning
    overlap as in SEED RL.
    """
    devices = list(devices)
    if len(devices) > 1 and all(d.platform == "cpu" for d in devices):
        return threading.Lock()
    return contextlib.nullcontext()


def block(tree):
    """Waits for every array in `tree` (so a lock held around a computation covers its run)."""
    return jax.block_until_ready(tree)
