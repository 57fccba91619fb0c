"""The acting side of the network: a jitted batch policy step, and the published params."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

from networks import heads


def make_policy_step(network):
    """Returns a jitted step(policy_params, obs, extras, carry, first, seed, counter) ->
    (action, logp, value, new_carry) for a batch of rows.

    policy_params is {"params": ..., "obs_norm": ...} as published by the learner. Sampling keys are
    derived from (seed, counter) inside the jit so the host never splits keys on the hot path.
    """

    def step(policy_params, obs, extras, carry, first, seed, counter):
        logits, value, carry = network.step(
            policy_params["params"], policy_params["obs_norm"], obs, extras, carry, first
        )
        key = jax.random.fold_in(jax.random.key(seed), counter)
        action = jax.random.categorical(key, logits).astype(jnp.int32)
        return action, heads.log_prob(logits, action), value, carry

    return jax.jit(step)


class PolicyRegistry:
    """The latest published policy params and their version; written by the learner thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._version = -1
        self._params = None
        self._published = threading.Event()

    def publish(self, version: int, policy_params) -> None:
        with self._lock:
            self._version, self._params = int(version), policy_params
        self._published.set()

    def latest(self):
        """(version, policy_params); blocks until the first publish."""
        self._published.wait()
        with self._lock:
            return self._version, self._params

    @property
    def version(self) -> int:
        with self._lock:
            return self._version


def bucket_size(rows: int) -> int:
    """Batch sizes are padded to powers of two (at least 8): the jitted step compiles few shapes."""
    size = 8
    while size < rows:
        size *= 2
    return size


def pad_rows(tree, rows: int, size: int):
    if size == rows:
        return tree
    return jax.tree.map(
        lambda x: np.concatenate([x, np.zeros((size - rows, *x.shape[1:]), x.dtype)]), tree
    )
