"""The acting side of the network: one padded, jitted policy call, and the published params.

Everything that runs a policy on a batch of rows goes through `PolicyRunner`: the inference
service (actions for every actor), league games and TrueSkill evaluation (per-env recurrent state,
sampled or greedy moves) and play-time search (logits and values of many positions). Batches are
padded to a few sizes (two per doubling: `bucket_size`) so that XLA compiles a handful of shapes,
not one per batch size.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class PolicyOutput(NamedTuple):
    """What a policy did for n rows."""

    action: np.ndarray  # int32 [n], or float32 [n, K] (EnvSpec.action_spec)
    logp: np.ndarray  # float32 [n]: log pi(action | obs)
    value: np.ndarray  # float32 [n]
    carry: Any  # the new recurrent state [n, ...]; () for feed-forward networks


class Pending:
    """A dispatched policy call whose outputs may still be computing on the device.

    `fetch()` waits for them and copies them to the host; until then the caller is free to prepare
    the next batch (JAX dispatches asynchronously). Action, log-probability and value come packed
    in one float32 [K + 2, n] array (a discrete action's int32 bits as they are, K = 1; or the K
    floats of one with continuous dimensions), one transfer instead of three.
    """

    def __init__(self, packed, carry, rows: int, continuous: bool = False):
        self._packed, self._carry = packed, carry
        self._rows, self._continuous = rows, continuous

    def fetch(self) -> PolicyOutput:
        packed = np.asarray(self._packed)[:, : self._rows]
        carry = jax.tree.map(lambda x: np.asarray(x)[: self._rows], self._carry)
        if self._continuous:
            action = np.ascontiguousarray(packed[:-2].T)
        else:
            action = packed[0].view(np.int32)
        return PolicyOutput(action, packed[-2], packed[-1], carry)


class Ready:
    """Outputs computed on the host (a bot), with the interface of `Pending`."""

    def __init__(self, output: PolicyOutput):
        self._output = output

    def fetch(self) -> PolicyOutput:
        return self._output


def bucket_size(rows: int) -> int:
    """The padded batch size of `rows` rows: the next of 8, 12, 16, 24, 32, 48, ... (powers of two
    and 1.5 times them). The jitted step compiles two shapes per doubling, and a batch computes at
    most a third more rows than it has (with powers of two alone, a batch of 80 rows ran 128)."""
    size = 8
    while rows > size:
        if rows <= size * 3 // 2:
            return size * 3 // 2
        size *= 2
    return size


def pad_rows(tree, rows: int, size: int):
    """Pads every array of `tree` from `rows` to `size` rows with zeros (arrays that have `size`
    rows already stay as they are)."""

    def pad(x):
        if x.shape[0] == size:
            return x
        return np.concatenate([x, np.zeros((size - rows, *x.shape[1:]), x.dtype)])

    return jax.tree.map(pad, tree)


class PolicyRunner:
    """Runs one network's policy on batches of rows of any size.

    Args:
      network: a networks.Network.
      greedy: play the most likely (legal) action instead of sampling.
      seed: seeds the sampling key, which stays on the device: each step splits it inside the
        jitted step and returns the next one, so no key or counter crosses from the host.
      guard: runs the computation (seedlike.runtime.devices.ComputeGuard in the learner process).
    """

    def __init__(self, network, greedy: bool = False, seed: int = 0, guard=None):
        self.network = network
        self.greedy = greedy
        # The key's raw bits cross the jit boundary: a typed key array would be rebuilt in Python
        # on every call's return, on the serving thread's interpreter time.
        self._key = jax.random.key_data(jax.random.key(np.uint32(seed)))
        self._key_lock = threading.Lock()
        self._guard = guard or (lambda fn, *args: fn(*args))
        self._continuous = bool(network.spec.continuous)

        def step(policy_params, obs, extras, carry, first, key_bits, epsilon):
            key, sample = jax.random.split(jax.random.wrap_key_data(key_bits))
            params, obs_norm = policy_params["params"], policy_params["obs_norm"]
            kwargs = {} if epsilon is None else {"epsilon": epsilon}
            action, logp, value, carry = network.act(
                params, obs_norm, obs, extras, carry, first, sample, greedy, **kwargs
            )
            if action.ndim == 1:
                action = jax.lax.bitcast_convert_type(action.astype(jnp.int32), jnp.float32)[None]
            else:
                action = action.astype(jnp.float32).T
            rest = jnp.stack([logp.astype(jnp.float32), value.astype(jnp.float32)])
            packed = jnp.concatenate([action, rest])
            return packed, carry, jax.random.key_data(key)

        def evaluate(policy_params, obs, extras):
            return network.apply(policy_params["params"], policy_params["obs_norm"], obs, extras)

        self._step = jax.jit(step)
        self._evaluate = jax.jit(evaluate)

    def dispatch(self, policy_params, obs, extras, carry, first, epsilon=None) -> Pending:
        """Starts one policy step for n rows: obs/extras [n, ...], carry [n, ...], first bool [n]
        (the step starts an episode: a recurrent core resets); epsilon float32 [n]: each row's
        exploration rate for a Q network (Network.act; None: greedy)."""
        rows = first.shape[0]
        size = bucket_size(rows)
        obs, extras, carry = pad_rows((obs, extras, carry), rows, size)
        first = np.concatenate([first, np.ones(size - rows, np.bool_)])
        if epsilon is not None:
            epsilon = pad_rows(np.asarray(epsilon, np.float32), rows, size)
        with self._key_lock:
            packed, carry, self._key = self._guard(
                self._step, policy_params, obs, extras, carry, first, self._key, epsilon
            )
        return Pending(packed, carry, rows, self._continuous)

    def step(self, policy_params, obs, extras, carry, first, epsilon=None) -> PolicyOutput:
        """`dispatch(...).fetch()`: one policy step, outputs on the host."""
        return self.dispatch(policy_params, obs, extras, carry, first, epsilon).fetch()

    def evaluate(self, policy_params, obs, extras, chunk: int = 4096):
        """Logits [m, A] and values [m] of m positions (feed-forward networks), `chunk` at a time
        so that memory stays bounded however many positions a search asks for."""
        logits, values = [], []
        rows = next(iter(obs.values())).shape[0]
        for start in range(0, rows, chunk):
            part = jax.tree.map(lambda x, s=start: x[s : s + chunk], (obs, extras))
            n = min(chunk, rows - start)
            padded = pad_rows(part, n, bucket_size(n))
            lo, v = self._guard(self._evaluate, policy_params, *padded)
            logits.append(np.asarray(lo)[:n])
            values.append(np.asarray(v)[:n])
        return np.concatenate(logits), np.concatenate(values)


class PolicyRegistry:
    """The latest published policy params and their policy version; written by the learner
    thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._policy_version = -1
        self._params = None
        self._published = threading.Event()

    def publish(self, policy_version: int, policy_params) -> None:
        with self._lock:
            self._policy_version, self._params = int(policy_version), policy_params
        self._published.set()

    def latest(self):
        """(policy_version, policy_params); blocks until the first publish."""
        self._published.wait()
        with self._lock:
            return self._policy_version, self._params

    @property
    def policy_version(self) -> int:
        with self._lock:
            return self._policy_version
