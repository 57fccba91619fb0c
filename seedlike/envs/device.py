"""Envs written as JAX functions, stepped inside the compiled program of seedlike.ondevice
(Podracer's Anakin) instead of by actors: what an on-device backend's `device_env` returns, and
the auto-reset every runtime step goes through.

An on-device backend's module defines, beside check_env and make_env_spec (seedlike.envs):

    device_env(env_config, spec) -> DeviceEnv   pure functions of one env (the runtime vmaps
                                                them over its envs)

`advance` resets an env the step after its episode ends, as envpool does: the terminal
observation is seen (its value bootstraps a truncated episode) and the action chosen for it is
ignored (valid=False in the Unroll, seedlike.types). So an on-device run's unrolls mean what a
SEED run's do, and the algorithms read them through the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from seedlike.types import Rows


class DeviceEnv(NamedTuple):
    """One env as pure functions (no auto-reset: `advance` does it).

    reset(key) -> (env_state, obs: dict key -> [*spec.shape])
    step(env_state, action int32 [], key) -> (env_state, obs, reward float32 [],
        terminated bool [], truncated bool [])
    """

    reset: Callable[[jax.Array], tuple[Any, dict]]
    step: Callable[..., tuple[Any, dict, jax.Array, jax.Array, jax.Array]]


class Slot(NamedTuple):
    """One env between steps: its state, the observation the policy sees next, whether that
    observation starts an episode (`first`) or ends one (`done`: the next step resets), and the
    episode's return and length so far."""

    env_state: Any
    obs: dict
    first: jax.Array
    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


class Outcome(NamedTuple):
    """What one step of a slot gave: reward, terminated, truncated (of the action taken), and
    where an episode ended with it, its return and length (ended False: zeros)."""

    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    ended: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


def start(env: DeviceEnv, key: jax.Array) -> Slot:
    """A slot at the first observation of an episode."""
    state, obs = _strong(env.reset(key))
    zero = jnp.zeros((), jnp.float32)
    return Slot(state, obs, jnp.ones((), bool), jnp.zeros((), bool), zero, jnp.zeros((), jnp.int32))


def advance(env: DeviceEnv, slot: Slot, action: jax.Array, key: jax.Array) -> tuple[Slot, Outcome]:
    """The slot after one step: the env's step, or its reset where the last step ended the
    episode (the action ignored, reward 0)."""
    reset_key, step_key = jax.random.split(key)
    fresh = start(env, reset_key)
    state, obs, reward, terminated, truncated = env.step(slot.env_state, action, step_key)
    # The reset's dtypes: an env's step may give a field another type (a weak float32 for an
    # int), and the runtime's loop carries one type.
    state, obs = jax.tree.map(
        lambda f, x: jnp.asarray(x, f.dtype), (fresh.env_state, fresh.obs), (state, obs)
    )
    reward = jnp.asarray(reward, jnp.float32)
    terminated, truncated = jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)
    ret = slot.episode_return + reward
    length = slot.episode_length + 1
    done = terminated | truncated
    stepped = Slot(state, obs, jnp.zeros((), bool), done, ret, length)
    outcome = Outcome(
        reward, terminated, truncated, done, jnp.where(done, ret, 0.0), jnp.where(done, length, 0)
    )
    nothing = Outcome(*(jnp.zeros_like(x) for x in outcome))
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(slot.done, x, y), a, b)  # noqa: E731
    return pick(fresh, stepped), pick(nothing, outcome)


class HostAdapter:
    """An on-device env stepped from the host through the adapter contract (seedlike.envs), for
    what plays outside the learner's program: evaluate.py, play.py, a league's evaluation games.
    `env.num_envs` envs, advanced by the same `advance`, jitted over the batch."""

    def __init__(self, env_config, spec, seed: int, env: DeviceEnv):
        del spec
        self.n = int(env_config.num_envs)
        self._key = jax.random.key(int(seed))
        self._start = jax.jit(jax.vmap(lambda k: start(env, k)))
        self._advance = jax.jit(jax.vmap(lambda s, a, k: advance(env, s, a, k)))

    def _keys(self):
        self._key, key = jax.random.split(self._key)
        return jax.random.split(key, self.n)

    def reset(self) -> None:
        self._slots = self._start(self._keys())
        self._outcome = None

    def recv(self) -> Rows:
        slots = jax.device_get(self._slots)
        zeros = np.zeros(self.n, bool)
        if self._outcome is None:
            reward, terminated, truncated = np.zeros(self.n, np.float32), zeros, zeros
        else:
            out = jax.device_get(self._outcome)
            reward, terminated, truncated = out.reward, out.terminated, out.truncated
        ended = np.asarray(terminated) | np.asarray(truncated)
        return Rows(
            {k: np.asarray(v) for k, v in slots.obs.items()}, {}, np.asarray(reward, np.float32),
            np.asarray(terminated), np.asarray(truncated), np.arange(self.n, dtype=np.int32),
            np.zeros(self.n, np.int32), ~np.asarray(slots.done), ended,
        )  # fmt: skip

    def send(self, action: np.ndarray, rows: Rows) -> None:
        acted = np.zeros(self.n, np.int32)
        acted[rows.env_id] = action
        self._slots, self._outcome = self._advance(self._slots, acted, self._keys())

    def render(self) -> np.ndarray:
        # The backend's takes_render_mode is False, so watch.py says so before it would call this.
        raise ValueError("an on-device env gives no frames; score it with evaluate.py instead")

    def close(self) -> None:
        pass


def _strong(tree):
    """Every leaf as a strongly typed array of its dtype (gymnax returns Python scalars and weakly
    typed values, which a loop's carry would change the type of)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), tree)
