"""Text encoders: word ids -> one feature vector, for tasks given as text (MazeBase, BabyAI)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class TextEncoder(nn.Module):
    """Embeds word ids [N, L] (0 = padding) and runs a GRU over them; returns its last state
    [N, features], taken after the last word (padding leaves the state as it is)."""

    vocab_size: int
    features: int = 64

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(self.vocab_size, self.features, name="embed")(tokens)  # [N, L, F]
        cell = nn.GRUCell(self.features, name="gru")
        h = jnp.zeros((tokens.shape[0], self.features), x.dtype)
        for t in range(tokens.shape[1]):  # L is small (a mission's words): unrolled
            new, _ = cell(h, x[:, t])
            h = jnp.where((tokens[:, t] > 0)[:, None], new, h)
        return h
