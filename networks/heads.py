"""Policy and value heads, and the masked categorical distribution the policy samples from."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

# A finite stand-in for -inf: masked logits stay finite so softmax and gradients never see NaN,
# while exp(-1e9 - max) is exactly 0 in float32.
MASKED_LOGIT = -1e9


class CategoricalHead(nn.Module):
    """Logits over discrete actions; small init so the initial policy is near uniform."""

    num_actions: int
    init_scale: float = 0.01

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(
            self.num_actions,
            kernel_init=nn.initializers.orthogonal(self.init_scale),
            bias_init=nn.initializers.zeros,
            name="logits",
        )(x)


class ValueHead(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(
            1,
            kernel_init=nn.initializers.orthogonal(1.0),
            bias_init=nn.initializers.zeros,
            name="value",
        )(x)[..., 0]


def apply_mask(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Sets the logits of illegal actions (mask False) to MASKED_LOGIT."""
    if mask is None:
        return logits
    # A row with no legal action (only ever a padding row) falls back to all actions.
    mask = jnp.logical_or(mask, ~jnp.any(mask, axis=-1, keepdims=True))
    return jnp.where(mask, logits, MASKED_LOGIT)


def log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy(logits: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def kl_divergence(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """KL(p || q) per row."""
    logp = jax.nn.log_softmax(logits_p)
    logq = jax.nn.log_softmax(logits_q)
    return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)
