"""Text encoders: word ids -> one feature vector, for tasks given as text (MazeBase, BabyAI)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from networks.graph import Space

GRU_GATES = ("ir", "iz", "in", "hr", "hz", "hn")  # flax GRUCell: one Dense per gate and input


class TextEncoder(nn.Module):
    """Embeds word ids [N, L] (0 = padding) and runs a GRU over them; returns its last state
    [N, features], taken after the last word (padding leaves the state as it is)."""

    vocab_size: int
    features: int  # network.text_size

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(self.vocab_size, self.features, name="embed")(tokens)  # [N, L, F]
        cell = nn.GRUCell(self.features, name="gru")
        h = jnp.zeros((tokens.shape[0], self.features), x.dtype)
        for t in range(tokens.shape[1]):  # L is small (a mission's words): unrolled
            new, _ = cell(h, x[:, t])
            h = jnp.where((tokens[:, t] > 0)[:, None], new, h)
        return h

    def graph(self, name: str) -> dict[str, Space]:
        """Its layers' spaces as module `name`, each refused: surgery keeps how words are read
        (the embedding table has no kernel; the features it hands the torso are the torso's
        inputs)."""
        why = "is in the text encoder: surgery keeps how the words are read"
        layers = [f"{name}/gru/{g}" for g in GRU_GATES]
        return {layer: Space((layer,), refused=f"params/{layer} {why}") for layer in layers}
