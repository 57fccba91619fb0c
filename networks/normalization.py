"""Running mean/std observation normalization (OpenAI Five, App. E).

For each float observation feature a running mean and variance of all data ever observed is kept;
inputs are normalized as (x - mean) / std and clipped to [-clip, clip] (clip = 5 in the paper). The
statistics live in the learner state, not in the network parameters, so gradient steps never touch
them; they are updated once per learner batch with the parallel-variance formula.
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp

DEFAULT_CLIP = 5.0
_EPS = 1e-8


@flax.struct.dataclass
class RunningStats:
    """mean and var have the feature shape; count is a float32 scalar."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_stats(shape) -> RunningStats:
    return RunningStats(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.zeros((), jnp.float32),
    )


def batch_moments(x: jax.Array, mask: jax.Array, axis_name: str | None = None):
    """Count, mean and M2 (sum of squared deviations) of the rows of x where mask is set.

    Args:
      x: [N, *feature_shape].
      mask: [N] bool.
      axis_name: if given, the moments are combined across that pmap axis.
    """
    w = mask.astype(jnp.float32).reshape((-1,) + (1,) * (x.ndim - 1))
    x = x.astype(jnp.float32)
    count = jnp.sum(mask.astype(jnp.float32))
    total = jnp.sum(w * x, axis=0)
    if axis_name is not None:
        count = jax.lax.psum(count, axis_name)
        total = jax.lax.psum(total, axis_name)
    mean = total / jnp.maximum(count, 1.0)
    m2 = jnp.sum(w * jnp.square(x - mean), axis=0)
    if axis_name is not None:
        m2 = jax.lax.psum(m2, axis_name)
    return count, mean, m2


def update_stats(stats: RunningStats, count, mean, m2) -> RunningStats:
    """Merges batch moments into running statistics (Chan et al. parallel variance)."""
    total = stats.count + count
    safe_total = jnp.maximum(total, 1.0)
    delta = mean - stats.mean
    new_mean = stats.mean + delta * count / safe_total
    old_m2 = stats.var * stats.count
    new_var = (old_m2 + m2 + jnp.square(delta) * stats.count * count / safe_total) / safe_total
    # With no data yet keep the identity transform instead of dividing by zero.
    empty = total <= 0
    return RunningStats(
        mean=jnp.where(empty, stats.mean, new_mean),
        var=jnp.where(empty, stats.var, new_var),
        count=total,
    )


def normalize(stats: RunningStats, x: jax.Array, clip: float = DEFAULT_CLIP) -> jax.Array:
    z = (x.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + _EPS)
    return jnp.clip(z, -clip, clip)
