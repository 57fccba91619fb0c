"""An encoder for sets of entities (OpenAI Five's units, Neural MMO's players and NPCs).

An entity observation is [E, F]: up to E entities with F attributes each, padded with rows that
are all zero (Neural MMO's convention), so an entity is present where any attribute is nonzero.
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class EntityGraph:
    """Which parameters read the entity set and the entity encoder's D units (module paths under
    params/; `EntityEncoder.graph`): what surgery needs to change them exactly
    (surgery/entities.py), instead of guessing from names.

    Attributes:
      attributes: the layer reading the F attributes (kernel axis 0).
      stream_writers: layers writing the encoder's D-unit residual stream (kernel's last axis,
        bias): the per-entity layer, the attention's output projection, the MLP.
      stream_readers: kernels reading the stream on axis 0 (the attention's query, key and value,
        the MLP, and every pointer head's key).
      attention: the attention module: query/key/value kernels [D, heads, d], out [heads, d, D].
      pooled_readers: kernels whose last D input rows read the pooled features (the torso's first
        dense layer: the pool joins the torso's inputs last).
      heads: attention heads.
    """

    attributes: str
    stream_writers: tuple[str, ...]
    stream_readers: tuple[str, ...]
    attention: str
    pooled_readers: tuple[str, ...]
    heads: int


class EntityEncoder(nn.Module):
    """Per-entity layer, one residual block of self-attention among the present entities and an
    MLP, and a max-pool.

    Returns the pooled features [N, D] (zeros where no entity is present) and every entity's
    embedding [N, E, D], which pointer heads attend to. Absent entities are masked as keys and
    out of the pool, so neither their padding nor their order changes anything: the embeddings
    are permutation equivariant and the pool invariant.
    """

    features: int  # network.entity_size
    num_heads: int  # network.entity_heads

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

    def graph(
        self, name: str, key_readers: tuple[str, ...], pooled_readers: tuple[str, ...]
    ) -> EntityGraph:
        """Its graph as module `name`, with the layers outside it that read its embeddings
        (pointer heads' keys) and its pooled features (the torsos' first layers)."""
        return EntityGraph(
            attributes=f"{name}/embed",
            stream_writers=(f"{name}/embed", f"{name}/attention/out", f"{name}/mlp"),
            stream_readers=(
                *(f"{name}/attention/{x}" for x in ("query", "key", "value")),
                f"{name}/mlp",
                *key_readers,
            ),
            attention=f"{name}/attention",
            pooled_readers=pooled_readers,
            heads=self.num_heads,
        )
