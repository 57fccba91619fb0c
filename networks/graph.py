"""Which parameters read which units: the layer graph a network exports for surgery.

A *space* is a set of units some layers compute, e.g. the 64 outputs of policy_torso/dense_0 or
the LSTM's hidden state. Its *writers* compute it (their kernel's last axis and their bias index
the units), *residual* layers add into it (the same axes) and *readers* take it as input (their
kernel's input axis, kernel.ndim - 2). Adding units to a space exactly means: new columns for the
writers, zeros for the residual layers, zero rows for the readers (surgery/ops.py).

Layers are module paths under params/ ("policy_torso/dense_0"). The modules that name their
submodules also build their part of the graph (torsos and heads: networks/torsos.py,
networks/heads.py; the entity encoder: networks/entities.py), and `layer_graph` below joins the
parts of the modules an ActorCritic hands it (networks/actor_critic.py), so renaming a submodule
changes the graph with it; surgery reads the graph and never parses paths.
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


# The LSTM core's layers (flax LSTMCell: one Dense per gate and input).
LSTM_INPUT_GATES = ("ii", "if", "ig", "io")
LSTM_HIDDEN_GATES = ("hi", "hf", "hg", "ho")


def layer_graph(module, positions: int = 0, blocks: dict[str, int] | None = None) -> LayerGraph:
    """The LayerGraph of an ActorCritic (networks/actor_critic.py), joined from the parts its
    modules name: its heads' (`head_modules`), its torsos' (`torso_module`), its encoders'
    (`encoder_modules`) and the LSTM core's gates.

    Args:
      positions: H*W of a CNN torso's last feature map (Network.layer_graph works it out).
      blocks: residual blocks per MLP torso module, where they differ from the module's.
    """
    blocks = dict(blocks or {})
    # Each head's own part (networks/heads.py); the value head reads the value features, the
    # autoregressive tables add into the policy features, every other head reads them.
    parts = {name: head.graph(name) for name, head in module.head_modules(parent=None).items()}
    pointers = {i: f"pointers_{i}" for i in module.head_spec.pointer_heads}
    spaces: dict[str, Space] = {}
    core, torso_readers = _core(module, parts, spaces)
    names = ["torso"] if module.torso_spec.kind != "mlp" or module.torso_spec.shared else []
    names = names or ["policy_torso", "value_torso"]
    torso_graphs, inputs, image = _torsos(module, names, torso_readers, parts, positions, blocks)
    for graph in torso_graphs.values():
        spaces.update(graph.pop("spaces"))
    for part in parts.values():
        spaces.update(part.spaces)
    encoders = module.encoder_modules(parent=None)
    if "text_encoder" in encoders:
        spaces.update(encoders["text_encoder"].graph("text_encoder"))
    entities = None
    if "entity_encoder" in encoders:
        # Pointer heads' keys read the encoder's stream; the pool joins each torso's inputs last.
        entities = encoders["entity_encoder"].graph(
            "entity_encoder",
            tuple(f"{name}/key" for name in pointers.values()),
            tuple(f"{name}/dense_0" for name in names),
        )

    def rebuild(more_blocks: dict[str, int], **fields) -> LayerGraph:
        changed = module.with_fields(**fields) if fields else module
        return layer_graph(changed, positions, {**blocks, **more_blocks})

    return LayerGraph(
        spaces=spaces,
        inputs=inputs,
        image=image,
        core=core,
        policy_head=parts["policy_head"].logits if "policy_head" in parts else "",
        value_head="value_head/value" if "value_head" in parts else "",
        pointer_heads=pointers,
        conditioning=dict(enumerate(parts["conditioning"].spaces))
        if "conditioning" in parts
        else {},
        head_sizes=tuple(int(n) for n in module.head_sizes),
        torsos={name: graph["torso"] for name, graph in torso_graphs.items()},
        entities=entities,
        gaussian=tuple(parts["gaussian_head"].spaces) if "gaussian_head" in parts else (),
        rebuild=rebuild,
    )


def _head_readers(parts: dict) -> tuple[tuple, tuple, tuple]:
    """(readers of the policy features, readers of the value features, layers adding into the
    policy features) of the heads' parts."""
    reads_value = tuple(parts["value_head"].readers) if "value_head" in parts else ()
    reads_policy = tuple(
        r
        for name, p in parts.items()
        if name not in ("value_head", "conditioning")
        for r in p.readers
    )
    adds_policy = tuple(r for p in parts.values() for r in p.residual)
    return reads_policy, reads_value, adds_policy


def _core(module, parts: dict, spaces: dict) -> tuple[Space | None, dict]:
    """The LSTM core's space (None without one; its gates' own spaces go into `spaces`) and
    who reads each torso module's output: the core's input gates, or the heads."""
    reads_policy, reads_value, adds_policy = _head_readers(parts)
    if not module.core_spec.size:
        return None, {
            "torso": (*reads_policy, *reads_value),
            "policy_torso": reads_policy,
            "value_torso": reads_value,
        }
    gates = tuple(f"core/lstm/{g}" for g in LSTM_INPUT_GATES + LSTM_HIDDEN_GATES)
    hidden = tuple(Reader(f"core/lstm/{g}") for g in LSTM_HIDDEN_GATES)
    core = Space(gates, adds_policy, readers=(*hidden, *reads_policy, *reads_value))
    for g in gates:
        spaces[g] = Space((g,), refused=f"params/{g} is in the LSTM core: use widen_lstm")
    return core, {"torso": tuple(Reader(f"core/lstm/{g}") for g in LSTM_INPUT_GATES)}


def _torsos(module, names, torso_readers, parts, positions: int, blocks: dict):
    """Each torso module's graph ({"spaces", "torso"}), the space of the network's inputs and
    a CNN torso's image space."""
    _, _, adds_policy = _head_readers(parts)
    enc = module.encoders
    extra = (enc.text_size if enc.text_key else 0) + (enc.entity_size if enc.entity_key else 0)
    graphs, readers, image = {}, [], None
    for name in names:
        t_spaces, t_inputs, image, torso = module.torso_module(parent=None).graph(
            name, torso_readers[name], extra, positions, blocks.get(name)
        )
        if adds_policy and not module.core_spec.size and name != "value_torso" and torso.layers:
            last = t_spaces[torso.layers[-1]]
            t_spaces[torso.layers[-1]] = dataclasses.replace(
                last, residual=last.residual + adds_policy
            )
        if module.torso_spec.team_pool:
            last = torso.layers[-1]
            t_spaces[last] = Space(
                (last,),
                refused=f"network.team_pool={module.torso_spec.team_pool}: the heads read "
                f"params/{last}'s units and their pooled share across teammates; widening it "
                "would move the pooled features, which surgery does not do",
            )
        graphs[name] = {"spaces": t_spaces, "torso": torso}
        readers.append(t_inputs)
    inputs = Space(
        residual=tuple(r for s in readers for r in s.residual),
        readers=tuple(r for s in readers for r in s.readers),
    )
    return graphs, inputs, image
