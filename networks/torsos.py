"""Feature extractors ("torsos") from preprocessed observations to a feature vector.

Each torso also describes its layers as a layer graph (`graph`, networks/graph.py): which layer
reads which layer's units. Surgery follows that graph, so the names below are free to change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from networks.graph import Reader, Space, TorsoGraph

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"network.activation={name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def _dense(size: int, name: str, scale: float = np.sqrt(2.0)) -> nn.Dense:
    return nn.Dense(
        size,
        kernel_init=nn.initializers.orthogonal(scale),
        bias_init=nn.initializers.zeros,
        name=name,
    )


def _conv(channels: int, kernel: int, stride: int, name: str, padding="VALID") -> nn.Conv:
    return nn.Conv(
        channels,
        (kernel, kernel),
        (stride, stride),
        padding=padding,
        kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)),
        bias_init=nn.initializers.zeros,
        name=name,
    )


class MLP(nn.Module):
    """Dense layers dense_0, dense_1, ..., then residual blocks res_0, res_1, ...

    A residual block computes h + dense_1(act(dense_0(h))) at the width of the last layer; surgery
    inserts new ones with a zero dense_1, which leaves the function unchanged. With layer_norm,
    each dense layer's output is normalised over its units (LayerNorm norm_i) before the
    activation, as PQN's torso (Gallici et al. 2024).
    """

    hidden_sizes: Sequence[int]
    activation: str  # network.activation
    residual_blocks: int  # network.residual_blocks
    layer_norm: bool = False  # network.layer_norm

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        for i, size in enumerate(self.hidden_sizes):
            x = _dense(size, f"dense_{i}")(x)
            if self.layer_norm:
                x = nn.LayerNorm(name=f"norm_{i}")(x)
            x = act(x)
        for i in range(self.residual_blocks):
            x = ResidualDense(x.shape[-1], self.activation, name=f"res_{i}")(x)
        return x

    def graph(self, prefix, consumers, extra_rows=0, positions=0, blocks=None):
        """(spaces, inputs, image, TorsoGraph) of this torso as module `prefix` (see
        `conv_chain_graph`); `blocks` overrides residual_blocks."""
        blocks = self.residual_blocks if blocks is None else blocks
        dense = tuple(f"{prefix}/dense_{i}" for i in range(len(self.hidden_sizes)))
        inner = tuple(f"{prefix}/res_{j}/dense_0" for j in range(blocks))
        outer = tuple(f"{prefix}/res_{j}/dense_1" for j in range(blocks))
        stream = Space(
            dense[-1:],
            residual=tuple(Reader(x) for x in outer),
            readers=(*(Reader(x) for x in inner), *consumers),
            tied=inner,
        )
        spaces = {d: Space((d,), readers=(Reader(n),)) for d, n in zip(dense, dense[1:])}
        if dense:
            spaces[dense[-1]] = stream
        if self.layer_norm:
            for d in dense:
                spaces[d] = _normalised(spaces[d], d)
        writer = f"params/{dense[-1]}" if dense else "none: the stream is the torso's input"
        for x, y in zip(inner, outer):
            spaces[x] = Space((x,), readers=(Reader(y),))
            spaces[y] = Space(
                (y,),
                refused=f"params/{y} adds into the residual stream; widen the stream's writer "
                f"({writer})",
            )
        if dense:
            inputs = Space(readers=(Reader(dense[0], rest=extra_rows),))
        else:
            inputs = Space(
                residual=tuple(Reader(r.layer, rest=extra_rows) for r in stream.residual),
                readers=tuple(Reader(r.layer, rest=extra_rows) for r in stream.readers),
            )
        torso = TorsoGraph(
            "mlp",
            dense,
            tuple(f"{prefix}/res_{j}" for j in range(blocks)),
            ("dense_0", "dense_1"),
            lambda j: f"res_{j}",
        )
        return spaces, inputs, None, torso


def _normalised(space: Space, layer: str) -> Space:
    """`space` refused: a copied unit moves the mean and variance LayerNorm takes over the
    layer's units, so no widening of a normalised layer keeps the function."""
    return dataclasses.replace(
        space,
        refused=f"params/{layer} feeds a LayerNorm (network.layer_norm), which a wider layer "
        "changes; an MLP can add residual blocks instead (deepen)",
    )


class ResidualDense(nn.Module):
    features: int
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        y = act(_dense(self.features, "dense_0")(x))
        return x + _dense(self.features, "dense_1")(y)


def space_to_depth(x: jax.Array, block: int) -> jax.Array:
    """[N, H, W, C] -> [N, H/b, W/b, b*b*C], channel index (dy * b + dx) * C + c."""
    n, h, w, c = x.shape
    x = x.reshape(n, h // block, block, w // block, block, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, h // block, w // block, block * block * c)


def space_to_depth_kernel(kernel: jax.Array, block: int) -> jax.Array:
    """[k, k, C, F] -> [k/b, k/b, b*b*C, F] in space_to_depth's channel order.

    A VALID stride-b convolution with a k x k kernel (k a multiple of b) is the VALID stride-1
    convolution of space_to_depth(x, b) with this kernel: output (i, j) reads input rows
    b*i + ky, ky = b*p + dy, i.e. block row i + p at offset dy.
    """
    k, _, c, f = kernel.shape
    kernel = kernel.reshape(k // block, block, k // block, block, c, f)
    return kernel.transpose(0, 2, 1, 3, 4, 5).reshape(k // block, k // block, block * block * c, f)


class StridedConv(nn.Module):
    """A VALID strided conv with nn.Conv's parameters (kernel [k, k, C, F], bias), optionally
    computed as a stride-1 conv over space-to-depth blocks: the same function, but XLA:CPU
    computes the input gradient of the Nature CNN's stride-2 4x4 conv much faster that way
    (benchmarks/RESULTS.md, "Atari throughput")."""

    features: int
    kernel_size: int
    stride: int
    space_to_depth: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, s = self.kernel_size, self.stride
        kernel = self.param(
            "kernel", nn.initializers.orthogonal(np.sqrt(2.0)), (k, k, x.shape[-1], self.features)
        )
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        if self.space_to_depth and s > 1 and k % s == 0 and x.shape[1] % s == 0 == x.shape[2] % s:
            x, kernel, k, s = space_to_depth(x, s), space_to_depth_kernel(kernel, s), k // s, 1
        y = jax.lax.conv_general_dilated(
            x, kernel, (s, s), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return y + bias


class NatureCNN(nn.Module):
    """Mnih et al. 2015: conv 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512. Input [N, H, W, C].

    space_to_depth computes the second conv over 2x2 blocks (see StridedConv): identical function
    and parameters, a faster update on CPU (benchmarks/RESULTS.md).
    """

    channels: Sequence[int] = (32, 64, 64)
    hidden_size: int = 512
    space_to_depth: bool = True

    @nn.compact
    def __call__(self, image: jax.Array, extra: jax.Array | None = None) -> jax.Array:
        kernels, strides = (8, 4, 3), (4, 2, 1)
        x = image
        for i, (c, k, s) in enumerate(zip(self.channels, kernels, strides)):
            s2d = self.space_to_depth and i == 1
            x = nn.relu(StridedConv(c, k, s, s2d, name=f"conv_{i}")(x))
        x = x.reshape(x.shape[0], -1)
        if extra is not None:
            x = jnp.concatenate([x, extra], axis=-1)
        return nn.relu(_dense(self.hidden_size, "dense_0")(x))

    def graph(self, prefix, consumers, extra_rows=0, positions=0, blocks=None):
        return conv_chain_graph(prefix, len(self.channels), consumers, extra_rows, positions)


def conv_chain_graph(prefix, convs: int, consumers, extra_rows: int, positions: int):
    """The graph of conv_0 ... conv_{n-1} then dense_0 (Nature, small and board CNNs; pooling
    between convs does not change which units read which).

    Returns (spaces, inputs, image, TorsoGraph): `consumers` read dense_0's units; dense_0 reads
    the last conv map flattened (h, w, c) over `positions` = H*W, then the other observations,
    then `extra_rows` encoder features (text, entities).
    """
    conv = tuple(f"{prefix}/conv_{i}" for i in range(convs))
    dense = f"{prefix}/dense_0"
    spaces = {c: Space((c,), readers=(Reader(n),)) for c, n in zip(conv, conv[1:])}
    spaces[conv[-1]] = Space((conv[-1],), readers=(Reader(dense, positions=positions, rest=None),))
    spaces[dense] = Space((dense,), readers=tuple(consumers))
    inputs = Space(readers=(Reader(dense, offset=None, rest=extra_rows),))
    image = Space(readers=(Reader(conv[0]),))
    return spaces, inputs, image, TorsoGraph("conv_chain", (*conv, dense))


class ResidualBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = _conv(self.channels, 3, 1, "conv_0", padding="SAME")(nn.relu(x))
        y = _conv(self.channels, 3, 1, "conv_1", padding="SAME")(nn.relu(y))
        return x + y


IMPALA_BLOCKS = 2  # residual blocks per stack


class ImpalaStack(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _conv(self.channels, 3, 1, "conv", padding="SAME")(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for j in range(IMPALA_BLOCKS):
            x = ResidualBlock(self.channels, name=f"block_{j}")(x)
        return x


class ImpalaCNN(nn.Module):
    """Espeholt et al. 2018: stacks of conv, max-pool and two residual blocks, then dense."""

    channels: Sequence[int] = (16, 32, 32)
    hidden_size: int = 256

    @nn.compact
    def __call__(self, image: jax.Array, extra: jax.Array | None = None) -> jax.Array:
        x = image
        for i, c in enumerate(self.channels):
            x = ImpalaStack(c, name=f"stack_{i}")(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        if extra is not None:
            x = jnp.concatenate([x, extra], axis=-1)
        return nn.relu(_dense(self.hidden_size, "dense_0")(x))

    def graph(self, prefix, consumers, extra_rows=0, positions=0, blocks=None):
        """Each stack_i/conv writes a stream that its blocks' conv_1 add into and their conv_0,
        then the next stack's conv (or dense_0, over `positions`) read."""
        stacks = [f"{prefix}/stack_{i}" for i in range(len(self.channels))]
        dense = f"{prefix}/dense_0"
        spaces = {}
        for i, stack in enumerate(stacks):
            blocks_ = [f"{stack}/block_{j}" for j in range(IMPALA_BLOCKS)]
            inner = tuple(f"{b}/conv_0" for b in blocks_)
            nxt = (
                Reader(f"{stacks[i + 1]}/conv")
                if i + 1 < len(stacks)
                else Reader(dense, positions=positions, rest=None)
            )
            spaces[f"{stack}/conv"] = Space(
                (f"{stack}/conv",),
                residual=tuple(Reader(f"{b}/conv_1") for b in blocks_),
                readers=(*(Reader(x) for x in inner), nxt),
                tied=inner,
            )
            for b in blocks_:
                spaces[f"{b}/conv_0"] = Space((f"{b}/conv_0",), readers=(Reader(f"{b}/conv_1"),))
                spaces[f"{b}/conv_1"] = Space(
                    (f"{b}/conv_1",),
                    refused=f"params/{b}/conv_1 adds into {stack}'s stream; widen "
                    f"params/{stack}/conv instead",
                )
        spaces[dense] = Space((dense,), readers=tuple(consumers))
        inputs = Space(readers=(Reader(dense, offset=None, rest=extra_rows),))
        image = Space(readers=(Reader(f"{stacks[0]}/conv"),))
        torso = TorsoGraph("impala_cnn", (*(f"{s}/conv" for s in stacks), dense))
        return spaces, inputs, image, torso


class SmallCNN(nn.Module):
    """For small grid images (MiniGrid's 7x7): conv 2x2, max-pool 2x2, conv 2x2, conv 2x2, dense."""

    channels: Sequence[int] = (16, 32, 64)
    hidden_size: int = 128

    @nn.compact
    def __call__(self, image: jax.Array, extra: jax.Array | None = None) -> jax.Array:
        x = nn.relu(_conv(self.channels[0], 2, 1, "conv_0")(image))
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        for i, c in enumerate(self.channels[1:], start=1):
            x = nn.relu(_conv(c, 2, 1, f"conv_{i}")(x))
        x = x.reshape(x.shape[0], -1)
        if extra is not None:
            x = jnp.concatenate([x, extra], axis=-1)
        return nn.relu(_dense(self.hidden_size, "dense_0")(x))

    def graph(self, prefix, consumers, extra_rows=0, positions=0, blocks=None):
        return conv_chain_graph(prefix, len(self.channels), consumers, extra_rows, positions)


class BoardCNN(nn.Module):
    """For board games (Connect Four's 6x7 planes): convs (3x3 SAME by default), then a dense layer.

    One 4x4 VALID conv suits Connect Four: every line of four on the board lies inside one of its
    12 windows, so each channel can read a line pattern directly.
    """

    channels: Sequence[int] = (32, 32)
    hidden_size: int = 256
    kernel_size: int = 3
    padding: str = "SAME"
    # LayerNorm (norm_i) over each conv's channels at every position and over the dense layer's
    # units, before the activation: PQN's MinAtar torso (network.layer_norm).
    layer_norm: bool = False

    @nn.compact
    def __call__(self, image: jax.Array, extra: jax.Array | None = None) -> jax.Array:
        x = image
        for i, c in enumerate(self.channels):
            x = self._normed(i, _conv(c, self.kernel_size, 1, f"conv_{i}", padding=self.padding)(x))
        x = x.reshape(x.shape[0], -1)
        if extra is not None:
            x = jnp.concatenate([x, extra], axis=-1)
        return self._normed(len(self.channels), _dense(self.hidden_size, "dense_0")(x))

    def _normed(self, i: int, x: jax.Array) -> jax.Array:
        return nn.relu(nn.LayerNorm(name=f"norm_{i}")(x) if self.layer_norm else x)

    def graph(self, prefix, consumers, extra_rows=0, positions=0, blocks=None):
        spaces, inputs, image, torso = conv_chain_graph(
            prefix, len(self.channels), consumers, extra_rows, positions
        )
        if self.layer_norm:
            spaces = {name: _normalised(space, name) for name, space in spaces.items()}
        return spaces, inputs, image, torso


# The image torsos selectable by network.torso (surgery reads their default sizes from here too).
CNN_TORSOS = {
    "nature_cnn": NatureCNN,
    "impala_cnn": ImpalaCNN,
    "small_cnn": SmallCNN,
    "board_cnn": BoardCNN,
}


def flatten_features(inputs: dict[str, jax.Array], batch_ndim: int) -> jax.Array:
    """Concatenates the (already float) inputs into [*batch, F] in sorted key order."""
    parts = [
        jnp.reshape(inputs[k], inputs[k].shape[:batch_ndim] + (-1,)).astype(jnp.float32)
        for k in sorted(inputs)
    ]
    return jnp.concatenate(parts, axis=-1)
