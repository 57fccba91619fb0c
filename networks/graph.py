"""Which parameters read which units: the layer graph a network exports for surgery.

A *space* is a set of units some layers compute, e.g. the 64 outputs of policy_torso/dense_0 or
the LSTM's hidden state. Its *writers* compute it (their kernel's last axis and their bias index
the units), *residual* layers add into it (the same axes) and *readers* take it as input (their
kernel's input axis, kernel.ndim - 2). Adding units to a space exactly means: new columns for the
writers, zeros for the residual layers, zero rows for the readers (surgery/ops.py).

Layers are module paths under params/ ("policy_torso/dense_0"). The modules that name their
submodules also build their part of the graph (torsos and heads: networks/torsos.py,
networks/heads.py; the entity encoder: networks/entities.py; networks/actor_critic.py joins the
parts), so renaming a submodule changes the graph with it; surgery reads the graph and never
parses paths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Reader:
    """A layer whose kernel reads a space on its input axis.

    The axis holds `offset` other rows, then `positions` blocks of the space's units (a flattened
    [H, W, C] feature map has H*W blocks of C), then `rest` other rows. offset=None counts from
    the end (the space sits just before the last `rest` rows); rest=None allows any number.
    """

    layer: str
    offset: int | None = 0
    positions: int = 1
    rest: int | None = 0


@dataclasses.dataclass(frozen=True)
class Space:
    """A set of units and the layers that compute, add into and read them.

    Attributes:
      writers: layers whose outputs are the units (kernel's last axis, bias).
      residual: layers that add into the units (same axes; new entries zero).
      readers: layers that read the units.
      tied: writers of other spaces the modules keep at this space's size (a residual block's
        inner layer has the stream's width): widening this space widens them too.
      refused: why this space cannot be widened ("" if it can).
    """

    writers: tuple[str, ...] = ()
    residual: tuple[Reader, ...] = ()
    readers: tuple[Reader, ...] = ()
    tied: tuple[str, ...] = ()
    refused: str = ""


@dataclasses.dataclass(frozen=True)
class Part:
    """What one head module adds to its network's LayerGraph (networks/heads.py: each head's
    `graph(name)`).

    Attributes:
      readers: its layers that read the features the head is given.
      residual: its layers that add into those features (autoregressive tables).
      spaces: its own layers' spaces, in the order of its layers (refused where the env fixes
        their outputs).
      logits: a policy head's last layer, whose outputs are the logits.
    """

    readers: tuple[Reader, ...] = ()
    residual: tuple[Reader, ...] = ()
    spaces: Mapping[str, Space] = dataclasses.field(default_factory=dict)
    logits: str = ""  # a policy head's layer whose outputs are the logits (surgery adds actions)


@dataclasses.dataclass(frozen=True)
class TorsoGraph:
    """A torso's layers in order.

    Attributes:
      kind: "mlp", "conv_chain" (conv_0, conv_1, ... then a dense layer) or "impala_cnn".
      layers: the dense/conv layers that are not inside residual blocks, input to output.
      blocks: its residual blocks (MLP torsos: each has an inner layer and an output layer).
      block_layers: (inner, output) layer names inside a block, relative to the block.
      block_name: the module name of the j-th residual block.
    """

    kind: str
    layers: tuple[str, ...]
    blocks: tuple[str, ...] = ()
    block_layers: tuple[str, str] = ("", "")
    block_name: Callable[[int], str] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class LayerGraph:
    """Every space of a network surgery can change.

    Attributes:
      spaces: layer -> the space it writes, for every layer with a kernel outside the entity
        encoder (heads and residual layers too, with `refused` saying why and what to do).
      inputs: the flattened non-image observation features (no writers).
      image: the image channels (CNN torsos), else None.
      core: the LSTM's units, else None.
      policy_head: the dense logits layer ("" when every action head is a pointer head).
      value_head: the value layer.
      pointer_heads: action head index -> the pointer head's module.
      conditioning: action head index -> the layer whose kernel rows (one per choice of that
        head) add into the heads' input space (autoregressive heads), for every head a later
        head reads.
      head_sizes: the action heads' sizes, in the logits' order.
      torsos: torso module -> its TorsoGraph.
      entities: the entity encoder's graph (networks.entities.EntityGraph), else None.
      gaussian: a Gaussian head's layers (its mean, then a state-dependent log-std layer; a
        log-std vector lives at <head>/log_std beside the mean), () without continuous actions.
      rebuild: (blocks, **module fields) -> the graph of the network with those changes
        (blocks: torso module -> residual blocks); see `with_blocks`, `with_module`.
    """

    spaces: Mapping[str, Space]
    inputs: Space
    image: Space | None
    core: Space | None
    policy_head: str
    value_head: str
    pointer_heads: Mapping[int, str]
    conditioning: Mapping[int, str]
    head_sizes: tuple[int, ...]
    torsos: Mapping[str, TorsoGraph]
    entities: object = None
    gaussian: tuple[str, ...] = ()
    rebuild: Callable[..., LayerGraph] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )

    def with_blocks(self, torso: str, count: int) -> LayerGraph:
        """The graph once `torso` has `count` residual blocks."""
        return self.rebuild({torso: count})

    def with_module(self, **fields) -> LayerGraph:
        """The graph once the module's fields (e.g. entity_size) have these values."""
        return self.rebuild({}, **fields)

    def layers(self) -> list[str]:
        """Every layer the graph names, sorted."""
        names = set(self.spaces)
        for space in (self.inputs, self.image, self.core, *self.spaces.values()):
            if space is not None:
                names.update(space.writers)
                names.update(r.layer for r in space.readers + space.residual)
        return sorted(names)
