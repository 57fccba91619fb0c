"""Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def generalized_advantage_estimation(
    r_t: jax.Array, discount_t: jax.Array, lambda_t: jax.Array, values: jax.Array
) -> jax.Array:
    """GAE(lambda) advantages of one trajectory.

        delta_t = r_t + discount_t * V_{t+1} - V_t
        A_t     = delta_t + discount_t * lambda_t * A_{t+1},   A_T = 0

    Episode ends inside the trajectory are expressed through the inputs: discount_t = 0 after a
    termination (no bootstrap), lambda_t = 0 after a truncation (bootstrap from V_{t+1}, the value
    of the final observation, but do not mix in the next episode's advantages).

    Args:
      r_t: rewards [T].
      discount_t: discounts [T].
      lambda_t: per-step lambda [T].
      values: V_0 .. V_T [T+1].

    Returns:
      advantages [T], float32.
    """
    chex.assert_rank([r_t, discount_t, lambda_t, values], 1)
    chex.assert_equal_shape([r_t, discount_t, lambda_t, values[1:]])
    delta_t = r_t + discount_t * values[1:] - values[:-1]

    def backward(carry, inputs):
        delta, discount, lam = inputs
        advantage = delta + discount * lam * carry
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward, jnp.zeros((), jnp.float32), (delta_t, discount_t, lambda_t), reverse=True
    )
    return advantages


def episode_discounts(
    terminated: jax.Array, truncated: jax.Array, valid: jax.Array, gamma: float, lambda_: float
) -> tuple[jax.Array, jax.Array]:
    """discount_t and lambda_t for GAE from the flags of an Unroll (all [T]).

    A step whose action was not executed (valid False: its observation was terminal and the env
    auto-reset) neither bootstraps nor carries advantage across.
    """
    live = valid & ~terminated
    discount_t = jnp.where(live, gamma, 0.0).astype(jnp.float32)
    lambda_t = jnp.where(valid & ~truncated, lambda_, 0.0).astype(jnp.float32)
    return discount_t, lambda_t
