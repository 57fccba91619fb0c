"""Acting on the device: T steps of a batch of envs under the policy, recorded as the Unroll a
SEED learner batch holds (seedlike.types.Unroll), with the episodes that ended on the way."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from networks import normalization
from seedlike.envs import device
from seedlike.types import Unroll

RETURN_EPS = 1e-8  # seedlike.server.return_scale.ReturnScale's eps


class Acting(NamedTuple):
    """What acting carries from one rollout to the next, for a batch of envs [B]: the slots,
    the recurrent state before the next step (() if feed-forward), the PRNG key's raw bits
    (jax.random.key_data: what a checkpoint can hold), and for reward normalization each env's
    discounted return so far [B] and the running statistics of those returns over every env of
    every device (the same on each; unused without normalize_rewards)."""

    slots: device.Slot
    carry: Any
    key: jax.Array
    discounted: jax.Array
    return_stats: normalization.RunningStats


class RewardNorm(NamedTuple):
    """Return-based reward scaling as the SEED path's recorder does it
    (seedlike.server.return_scale): r / sqrt(Var[G] + eps), clipped to +-clip (0: no clip), G
    each env's discounted return, reset after its episode ends."""

    gamma: float
    clip: float
    axis_name: str | None = None  # the pmap axis whose envs share the statistics


class Episodes(NamedTuple):
    """The episodes that ended in a rollout: how many, their returns' and lengths' sums, and
    their outcomes by label (`by_label`)."""

    count: jax.Array
    return_sum: jax.Array
    length_sum: jax.Array
    outcomes: jax.Array


def start(network, env: device.DeviceEnv, num_envs: int, key: jax.Array) -> Acting:
    """`num_envs` envs at their first observations."""
    key, reset = jax.random.split(key)
    slots = device.start_all(env, jax.random.split(reset, num_envs))
    return Acting(
        slots, network.initial_carry(num_envs), jax.random.key_data(key),
        jnp.zeros(num_envs, jnp.float32), normalization.init_stats(()),
    )  # fmt: skip


def scale_rewards(norm: RewardNorm, acting: Acting, reward, ended):
    """(rewards to learn from [B], acting with the returns and statistics after this step)."""
    g = norm.gamma * acting.discounted + reward
    mean = jnp.mean(g)
    moments = normalization.combine_moments(
        jnp.float32(g.shape[0]), mean, jnp.sum(jnp.square(g - mean)), 1, norm.axis_name
    )
    stats = normalization.update_stats(acting.return_stats, *moments)
    scaled = reward / jnp.sqrt(stats.var + RETURN_EPS)
    if norm.clip:
        scaled = jnp.clip(scaled, -norm.clip, norm.clip)
    acting = acting._replace(discounted=jnp.where(ended, 0.0, g), return_stats=stats)
    return scaled, acting


def rollout(
    network, env, params, obs_norm, acting: Acting, length: int, version, epsilon=None,
    reward_norm: RewardNorm | None = None,
):  # fmt: skip
    """`length` steps of every env: (acting after them, Unroll [B, length+1, ...], Episodes).
    Step `length` of the unroll is the next one's step 0 (its value bootstraps). `epsilon` [B]:
    each env's exploration rate, where the network is a Q network (Network.act). With
    `reward_norm` the unroll's rewards are scaled (`scale_rewards`); the episodes' returns stay
    raw."""
    explore = {} if epsilon is None else {"epsilon": epsilon}

    def step(acting: Acting, _):
        slots, carry, key = acting.slots, acting.carry, acting.key
        key, act_key, env_key = jax.random.split(key, 3)

        obs, extras = split(network, slots.obs)
        action, logp, value, new_carry = network.act(
            params, obs_norm, obs, extras, carry, slots.first, act_key, **explore
        )
        keys = jax.random.split(env_key, action.shape[0])
        new_slots, outcome = device.advance_all(env, slots, action, keys)
        acting = acting._replace(slots=new_slots, carry=new_carry, key=key)
        reward = outcome.reward
        if reward_norm is not None:
            reward, acting = scale_rewards(reward_norm, acting, reward, outcome.ended)
        record = (slots.obs, action, logp, value, ~slots.done, slots.first, outcome, reward)
        return acting, record

    carry0 = acting.carry
    acting = acting._replace(key=jax.random.wrap_key_data(acting.key))
    acting, (seen, action, logp, value, valid, first, outcome, reward) = jax.lax.scan(
        step, acting, None, length
    )
    # The bootstrap step: its value under the same params; its action is chosen again (and
    # kept) by the next rollout's first step.
    key, last_key = jax.random.split(acting.key)
    last_obs, last_extras = split(network, acting.slots.obs)
    _, _, last_value, _ = network.act(
        params, obs_norm, last_obs, last_extras, acting.carry, acting.slots.first, last_key
    )
    acting = acting._replace(key=jax.random.key_data(key))
    zeros = jnp.zeros_like

    def closed(steps, last):  # [T, B, ...] and the bootstrap step [B, ...] -> [B, T+1, ...]
        return jnp.swapaxes(jnp.concatenate([steps, last[None]]), 0, 1)

    obs, extras = split(network, jax.tree.map(closed, seen, acting.slots.obs))
    unroll = Unroll(
        obs=obs,
        extras=extras,
        action=closed(action, zeros(action[0])),
        behaviour_logp=closed(logp, zeros(logp[0])),
        behaviour_value=closed(value, last_value),
        valid=closed(valid, ~acting.slots.done),
        first=closed(first, acting.slots.first),
        policy_version=jnp.full((action.shape[1], length + 1), version, jnp.int32),
        reward=jnp.swapaxes(reward, 0, 1),
        terminated=jnp.swapaxes(outcome.terminated, 0, 1),
        truncated=jnp.swapaxes(outcome.truncated, 0, 1),
        carry=carry0,
    )
    episodes = Episodes(
        jnp.sum(outcome.ended, dtype=jnp.float32),
        jnp.sum(outcome.episode_return),
        jnp.sum(outcome.episode_length, dtype=jnp.float32),
        by_label(outcome, env.labels),
    )
    return acting, unroll, episodes


def split(network, seen: dict) -> tuple[dict, dict]:
    """An env's observation dict as the policy's (observation, extras): the spec's extras keys
    (a legal-action mask) apart."""
    extras = network.spec.extras
    return {k: v for k, v in seen.items() if k not in extras}, {
        k: v for k, v in seen.items() if k in extras
    }


def by_label(outcome: device.Outcome, labels: int) -> jax.Array:
    """float32 [labels, 3]: the episodes that ended, by label and by the sign of their return
    (loss, draw, win); [0, 3] for an env without labels."""
    counts = jnp.zeros((labels, 3), jnp.float32)
    if not labels:
        return counts
    result = jnp.sign(outcome.episode_return).astype(jnp.int32) + 1
    return counts.at[outcome.label.reshape(-1), result.reshape(-1)].add(
        outcome.ended.reshape(-1).astype(jnp.float32)
    )
