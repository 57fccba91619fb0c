"""Acting on the device: T steps of a batch of envs under the policy, recorded as the Unroll a
SEED learner batch holds (seedlike.types.Unroll), with the episodes that ended on the way."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seedlike.envs import device
from seedlike.types import Unroll


class Acting(NamedTuple):
    """What acting carries from one rollout to the next, for a batch of envs [B]: the slots,
    the recurrent state before the next step (() if feed-forward) and the PRNG key's raw bits
    (jax.random.key_data: what a checkpoint can hold)."""

    slots: device.Slot
    carry: Any
    key: jax.Array


class Episodes(NamedTuple):
    """The episodes that ended in a rollout: how many, and their returns' and lengths' sums."""

    count: jax.Array
    return_sum: jax.Array
    length_sum: jax.Array


def start(network, env: device.DeviceEnv, num_envs: int, key: jax.Array) -> Acting:
    """`num_envs` envs at their first observations."""
    key, reset = jax.random.split(key)
    slots = jax.vmap(lambda k: device.start(env, k))(jax.random.split(reset, num_envs))
    return Acting(slots, network.initial_carry(num_envs), jax.random.key_data(key))


def rollout(network, env, params, obs_norm, acting: Acting, length: int, version, epsilon=None):
    """`length` steps of every env: (acting after them, Unroll [B, length+1, ...], Episodes).
    Step `length` of the unroll is the next one's step 0 (its value bootstraps). `epsilon` [B]:
    each env's exploration rate, where the network is a Q network (Network.act)."""
    explore = {} if epsilon is None else {"epsilon": epsilon}

    def step(acting: Acting, _):
        slots, carry, key = acting
        key, act_key, env_key = jax.random.split(key, 3)

        action, logp, value, new_carry = network.act(
            params, obs_norm, slots.obs, {}, carry, slots.first, act_key, **explore
        )
        keys = jax.random.split(env_key, action.shape[0])
        new_slots, outcome = jax.vmap(lambda s, a, k: device.advance(env, s, a, k))(
            slots, action, keys
        )
        record = (slots.obs, action, logp, value, ~slots.done, slots.first, outcome)
        return Acting(new_slots, new_carry, key), record

    carry0 = acting.carry
    acting = acting._replace(key=jax.random.wrap_key_data(acting.key))
    acting, (obs, action, logp, value, valid, first, outcome) = jax.lax.scan(
        step, acting, None, length
    )
    # The bootstrap step: its value under the same params; its action is chosen again (and
    # kept) by the next rollout's first step.
    key, last_key = jax.random.split(acting.key)
    _, _, last_value, _ = network.act(
        params, obs_norm, acting.slots.obs, {}, acting.carry, acting.slots.first, last_key
    )
    acting = acting._replace(key=jax.random.key_data(key))
    zeros = jnp.zeros_like

    def closed(steps, last):  # [T, B, ...] and the bootstrap step [B, ...] -> [B, T+1, ...]
        return jnp.swapaxes(jnp.concatenate([steps, last[None]]), 0, 1)

    unroll = Unroll(
        obs=jax.tree.map(closed, obs, acting.slots.obs),
        extras={},
        action=closed(action, zeros(action[0])),
        behaviour_logp=closed(logp, zeros(logp[0])),
        behaviour_value=closed(value, last_value),
        valid=closed(valid, ~acting.slots.done),
        first=closed(first, acting.slots.first),
        policy_version=jnp.full((action.shape[1], length + 1), version, jnp.int32),
        reward=jnp.swapaxes(outcome.reward, 0, 1),
        terminated=jnp.swapaxes(outcome.terminated, 0, 1),
        truncated=jnp.swapaxes(outcome.truncated, 0, 1),
        carry=carry0,
    )
    episodes = Episodes(
        jnp.sum(outcome.ended, dtype=jnp.float32),
        jnp.sum(outcome.episode_return),
        jnp.sum(outcome.episode_length, dtype=jnp.float32),
    )
    return acting, unroll, episodes
