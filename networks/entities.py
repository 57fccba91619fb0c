"""An encoder for sets of entities (OpenAI Five's units, Neural MMO's players and NPCs).

An entity observation is [E, F]: up to E entities with F attributes each, padded with rows that
are all zero (Neural MMO's convention), so an entity is present where any attribute is nonzero.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def present(entities: jax.Array) -> jax.Array:
    """bool [..., E]: the rows of entities [..., E, F] that hold an entity (not all zero)."""
    return jnp.any(entities != 0, axis=-1)


def symlog(x: jax.Array) -> jax.Array:
    """sign(x) log(1 + |x|): attributes of any scale (hit points, coordinates, ids) into a range a
    network can read without running statistics, which padding rows would skew."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


class EntityEncoder(nn.Module):
    """Per-entity layer, one residual block of self-attention among the present entities and an
    MLP, and a max-pool.

    Returns the pooled features [N, D] (zeros where no entity is present) and every entity's
    embedding [N, E, D], which pointer heads attend to. Absent entities are masked as keys and
    out of the pool, so neither their padding nor their order changes anything: the embeddings
    are permutation equivariant and the pool invariant.
    """

    features: int = 64
    num_heads: int = 4

    @nn.compact
    def __call__(self, entities: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        """entities float [N, E, F], mask bool [N, E] -> (pooled [N, D], embeddings [N, E, D])."""
        h = nn.relu(nn.Dense(self.features, name="embed")(symlog(entities)))
        attended = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads, qkv_features=self.features, name="attention"
        )(h, h, mask=mask[:, None, None, :])
        # No normalization layer: every layer is then linear in its inputs' units, so surgery can
        # add units whose readers start at zero and keep the function exactly (surgery/ops.py).
        h = h + attended
        h = h + nn.Dense(self.features, name="mlp")(nn.relu(h))
        pooled = jnp.max(jnp.where(mask[..., None], h, -jnp.inf), axis=1)
        pooled = jnp.where(jnp.any(mask, axis=1)[:, None], pooled, 0.0)
        return pooled, h
