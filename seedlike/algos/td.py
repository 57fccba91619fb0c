"""The pieces of temporal-difference (TD) targets that several algorithms share: n-step returns
along unrolls (computed by the replay when it stores them, in numpy) and the Huber loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def n_step_targets(
    reward: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    n: int,
    reward_clip: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's n-step target pieces along unrolls [B, T] (seedlike.types.Unroll's layout:
    reward, terminated and truncated at t are the outcome of action t; step T bootstraps).

    From step t, rewards are summed for up to n steps, stopping after a step that ends the episode
    or at the unroll's last step T. A termination leaves no bootstrap (discount 0); a truncation
    bootstraps from the step after it (the episode's last observation), as does the unroll's end.

    Returns (reward sum float32 [B, T], discount float32 [B, T], bootstrap step int32 [B, T]).
    """
    reward = np.asarray(reward, np.float32)
    if reward_clip:
        reward = np.clip(reward, -reward_clip, reward_clip)
    terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
    batch, horizon = reward.shape
    t = np.broadcast_to(np.arange(horizon), (batch, horizon))
    rows = np.broadcast_to(np.arange(batch)[:, None], (batch, horizon))
    total = np.zeros((batch, horizon), np.float32)
    discount = np.ones((batch, horizon), np.float32)
    boot = t.copy()
    going = np.ones((batch, horizon), bool)
    for k in range(int(n)):
        step = np.minimum(t + k, horizon - 1)
        going &= t + k < horizon
        r = reward[rows, step]
        total = np.where(going, total + discount * r, total)
        discount = np.where(going, discount * np.float32(gamma), discount)
        boot = np.where(going, step + 1, boot)
        ends = terminated[rows, step] | truncated[rows, step]
        discount = np.where(going & terminated[rows, step], 0.0, discount)
        going &= ~ends
    return total, discount.astype(np.float32), boot.astype(np.int32)


def huber(x: jax.Array, delta: float) -> jax.Array:
    """Huber loss of x with threshold delta (0: the squared error / 2)."""
    if delta <= 0:
        return 0.5 * jnp.square(x)
    a = jnp.abs(x)
    return jnp.where(a <= delta, 0.5 * jnp.square(x), delta * (a - 0.5 * delta))
