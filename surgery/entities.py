"""Function-preserving surgery on entity encoders and what reads them (networks/entities.py).

The layers are found from the network's own EntityGraph (networks.entities.EntityEncoder.graph),
not from parameter names: the graph lists who writes and who reads the encoder's units.

* add_entity_attributes: F -> F' attributes per entity; the per-entity layer gets zero kernel rows
  for the new ones. Exact for any values of the new attributes (an entity's presence must not
  depend on them: padding rows stay all zero).
* widen_entities: D -> D' units of the encoder (per-entity layer, residual stream, attention
  features, MLP). Every layer writing the stream gets new output units (random weights from the
  old units, zero bias); every layer reading it gets zero rows for them (attention's query, key
  and value, the MLP, the pointer heads' keys, and the torso rows of the pooled features). The
  attention's per-head features grow from d = D/H to d' = D'/H: new query features are zero (so
  scores do not change) and new key and value features random, the value's new features are read
  by zero rows of the output projection, and the old query is scaled by sqrt(d'/d) to undo the
  change of the 1/sqrt(d) in the scores. Exact.
"""

from __future__ import annotations

import math

import numpy as np

from surgery.ops import (
    AxisMap,
    LeafMap,
    OpResult,
    ParamMap,
    SurgeryError,
    _std,
    as_path,
    flatten_params,
    generator,
    unflatten_params,
)


def _leaf(flat, layer: str, name: str):
    path = as_path(layer) + (name,)
    if path not in flat:
        raise SurgeryError(f"no parameter {'/'.join(path)}: the network's entity graph names it")
    return path, np.asarray(flat[path])


class _Edit:
    """New leaves built from LeafMaps, with random entries filled in where units are new."""

    def __init__(self, params):
        self.flat = flatten_params(params)
        self.out = dict(self.flat)
        self.maps: dict = {}

    def map(self, layer: str, name: str, axes: list[tuple[int, AxisMap]]):
        path, old = _leaf(self.out, layer, name)
        source = self.maps[path].source if path in self.maps else path
        earlier = self.maps[path].axes if path in self.maps else ()
        shape = list(old.shape)
        for axis, amap in axes:
            shape[axis] = amap.new_size
        leaf = LeafMap(source, tuple(shape), old.dtype.name, tuple(axes))
        self.out[path] = leaf.apply(old)
        self.maps[path] = LeafMap(source, tuple(shape), old.dtype.name, earlier + tuple(axes))
        return path

    def randomize(self, path, index, std: float, gen) -> None:
        """Draws the entries at `index` of leaf `path` from N(0, std^2)."""
        x = np.array(self.out[path])
        x[index] = gen.normal(0.0, std, x[index].shape)
        self.out[path] = x.astype(self.out[path].dtype)

    def result(self) -> OpResult:
        return OpResult(unflatten_params(self.out), ParamMap(dict(self.maps)))


def add_entity_attributes(params, graph, old: int, new: int) -> OpResult:
    """F = old -> new attributes per entity (appended after the old ones). Exact."""
    edit = _Edit(params)
    _, kernel = _leaf(edit.flat, graph.attributes, "kernel")
    if kernel.shape[0] != old or new < old:
        raise SurgeryError(
            f"{graph.attributes} reads {kernel.shape[0]} entity attributes, not {old}; "
            f"attributes can only grow ({old} -> {new})"
        )
    edit.map(graph.attributes, "kernel", [(0, AxisMap.append(old, new))])  # new rows zero
    return edit.result()


def widen_entities(params, graph, size: int, *, rng, init_scale: float = 0.1) -> OpResult:
    """The entity encoder's D units -> `size` (a multiple of the attention heads). Exact."""
    edit = _Edit(params)
    _, embed = _leaf(edit.flat, graph.stream_writers[0], "kernel")
    old, heads = embed.shape[-1], graph.heads
    if size < old or size % heads:
        raise SurgeryError(
            f"entity encoder: {old} -> {size} units; it can only grow, to a multiple of its "
            f"{heads} attention heads"
        )
    if size == old:
        return OpResult(params, ParamMap({}))
    stream = AxisMap.append(old, size)
    d_old, d_new = old // heads, size // heads
    gen = generator(rng)
    new_units = (Ellipsis, slice(old, size))  # the last axis

    # Writers: new output units read the old inputs through random weights; zero bias.
    for layer in graph.stream_writers:
        _, kernel = _leaf(edit.out, layer, "kernel")
        std = _std(kernel, init_scale)
        path = edit.map(layer, "kernel", [(kernel.ndim - 1, stream)])
        edit.randomize(path, new_units, std, gen)
        edit.map(layer, "bias", [(0, stream)])

    # Readers: zero rows for the new units.
    for layer in graph.stream_readers:
        edit.map(layer, "kernel", [(0, stream)])

    # Attention features per head d -> d'.
    att = graph.attention
    scale = math.sqrt(d_new / d_old)
    features = AxisMap.append(d_old, d_new)
    scaled = AxisMap.from_src(
        features.src,
        d_old,
        scale=np.where(features.src >= 0, scale, 1.0),
        grad_scale=np.where(features.src >= 0, 1.0 / scale, 1.0),
    )
    for name, amap, random in (("query", scaled, False), ("key", features, True),
                               ("value", features, True)):  # fmt: skip
        layer = f"{att}/{name}"
        _, kernel = _leaf(edit.out, layer, "kernel")  # [D', heads, d] (rows already grown)
        std = _std(kernel[:old], init_scale)
        path = edit.map(layer, "kernel", [(2, amap)])
        if random:
            edit.randomize(path, (slice(0, old), slice(None), slice(d_old, d_new)), std, gen)
        edit.map(layer, "bias", [(1, amap)])
    edit.map(f"{att}/out", "kernel", [(1, features)])  # new value features: zero rows

    # The pool joins the torso's inputs last: its rows are the last D of the first dense layer.
    for layer in graph.pooled_readers:
        _, kernel = _leaf(edit.out, layer, "kernel")
        rows = kernel.shape[0]
        src = np.concatenate([np.arange(rows), -np.ones(size - old, np.int64)])
        edit.map(layer, "kernel", [(0, AxisMap.from_src(src, rows))])
    return edit.result()
