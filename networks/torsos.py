"""Feature extractors ("torsos") from preprocessed observations to a feature vector."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"network.activation={name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """Dense layers named dense_0, dense_1, ... (surgery locates them by these paths)."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        for i, size in enumerate(self.hidden_sizes):
            x = nn.Dense(
                size,
                kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)),
                bias_init=nn.initializers.zeros,
                name=f"dense_{i}",
            )(x)
            x = act(x)
        return x


def flatten_features(inputs: dict[str, jax.Array], batch_ndim: int) -> jax.Array:
    """Concatenates the (already float) inputs into [*batch, F] in sorted key order."""
    parts = [
        jnp.reshape(inputs[k], inputs[k].shape[:batch_ndim] + (-1,)).astype(jnp.float32)
        for k in sorted(inputs)
    ]
    return jnp.concatenate(parts, axis=-1)
