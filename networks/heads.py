"""Policy, pointer and value heads, and the masked (factorized) categorical distributions the
policy samples from."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

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


class Autoregressive(nn.Module):
    """The inputs of factorized heads that condition on the arguments chosen before them
    (OpenAI Five's target head reads the chosen action type): head i reads

        h_i = h + sum_{j < i} W_j onehot(a_j),

    one zero-initialized table W_j [n_j, F] per argument that some later head reads, so a new
    network starts as independent heads and learns which arguments matter.
    """

    sizes: Sequence[int]

    @nn.compact
    def __call__(self, h: jax.Array, args: jax.Array) -> list[jax.Array]:
        """h [N, F], args int [N, H] (only a_0 .. a_{H-2} are read) -> [h_0, ..., h_{H-1}]."""
        out = [h]
        for j, n in enumerate(self.sizes[:-1]):
            table = nn.Dense(
                h.shape[-1], use_bias=False, kernel_init=nn.initializers.zeros, name=f"embed_{j}"
            )
            out.append(out[-1] + table(jax.nn.one_hot(args[:, j], n, dtype=h.dtype)))
        return out


class PointerHead(nn.Module):
    """Logits over a set of entities: attention from the core's output to each entity's embedding.

    logit_j = <W_q h, W_k e_j> / sqrt(d) for entity j (absent entities: MASKED_LOGIT), followed by
    `extra` ordinary logits W_x h for choices that are no entity (e.g. "no target"). Permuting
    the entities permutes their logits, and the head works for any number of entities.
    """

    key_size: int = 32
    extra: int = 0
    init_scale: float = 0.01

    @nn.compact
    def __call__(self, h: jax.Array, entities: jax.Array, present: jax.Array) -> jax.Array:
        """h [N, F], entities [N, E, D], present bool [N, E] -> logits [N, E + extra]."""
        dense = functools.partial(nn.Dense, kernel_init=nn.initializers.orthogonal(self.init_scale))
        query = dense(self.key_size, name="query")(h)
        key = nn.Dense(self.key_size, name="key")(entities)
        logits = jnp.einsum("nd,ned->ne", query, key) / jnp.sqrt(float(self.key_size))
        logits = jnp.where(present, logits, MASKED_LOGIT)
        if self.extra:
            logits = jnp.concatenate([logits, dense(self.extra, name="extra")(h)], axis=-1)
        return logits


# Distributions over actions. `sizes` = (n_1, ..., n_H) of a factorized action (EnvSpec.head_sizes):
# logits [..., n_1 + ... + n_H] hold each argument's categorical side by side, and an action is
# one int whose mixed-radix digits are the arguments (EnvSpec.action_heads). The arguments are
# independent given the logits, so log-probabilities and entropies add up over heads and the
# KL too. sizes=None is one categorical over the whole last axis.


def split(logits: jax.Array, sizes: Sequence[int] | None) -> list[jax.Array]:
    """Each head's logits [..., n_i]."""
    if sizes is None or len(sizes) == 1:
        return [logits]
    return jnp.split(logits, np.cumsum(sizes)[:-1].tolist(), axis=-1)


def digits(action: jax.Array, sizes: Sequence[int]) -> list[jax.Array]:
    """The arguments d_i of actions a = ravel_multi_index((d_1, ..., d_H), sizes)."""
    strides = np.cumprod((1, *sizes[:0:-1]))[::-1]
    action = action.astype(jnp.int32)
    return [(action // int(s)) % int(n) for s, n in zip(strides, sizes)]


def join(args: Sequence[jax.Array], sizes: Sequence[int]) -> jax.Array:
    """The inverse of `digits`: one int32 action from its arguments."""
    action = jnp.zeros_like(args[0], jnp.int32)
    for d, n in zip(args, sizes):
        action = action * int(n) + d.astype(jnp.int32)
    return action


def apply_mask(logits: jax.Array, mask: jax.Array | None, sizes=None) -> jax.Array:
    """Sets the logits of illegal choices (mask False) to MASKED_LOGIT."""
    if mask is None:
        return logits
    # A head with no legal choice (only ever a padding row) falls back to all its choices.
    mask = jnp.concatenate(
        [jnp.logical_or(m, ~jnp.any(m, axis=-1, keepdims=True)) for m in split(mask, sizes)],
        axis=-1,
    )
    return jnp.where(mask, logits, MASKED_LOGIT)


def log_prob(logits: jax.Array, action: jax.Array, sizes=None) -> jax.Array:
    if sizes is None or len(sizes) == 1:
        logp = jax.nn.log_softmax(logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return sum(log_prob(x, d) for x, d in zip(split(logits, sizes), digits(action, sizes)))


def entropy(logits: jax.Array, sizes=None) -> jax.Array:
    total = 0.0
    for x in split(logits, sizes):
        logp = jax.nn.log_softmax(x)
        total = total - jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return total


def kl_divergence(logits_p: jax.Array, logits_q: jax.Array, sizes=None) -> jax.Array:
    """KL(p || q) per row."""
    total = 0.0
    for p, q in zip(split(logits_p, sizes), split(logits_q, sizes)):
        logp, logq = jax.nn.log_softmax(p), jax.nn.log_softmax(q)
        total = total + jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)
    return total


def sample(key: jax.Array, logits: jax.Array, sizes=None) -> jax.Array:
    """int32 actions drawn from the logits (each head independently)."""
    if sizes is None or len(sizes) == 1:
        return jax.random.categorical(key, logits).astype(jnp.int32)
    keys = jax.random.split(key, len(sizes))
    return join([jax.random.categorical(k, x) for k, x in zip(keys, split(logits, sizes))], sizes)


def greedy(logits: jax.Array, sizes=None) -> jax.Array:
    """The most likely action: each head's most likely choice."""
    if sizes is None or len(sizes) == 1:
        return logits.argmax(-1).astype(jnp.int32)
    return join([x.argmax(-1) for x in split(logits, sizes)], sizes)
