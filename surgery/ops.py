"""Function-preserving transforms of seedlike parameter trees (Net2Net; OpenAI Five sec. 3.3, B).

Every op is a pure function `params -> OpResult`: the new parameter tree plus a `ParamMap` saying
where each entry of every changed leaf came from, so that optimizer moments (surgery/optimizer.py),
recurrent carries and action indices can follow the parameters.

Layers are named by module path ("params/policy_torso/dense_0"; the leading "params" may be
omitted). Which layers read, write or add into a layer's units comes from the network's layer
graph (networks/graph.py, `Network.layer_graph()`), never from the names themselves.

Widening a layer ("a space" of units) inserts entries into three kinds of slots: the layer's own
kernel columns and bias (UNIT: new entries random, or copies of existing units), the residual
writers of the same stream (RESIDUAL: new entries zero, or copies) and the readers' kernel rows
(READER: new entries zero, or the rows of a unit and its copies divided by the copy count).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from networks.graph import LayerGraph, Reader, Space

Path = tuple[str, ...]

UNIT, RESIDUAL, READER = "unit", "residual", "reader"
MODES = ("random", "replicate")
# Statistics an AxisMap can carry: parameters, Adam's first and second moments, plain indices.
KINDS = ("param", "first_moment", "second_moment", "index")


class SurgeryError(ValueError):
    """A surgery request that cannot be applied; the message names the layer and the shapes."""


# Paths and flat trees ----------------------------------------------------------------------------


def as_path(path: str | Sequence[str]) -> Path:
    """'params/policy_torso/dense_0', 'policy_torso/dense_0' or a tuple -> ('params', ...)."""
    parts = tuple(p for p in path.split("/") if p) if isinstance(path, str) else tuple(path)
    if not parts or parts[0] != "params":
        parts = ("params", *parts)
    return parts


def path_str(path: Sequence[str]) -> str:
    return "/".join(path)


def flatten_params(tree) -> dict[Path, object]:
    """Nested dicts -> {path tuple: leaf}."""
    out: dict[Path, object] = {}

    def visit(node, prefix):
        if isinstance(node, Mapping):
            for key, value in node.items():
                visit(value, (*prefix, str(key)))
        else:
            out[prefix] = node

    visit(tree, ())
    return out


def unflatten_params(flat: Mapping[Path, object]) -> dict:
    """{path tuple: leaf} -> nested dicts (keys sorted, as jax orders them anyway)."""
    root: dict = {}
    for path in sorted(flat):
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = flat[path]
    return root


def layer_paths(params) -> list[str]:
    """Every layer (module with a kernel) of a parameter tree, as 'params/...' strings."""
    return sorted(path_str(p[:-1]) for p in flatten_params(params) if p[-1] == "kernel")


# Maps --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class AxisMap:
    """How one axis of an array maps from the old array to the new one.

    New entry j is `scale[j] * old[src[j]]` if src[j] >= 0 and a new entry if src[j] == -1.
    Gradient-like statistics of entry j are `grad_scale[j]` times the old entry's (Adam's second
    moment gets grad_scale**2): a Net2Wider copy's incoming weights see 1/n of the old gradient
    because its readers' rows were divided by n, while the divided rows see the full gradient.

    Attributes:
      src: int64 [new_size], old index or -1.
      scale: float64 [new_size].
      grad_scale: float64 [new_size].
      old_size: length of the old axis.
    """

    src: np.ndarray
    scale: np.ndarray
    grad_scale: np.ndarray
    old_size: int

    @classmethod
    def from_src(cls, src, old_size: int, scale=None, grad_scale=None) -> AxisMap:
        src = np.asarray(src, np.int64)
        ones = np.ones(src.shape, np.float64)
        return cls(
            src=src,
            scale=ones if scale is None else np.asarray(scale, np.float64),
            grad_scale=ones if grad_scale is None else np.asarray(grad_scale, np.float64),
            old_size=int(old_size),
        )

    @classmethod
    def identity(cls, size: int) -> AxisMap:
        return cls.from_src(np.arange(size), size)

    @classmethod
    def append(cls, old_size: int, new_size: int) -> AxisMap:
        """Old entries first, then new_size - old_size new ones."""
        src = np.concatenate([np.arange(old_size), -np.ones(new_size - old_size, np.int64)])
        return cls.from_src(src, old_size)

    @property
    def new_size(self) -> int:
        return int(self.src.shape[0])

    @property
    def new_entries(self) -> np.ndarray:
        """Indices (in the new axis) of the entries that have no old source."""
        return np.flatnonzero(self.src < 0)

    @property
    def old_positions(self) -> np.ndarray:
        """For every old entry, the new index holding it unscaled first (its original slot)."""
        out = np.full(self.old_size, -1, np.int64)
        for j in range(self.new_size - 1, -1, -1):
            if self.src[j] >= 0:
                out[self.src[j]] = j
        return out

    def then(self, other: AxisMap) -> AxisMap:
        """This map followed by `other` (whose old axis is this map's new axis)."""
        if other.old_size != self.new_size:
            raise SurgeryError(f"cannot compose axis maps: {self.new_size} -> {other.old_size}")
        ok = other.src >= 0
        idx = np.where(ok, other.src, 0)
        return AxisMap(
            src=np.where(ok, self.src[idx], -1),
            scale=np.where(ok, self.scale[idx] * other.scale, other.scale),
            grad_scale=np.where(ok, self.grad_scale[idx] * other.grad_scale, other.grad_scale),
            old_size=self.old_size,
        )

    def factor(self, kind: str) -> np.ndarray:
        if kind == "param":
            return self.scale
        if kind == "first_moment":
            return self.grad_scale
        if kind == "second_moment":
            return self.grad_scale**2
        if kind == "index":
            return np.ones_like(self.scale)
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")

    def apply(self, x, axis: int = -1, kind: str = "param", fill: float = 0.0) -> np.ndarray:
        """Gathers x along `axis`; new entries get `fill`. x keeps its dtype."""
        x = np.asarray(x)
        axis = axis % x.ndim
        if x.shape[axis] != self.old_size:
            raise SurgeryError(
                f"axis {axis} of an array of shape {list(x.shape)} has {x.shape[axis]} entries, "
                f"the map expects {self.old_size}"
            )
        out = np.take(x, np.maximum(self.src, 0), axis=axis).astype(np.float64)
        bshape = [1] * x.ndim
        bshape[axis] = self.new_size
        out = out * self.factor(kind).reshape(bshape)
        out = np.where((self.src >= 0).reshape(bshape), out, fill)
        return out.astype(x.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class LeafMap:
    """Where one leaf of the new tree comes from.

    Attributes:
      source: path of the old leaf, or None for a new leaf (all entries new).
      shape: the new shape.
      dtype: dtype name of the new leaf.
      axes: (axis, AxisMap) for every axis that changes; other axes are kept.
    """

    source: Path | None
    shape: tuple[int, ...]
    dtype: str = "float32"
    axes: tuple[tuple[int, AxisMap], ...] = ()

    def apply(self, old, kind: str = "param") -> np.ndarray:
        if self.source is None:
            return np.zeros(self.shape, self.dtype)
        out = np.asarray(old)
        for axis, amap in self.axes:
            out = amap.apply(out, axis, kind)
        if tuple(out.shape) != tuple(self.shape):
            raise SurgeryError(
                f"{path_str(self.source)}: mapped shape {list(out.shape)} != {list(self.shape)}"
            )
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class ParamMap:
    """How an op maps a parameter tree: new leaf path -> LeafMap for every leaf that changed.

    Leaves not listed keep their path and values; `dropped` leaves are gone (moved elsewhere: a
    module renamed when action heads shift). The same map transforms any tree of the parameters'
    structure: the parameters themselves (without the random entries an op adds), or optimizer
    statistics (surgery/optimizer.py).
    """

    leaves: Mapping[Path, LeafMap] = dataclasses.field(default_factory=dict)
    dropped: frozenset = frozenset()

    def apply(self, tree, kind: str = "param") -> dict:
        flat = flatten_params(tree)
        out = {p: v for p, v in flat.items() if p not in self.dropped}
        for path, leaf_map in self.leaves.items():
            if leaf_map.source is not None and leaf_map.source not in flat:
                raise SurgeryError(f"{path_str(leaf_map.source)} is not in the tree")
            out[path] = leaf_map.apply(
                None if leaf_map.source is None else flat[leaf_map.source], kind
            )
        return unflatten_params(out)

    def then(self, other: ParamMap) -> ParamMap:
        """This map followed by `other` (which maps the tree this map produces)."""
        leaves = {p: lm for p, lm in self.leaves.items() if p not in other.dropped}
        for path, lm in other.leaves.items():
            first = self.leaves.get(lm.source) if lm.source is not None else None
            if lm.source is None or first is None:
                leaves[path] = lm
            elif first.source is None:
                leaves[path] = LeafMap(None, lm.shape, lm.dtype)
            else:
                leaves[path] = LeafMap(first.source, lm.shape, lm.dtype, first.axes + lm.axes)
        return ParamMap(leaves, (self.dropped | other.dropped) - frozenset(leaves))

    def describe(self) -> dict[str, str]:
        """'path' -> 'old shape -> new shape' (or 'new'), for logs and reports."""
        out = {}
        for path, lm in sorted(self.leaves.items()):
            if lm.source is None:
                out[path_str(path)] = f"new {list(lm.shape)}"
            else:
                moved = "" if lm.source == path else f" from {path_str(lm.source)}"
                olds = list(lm.shape)
                for axis, amap in reversed(lm.axes):
                    olds[axis] = amap.old_size
                out[path_str(path)] = f"{olds} -> {list(lm.shape)}{moved}"
        return out


@dataclasses.dataclass(frozen=True)
class ActionInfo:
    """What bringing new discrete actions in needs.

    With a zero kernel column the new action's logit is the constant `bias`, so its probability
    is exp(bias) / (Z(x) + exp(bias)); the old actions keep their logits. Masking the new actions
    (`legal_mask_old`) reproduces the old policy exactly: use it in the games that do not have
    the new action yet, and enable it in a growing fraction of games (`annealed_legal_mask`),
    OpenAI Five App. B.

    Attributes:
      num_actions_old, num_actions_new: sizes of the action spaces.
      new_actions: indices of the new actions in the new action space.
      bias: the new actions' logit.
      rule: how the bias was chosen: "given", "bound" (guaranteed for every input whose head
        features lie in [-feature_bound, feature_bound]) or "batch" (from a batch of logits).
      max_new_prob: upper bound on the total probability of the new actions (over every input
        for rule "bound", over the batch for "batch"; nan for "given").
      kl_bound: the matching bound on KL(old || new) = -log(1 - max_new_prob).
    """

    num_actions_old: int
    num_actions_new: int
    new_actions: tuple[int, ...]
    bias: float
    rule: str
    max_new_prob: float
    kl_bound: float

    @property
    def legal_mask_old(self) -> np.ndarray:
        """bool [num_actions_new]: True for the old actions, False for the new ones."""
        mask = np.ones(self.num_actions_new, bool)
        mask[list(self.new_actions)] = False
        return mask


def annealed_legal_mask(info: ActionInfo, fraction: float, rng, batch: int) -> np.ndarray:
    """bool [batch, num_actions_new]: the new actions are legal in a `fraction` of the rows.

    Draw one row per game at episode start and keep it for the episode, raising `fraction` from
    0 to 1 over training (OpenAI Five anneals new actions in from 0% to 100% of games).
    """
    enabled = generator(rng).uniform(size=batch) < fraction
    mask = np.tile(info.legal_mask_old, (batch, 1))
    mask[:, list(info.new_actions)] = enabled[:, None]
    return mask


@dataclasses.dataclass(frozen=True, eq=False)
class OpResult:
    """The result of one op.

    Attributes:
      params: the new parameter tree.
      param_map: how every changed leaf maps from the old tree.
      carry_map: LSTM units (last axis of the carry's c and h), if the op changed them.
      action_map: the logits axis, if the op changed the actions.
      action_info: see ActionInfo, for add_actions.
      exact: whether the op preserves the function exactly (up to float rounding).
      graph: the layer graph after the op, if the op changed the network's structure.
    """

    params: dict
    param_map: ParamMap
    carry_map: AxisMap | None = None
    action_map: AxisMap | None = None
    action_info: ActionInfo | None = None
    exact: bool = True
    graph: LayerGraph | None = None


def pad_carry(carry, carry_map: AxisMap | None):
    """Maps an LSTM carry (c, h), each [..., units], to the widened core (new units 0 or copies)."""
    if carry_map is None or carry == ():
        return carry
    return tuple(carry_map.apply(np.asarray(x), -1, "index") for x in carry)


# Network structure -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Slot:
    """One axis of one leaf that indexes the units being widened.

    The axis holds `offset` other entries (None: whatever precedes the units and `rest`), then
    `positions` blocks of the units (a flattened [H, W, C] feature map has H*W blocks of C), then
    `rest` other entries (None: any number).
    """

    path: Path
    axis: int
    role: str
    offset: int | None = 0
    positions: int = 1
    rest: int | None = 0


def _kernel(flat, layer: Path) -> np.ndarray:
    if layer + ("kernel",) not in flat:
        layers = sorted({path_str(p[:-1]) for p in flat if p[-1] == "kernel"})
        raise SurgeryError(f"no layer {path_str(layer)}; the network has {', '.join(layers)}")
    return np.asarray(flat[layer + ("kernel",)])


def _unit_slots(flat, layer: Path, role: str = UNIT, reader: Reader | None = None) -> list[_Slot]:
    kernel = _kernel(flat, layer)
    layout = {}
    if reader is not None:
        layout = dict(offset=reader.offset, positions=reader.positions, rest=reader.rest)
    slots = [_Slot(layer + ("kernel",), kernel.ndim - 1, role, **layout)]
    if layer + ("bias",) in flat:
        slots.append(_Slot(layer + ("bias",), 0, role, **layout))
    return slots


def _reader_slots(flat, reader: Reader) -> list[_Slot]:
    layer = as_path(reader.layer)
    kernel = _kernel(flat, layer)
    return [
        _Slot(
            layer + ("kernel",),
            kernel.ndim - 2,
            READER,
            offset=reader.offset,
            positions=reader.positions,
            rest=reader.rest,
        )
    ]


def space_slots(flat, space: Space) -> list[_Slot]:
    """Every slot indexing a space's units: writers (UNIT), residual layers, readers."""
    slots = []
    for layer in space.writers:
        slots += _unit_slots(flat, as_path(layer))
    for r in space.residual:
        slots += _unit_slots(flat, as_path(r.layer), RESIDUAL, r)
    for r in space.readers:
        slots += _reader_slots(flat, r)
    return slots


def _space_of(graph: LayerGraph, flat, layer: Path) -> Space:
    """The space `layer` writes, or a SurgeryError that says why it cannot be widened."""
    _kernel(flat, layer)
    space = graph.spaces.get(path_str(layer[1:]))
    if space is None:
        raise SurgeryError(
            f"{path_str(layer)} is not a layer surgery widens this way (the network's layer graph "
            "has no rule for it)"
        )
    if space.refused:
        raise SurgeryError(space.refused)
    return space


# The widening primitive --------------------------------------------------------------------------


def _slot_axis_map(slot: _Slot, space: AxisMap, counts: np.ndarray, length: int):
    """The AxisMap of one slot's axis, and Net2Wider group ids (-1: not in a copied group)."""
    d = space.old_size
    if slot.offset is None:  # counted from the end
        slot = dataclasses.replace(slot, offset=max(length - slot.positions * d - slot.rest, 0))
    rest = length - slot.offset - slot.positions * d
    if rest < 0 or (slot.rest is not None and rest != slot.rest):
        want = slot.offset + slot.positions * d + (slot.rest or 0)
        raise SurgeryError(
            f"{path_str(slot.path)} has {length} entries on axis {slot.axis}, expected {want} "
            f"({slot.positions} x {d} units"
            + (f" after {slot.offset} others" if slot.offset else "")
            + (f" and {slot.rest} others after them" if slot.rest else "")
            + "): the layer does not match the network being widened"
        )
    n = np.where(space.src >= 0, counts[np.maximum(space.src, 0)], 1).astype(np.float64)
    if slot.role == READER:
        scale, grad = 1.0 / n, np.ones_like(n)
    else:
        scale, grad = np.ones_like(n), 1.0 / n
    srcs = [np.arange(slot.offset)]
    scales, grads, groups = [np.ones(slot.offset)], [np.ones(slot.offset)], [-np.ones(slot.offset)]
    for p in range(slot.positions):
        base = slot.offset + p * d
        srcs.append(np.where(space.src >= 0, base + space.src, -1))
        scales.append(scale)
        grads.append(grad)
        copied = n > 1
        groups.append(np.where(copied, p * d + np.maximum(space.src, 0), -1))
    tail = np.arange(slot.offset + slot.positions * d, length)
    srcs.append(tail)
    scales.append(np.ones(len(tail)))
    grads.append(np.ones(len(tail)))
    groups.append(-np.ones(len(tail)))
    amap = AxisMap.from_src(
        np.concatenate(srcs), length, np.concatenate(scales), np.concatenate(grads)
    )
    return amap, np.concatenate(groups).astype(np.int64)


def _std(old: np.ndarray, scale: float) -> float:
    """`scale` times the RMS of the existing entries (1/sqrt(fan in) if they are all zero)."""
    rms = float(np.sqrt(np.mean(np.square(old.astype(np.float64))))) if old.size else 0.0
    if rms == 0.0:
        rms = 1.0 / math.sqrt(max(int(np.prod(old.shape[:-1])), 1))
    return scale * rms


def generator(rng) -> np.random.Generator:
    """A numpy Generator from a jax PRNG key, an int seed or a Generator (returned as is).

    Surgery runs once, offline, on the host: numpy avoids compiling a jax kernel per shape.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, int | np.integer):
        return np.random.default_rng(int(rng))
    if jax.dtypes.issubdtype(getattr(rng, "dtype", None), jax.dtypes.prng_key):
        rng = jax.random.key_data(rng)
    return np.random.default_rng(np.asarray(rng, np.uint32).ravel().tolist())


def _fill_leaf(new, old, slots, axis_maps, groups, rng, init_scale, reader_noise, copy_noise):
    """Adds random values to the new entries of one leaf (see _widen_space)."""
    shape = new.shape
    is_new = {UNIT: np.zeros(shape, bool), RESIDUAL: np.zeros(shape, bool)}
    reader_new = np.zeros(shape, bool)
    for slot, amap in zip(slots, axis_maps):
        bshape = [1] * len(shape)
        bshape[slot.axis] = amap.new_size
        entry_new = np.broadcast_to((amap.src < 0).reshape(bshape), shape)
        if slot.role == READER:
            reader_new |= entry_new
        else:
            is_new[slot.role] |= entry_new
    out = new.astype(np.float64)
    # New units' incoming weights are random (symmetry breaking); their biases, and residual
    # writers into new stream entries, start at zero.
    if slots[0].path[-1] == "kernel" and is_new[UNIT].any():
        out = np.where(is_new[UNIT], _std(old, init_scale) * rng.standard_normal(shape), out)
    reader_only = reader_new & ~is_new[UNIT] & ~is_new[RESIDUAL]
    if reader_noise > 0 and reader_only.any():
        out = np.where(reader_only, _std(old, reader_noise) * rng.standard_normal(shape), out)
    if copy_noise > 0:
        for slot, group in zip(slots, groups):
            if slot.role != READER or not (group >= 0).any():
                continue
            # Noise whose mean over each group (a unit and its copies) is zero: the copies have
            # identical activations, so their readers' sum is unchanged and the copies diverge.
            eps = np.moveaxis(_std(old, copy_noise) * rng.standard_normal(shape), slot.axis, 0)
            valid = group >= 0
            ids, inverse = np.unique(group[valid], return_inverse=True)
            sums = np.zeros((len(ids),) + eps.shape[1:])
            np.add.at(sums, inverse, eps[valid])
            counts = np.bincount(inverse).reshape((-1,) + (1,) * (eps.ndim - 1))
            eps[valid] -= (sums / counts)[inverse]
            eps[~valid] = 0.0
            out = out + np.moveaxis(eps, 0, slot.axis)
    return out.astype(new.dtype)


def _widen_space(
    params, slots, space: AxisMap, rng, init_scale=0.1, reader_noise=0.0, copy_noise=0.0
) -> tuple[dict, ParamMap]:
    """Inserts the entries `space` describes into every slot; returns (params, ParamMap).

    Copied entries take their source entry times the slot's scale; new entries are filled:
    UNIT kernels N(0, (init_scale * rms)^2), UNIT biases and RESIDUAL entries 0, READER entries 0
    (or N(0, (reader_noise * rms)^2)); READER rows of copied groups get copy_noise-scaled noise
    that sums to zero over each group.
    """
    rng = generator(rng)
    flat = flatten_params(params)
    counts = np.bincount(space.src[space.src >= 0], minlength=max(space.old_size, 1))
    by_leaf: dict[Path, list[_Slot]] = {}
    for slot in slots:
        by_leaf.setdefault(slot.path, []).append(slot)
    out = dict(flat)
    leaves = {}
    for path, leaf_slots in sorted(by_leaf.items()):
        old = np.asarray(flat[path])
        maps, groups = [], []
        shape = list(old.shape)
        for slot in leaf_slots:
            amap, group = _slot_axis_map(slot, space, counts, old.shape[slot.axis])
            maps.append(amap)
            groups.append(group)
            shape[slot.axis] = amap.new_size
        axes = tuple((s.axis, m) for s, m in zip(leaf_slots, maps))
        leaf_map = LeafMap(path, tuple(shape), old.dtype.name, axes)
        new = leaf_map.apply(old, "param")
        out[path] = _fill_leaf(
            new, old, leaf_slots, maps, groups, rng, init_scale, reader_noise, copy_noise
        )
        leaves[path] = leaf_map
    return unflatten_params(out), ParamMap(leaves)


def _space_map(old: int, new: int, mode: str, rng, what: str) -> AxisMap:
    if new < old:
        raise SurgeryError(f"{what} would shrink from {old} to {new}; surgery only adds units")
    if mode not in MODES:
        raise SurgeryError(f"{what}: mode={mode!r} is not one of {list(MODES)}")
    if mode == "random" or new == old:
        return AxisMap.append(old, new)
    if old == 0:
        raise SurgeryError(f"{what} has no units to replicate")
    copies = generator(rng).choice(old, new - old, replace=new - old > old)
    return AxisMap.from_src(np.concatenate([np.arange(old), copies]), old)


# Ops ---------------------------------------------------------------------------------------------


def _widen_layer(params, graph, path, size, rng, mode, init_scale, noise, ndim, what):
    layer = as_path(path)
    flat = flatten_params(params)
    kernel = _kernel(flat, layer)
    if kernel.ndim != ndim:
        raise SurgeryError(
            f"{path_str(layer)} has a kernel of shape {list(kernel.shape)}, not a {what} layer"
        )
    space = _space_of(graph, flat, layer)
    rng = generator(rng)
    old = kernel.shape[-1]
    copy_noise = noise if mode == "replicate" else 0.0
    units = _space_map(old, int(size), mode, rng, path_str(layer))
    params, pmap = _widen_space(
        params, space_slots(flat, space), units, rng, init_scale, 0.0, copy_noise
    )
    for inner in space.tied:
        # The block's inner layer had the stream width; it keeps it (new units exact as usual).
        flat = flatten_params(params)
        inner_units = _space_map(old, int(size), mode, rng, inner)
        inner_slots = space_slots(flat, _space_of(graph, flat, as_path(inner)))
        params, inner_map = _widen_space(
            params, inner_slots, inner_units, rng, init_scale, 0.0, copy_noise
        )
        pmap = pmap.then(inner_map)
    return OpResult(params, pmap)


def widen_dense(
    params,
    path,
    width: int,
    *,
    graph: LayerGraph,
    rng,
    mode: str = "random",
    init_scale: float = 0.1,
    noise: float = 1e-2,
) -> OpResult:
    """Widens a Dense layer of a torso to `width` units; exact.

    mode="random": new units' incoming weights ~ N(0, (init_scale * rms(kernel))^2), biases 0,
    every reader's rows for them 0 (Net2Net / OpenAI Five eq. 6). mode="replicate": Net2Wider,
    new units copy randomly chosen units, the readers' rows of a unit and its n-1 copies are
    divided by n, plus zero-sum noise (`noise` * rms of the reader) across the copies' rows.

    Args:
      params: a Flax parameter tree {"params": ...}.
      path: the layer, e.g. "params/policy_torso/dense_1" or "torso/dense_0".
      width: new number of units (>= the current one).
      graph: the network's layer graph (Network.layer_graph()): who reads the layer's units.
      rng: a jax PRNG key, an int seed or a numpy Generator.
    """
    return _widen_layer(params, graph, path, width, rng, mode, init_scale, noise, 2, "Dense")


def widen_conv(
    params,
    path,
    channels: int,
    *,
    graph: LayerGraph,
    rng,
    mode: str = "random",
    init_scale: float = 0.1,
    noise: float = 1e-2,
) -> OpResult:
    """Widens a conv layer of a CNN torso to `channels` filters; exact. Modes as widen_dense.

    New filters are random; the next conv's input channels for them are 0. For the last conv
    (Nature conv_2, the last IMPALA stack) the readers are dense_0's rows, laid out (h, w, c)
    over the H*W positions the layer graph gives.
    """
    return _widen_layer(params, graph, path, channels, rng, mode, init_scale, noise, 4, "conv")


def widen_lstm(
    params,
    size: int,
    *,
    graph: LayerGraph,
    rng,
    mode: str = "random",
    noise: float = 0.0,
    init_scale: float = 0.1,
) -> OpResult:
    """Widens the LSTM core to `size` units, gate by gate; returns the carry map too.

    The input kernels ii/if/ig/io and recurrent hi/hf/hg/ho get new columns (random at
    init_scale * rms) and the recurrent kernels new rows; biases get zeros; the heads' rows for
    the new units are 0; the carry (c, h) is padded with zeros.

    noise=0 (exact): the new recurrent rows into old units are 0, so old units never see the new
    h and the function is unchanged. noise>0 (OpenAI Five App. B, where exactness is not
    achievable for a trained network): those rows and the heads' new rows are N(0, (noise *
    rms)^2); the error grows with noise (surgery.verify measures it). mode="replicate" copies
    units instead (exact; noise is then zero-sum symmetry-breaking noise on the copies' rows).
    """
    flat = flatten_params(params)
    if graph.core is None:
        raise SurgeryError("the network has no LSTM core (network.core) to widen")
    old = _kernel(flat, as_path(graph.core.writers[0])).shape[-1]
    slots = space_slots(flat, graph.core)
    rng = generator(rng)
    space = _space_map(old, int(size), mode, rng, "params/core")
    replicate = mode == "replicate"
    new, pmap = _widen_space(
        params,
        slots,
        space,
        rng,
        init_scale=init_scale,
        reader_noise=0.0 if replicate else noise,
        copy_noise=noise if replicate else 0.0,
    )
    exact = replicate or noise == 0.0 or space.new_size == space.old_size
    return OpResult(new, pmap, carry_map=space, exact=exact)


def _feature_src(old_shapes, new_shapes) -> tuple[np.ndarray, int]:
    """Index map of the flattened, sorted-key concatenation of observations (torsos.py)."""
    removed = sorted(set(old_shapes) - set(new_shapes))
    if removed:
        raise SurgeryError(
            f"observation keys {removed} would be removed; surgery only adds features (keep "
            "deprecated observations and feed constants, OpenAI Five App. B)"
        )
    offsets, pos = {}, 0
    for key in sorted(old_shapes):
        offsets[key] = pos
        pos += int(np.prod(old_shapes[key], dtype=np.int64))
    parts = []
    for key in sorted(new_shapes):
        new_shape = tuple(int(d) for d in new_shapes[key])
        if key not in old_shapes:
            parts.append(np.full(int(np.prod(new_shape, dtype=np.int64)), -1))
            continue
        old_shape = tuple(int(d) for d in old_shapes[key])
        if len(old_shape) != len(new_shape) or any(o > n for o, n in zip(old_shape, new_shape)):
            raise SurgeryError(
                f"observation {key!r} changes from {list(old_shape)} to {list(new_shape)}; "
                "only growing each dimension (new entries after the old ones) is supported"
            )
        index = np.full(new_shape, -1, np.int64)
        index[tuple(slice(0, o) for o in old_shape)] = (
            np.arange(int(np.prod(old_shape, dtype=np.int64))).reshape(old_shape) + offsets[key]
        )
        parts.append(index.ravel())
    src = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return src, pos


def add_input_features(
    params,
    old_shapes: Mapping[str, Sequence[int]],
    new_shapes: Mapping[str, Sequence[int]],
    *,
    graph: LayerGraph,
    image_key: str | None = None,
) -> OpResult:
    """Adds observation features: zero rows in the first layer's kernel at their positions. Exact.

    MLP inputs are the observations flattened and concatenated in sorted key order
    (torsos.flatten_features), so a new key's rows go between its neighbours' and a grown key's
    new entries interleave with its old ones (the old array sits at the origin of the new one).
    CNN torsos: the non-image keys follow the conv features in dense_0's rows; new image channels
    (image_key, shapes [H, W, C]) get zero input channels in the first conv. The layer graph says
    which kernels read the features (graph.inputs, graph.image).

    Args:
      params: a Flax parameter tree.
      old_shapes, new_shapes: observation key -> per-row shape; keys may be added, never removed.
      graph: the network's layer graph.
      image_key: the image observation of a CNN torso (None for MLP torsos).
    """
    old_shapes, new_shapes = dict(old_shapes), dict(new_shapes)
    maps: dict[Path, LeafMap] = {}
    if graph.image is not None:
        if image_key is None:
            raise SurgeryError("a CNN torso needs image_key to add observations")
        if image_key not in old_shapes or image_key not in new_shapes:
            raise SurgeryError(f"image observation {image_key!r} must be in old and new shapes")
        old_img, new_img = tuple(old_shapes.pop(image_key)), tuple(new_shapes.pop(image_key))
        if old_img != new_img:
            if len(old_img) != 3 or old_img[:2] != new_img[:2] or new_img[2] < old_img[2]:
                raise SurgeryError(
                    f"image {image_key!r} changes from {list(old_img)} to {list(new_img)} "
                    "([H, W, C]); only adding channels is supported"
                )
            channels = AxisMap.append(old_img[2], new_img[2])
            slots = space_slots(flatten_params(params), graph.image)
            params, pmap = _widen_space(params, slots, channels, 0)
            maps.update(pmap.leaves)
    src, old_size = _feature_src(old_shapes, new_shapes)
    if len(src) == old_size and (src == np.arange(old_size)).all():
        return OpResult(params, ParamMap(maps))
    try:
        slots = space_slots(flatten_params(params), graph.inputs)
        params, pmap = _widen_space(params, slots, AxisMap.from_src(src, old_size), 0)
    except SurgeryError as e:
        raise SurgeryError(
            f"{e}; observations {old_shapes} flatten to {old_size} features"
        ) from None
    maps.update(pmap.leaves)
    return OpResult(params, ParamMap(maps))


def extend_obs_norm(obs_norm: Mapping, template: Mapping) -> dict:
    """Observation normalizer statistics for the new observations.

    Old statistics are kept (embedded at the origin of a grown key, count unchanged); new
    features get mean 0, var 1. Keys only in `template` (the new network's init_obs_norm()) start
    from it, with count 0, so their first batch sets their statistics from real data.
    """
    removed = sorted(set(obs_norm) - set(template))
    if removed:
        raise SurgeryError(f"normalizer statistics for {removed} have no place in the new network")
    out = {}
    for key, fresh in template.items():
        if key not in obs_norm:
            out[key] = fresh
            continue
        old = obs_norm[key]
        shape = np.shape(fresh.mean)
        if np.ndim(old.mean) != len(shape) or any(o > n for o, n in zip(np.shape(old.mean), shape)):
            raise SurgeryError(
                f"normalizer statistics of {key!r} change from {list(np.shape(old.mean))} to "
                f"{list(shape)}; only growing is supported"
            )
        window = tuple(slice(0, o) for o in np.shape(old.mean))
        mean = np.zeros(shape, np.asarray(old.mean).dtype)
        var = np.ones(shape, np.asarray(old.var).dtype)
        mean[window], var[window] = np.asarray(old.mean), np.asarray(old.var)
        out[key] = old.replace(mean=mean, var=var, count=np.asarray(old.count))
    return out


def _head_columns(graph: LayerGraph, head: int) -> tuple[int, int]:
    """(first column in the dense policy head, first column in the logits) of action head `head`
    (pointer heads have no dense columns; the logits hold every head side by side)."""
    sizes = graph.head_sizes
    dense = sum(n for j, n in enumerate(sizes[:head]) if j not in graph.pointer_heads)
    return dense, sum(sizes[:head])


def _insert(total: int, start: int, inner: AxisMap) -> AxisMap:
    """An AxisMap of `total` entries that applies `inner` to those from `start` on."""
    src = np.arange(total)
    inner_src = np.where(inner.src >= 0, inner.src + start, -1)
    tail = src[start + inner.old_size :]
    return AxisMap.from_src(np.concatenate([src[:start], inner_src, tail]), total)


def _policy_head(graph: LayerGraph, flat, what: str) -> tuple[Path, np.ndarray, np.ndarray]:
    if not graph.policy_head:
        raise SurgeryError(f"{what}: every action head is a pointer head; there is no dense head")
    path = as_path(graph.policy_head)
    return path, _kernel(flat, path), np.asarray(flat[path + ("bias",)])


def _new_head_columns(flat, head_path, kernel, bias_leaf, dense_map, fill_bias) -> tuple:
    """The policy head's kernel and bias with new columns (zero kernel, `fill_bias` bias)."""
    kernel_map = LeafMap(
        head_path + ("kernel",),
        (kernel.shape[0], dense_map.new_size),
        kernel.dtype.name,
        ((1, dense_map),),
    )
    bias_map = LeafMap(
        head_path + ("bias",), (dense_map.new_size,), bias_leaf.dtype.name, ((0, dense_map),)
    )
    out = dict(flat)
    out[head_path + ("kernel",)] = kernel_map.apply(kernel)
    bias = dense_map.apply(bias_leaf, 0, fill=0.0)
    bias[dense_map.new_entries] = np.asarray(fill_bias, bias.dtype)
    out[head_path + ("bias",)] = bias
    pmap = ParamMap({head_path + ("kernel",): kernel_map, head_path + ("bias",): bias_map})
    return unflatten_params(out), pmap


def add_actions(
    params,
    num_new: int = 1,
    *,
    graph: LayerGraph,
    head: int = 0,
    positions: Sequence[int] | None = None,
    bias: float | None = None,
    tolerance: float = 1e-6,
    feature_bound: float | None = None,
    logits=None,
) -> OpResult:
    """Adds choices to an action head: zero kernel columns in the policy head, a constant bias.

    With a zero column the new logit is the constant b, so KL(old || new) = log(1 + k e^b / Z(x))
    (k new choices, Z(x) the head's old partition function) is not constant over inputs; b is
    chosen so that the new choices' total probability stays below `tolerance` (then KL <=
    tolerance):
      bias given:     used as is;
      feature_bound:  guaranteed for every input whose head features lie in [-B, B] (tanh MLP,
                      LSTM h: B = 1), via log Z(x) >= max_a (c_a - B * ||W[:, a]||_1);
      logits:         from the smallest log Z over a batch of old logits [N, A] (holds on that
                      batch only; surgery.verify reports the achieved KL on its batch).
    The old choices' logits are unchanged; mask the new ones (ActionInfo.legal_mask_old) to keep
    the old policy exactly and anneal them in (annealed_legal_mask). A factorized action's other
    heads are untouched (the KL of the joint action is this head's).

    Args:
      graph: the network's layer graph (its policy head and the action heads' sizes).
      head: which action head of a factorized action (0 for a single categorical).
      positions: indices of the new choices among the head's new choices (default: appended).
    """
    flat = flatten_params(params)
    sizes = graph.head_sizes
    if not 0 <= head < len(sizes):
        raise SurgeryError(f"head={head}: the network has {len(sizes)} action heads {sizes}")
    if head in graph.pointer_heads:
        raise SurgeryError(
            f"action head {head} is a pointer head ({graph.pointer_heads[head]}): its choices are "
            "the entity slots; give the env more entity slots instead"
        )
    head_path, kernel, bias_leaf = _policy_head(graph, flat, "add_actions")
    where = f"{path_str(head_path)} (action head {head})"
    if num_new < 1:
        raise SurgeryError(f"{where}: num_new={num_new} must be >= 1")
    a_old = int(sizes[head])
    a_new = a_old + int(num_new)
    if positions is None:
        positions = list(range(a_old, a_new))
    positions = sorted(int(p) for p in positions)
    if (
        len(positions) != num_new
        or len(set(positions)) != num_new
        or not all(0 <= p < a_new for p in positions)
    ):
        raise SurgeryError(f"positions {positions} must be {num_new} distinct indices < {a_new}")
    src = np.full(a_new, -1, np.int64)
    src[np.setdiff1d(np.arange(a_new), positions)] = np.arange(a_old)
    head_map = AxisMap.from_src(src, a_old)
    dense_start, logit_start = _head_columns(graph, head)
    cols = slice(dense_start, dense_start + a_old)
    if bias is not None:
        rule, log_z = "given", None
    elif feature_bound is not None:
        rule = "bound"
        log_z = _bounded_log_z(flat, graph, head, kernel[:, cols], bias_leaf[cols], feature_bound)
    elif logits is not None:
        logits = np.asarray(logits, np.float64)
        if logits.shape[-1] != sum(sizes):
            raise SurgeryError(f"logits have {logits.shape[-1]} columns, the heads {sum(sizes)}")
        own = logits.reshape(-1, sum(sizes))[:, logit_start : logit_start + a_old]
        rule, log_z = "batch", float(np.min(_logsumexp(own)))
    else:
        raise SurgeryError("add_actions needs bias, feature_bound or a batch of logits")
    max_prob = kl = float("nan")
    if log_z is not None:
        bias, max_prob, kl = _new_action_bias(log_z, float(num_new), tolerance)
    dense_map = _insert(kernel.shape[1], dense_start, head_map)
    logit_map = _insert(sum(sizes), logit_start, head_map)
    info = ActionInfo(
        num_actions_old=logit_map.old_size,
        num_actions_new=logit_map.new_size,
        new_actions=tuple(int(p) for p in logit_map.new_entries),
        bias=float(bias),
        rule=rule,
        max_new_prob=max_prob,
        kl_bound=kl,
    )
    new, pmap = _new_head_columns(flat, head_path, kernel, bias_leaf, dense_map, bias)
    if head in graph.conditioning:  # the later heads read zero for the new choices
        table = as_path(graph.conditioning[head]) + ("kernel",)
        rows = np.asarray(flat[table])
        leaf = LeafMap(table, (head_map.new_size, rows.shape[1]), rows.dtype.name, ((0, head_map),))
        new = flatten_params(new)
        new[table] = leaf.apply(rows)
        new, pmap = unflatten_params(new), pmap.then(ParamMap({table: leaf}))
    return OpResult(new, pmap, action_map=logit_map, action_info=info)


def _bounded_log_z(flat, graph: LayerGraph, head: int, kernel, bias, feature_bound) -> float:
    """A lower bound on log Z(x), the head's old partition function, over every input whose head
    features lie in [-B, B]: log Z(x) >= max_a (c_a - B * ||W[:, a]||_1). Autoregressive heads
    read h + sum_{j < head} T_j[a_j]: each feature is bounded by B plus the largest |entry| of
    each table in its column."""
    bound = np.full(kernel.shape[0], float(feature_bound))
    for j, layer in graph.conditioning.items():
        if j < head:
            table = np.abs(np.asarray(flat[(*as_path(layer), "kernel")], np.float64))
            bound = bound + table.max(axis=0)
    w = np.abs(np.asarray(kernel, np.float64))
    return float(np.max(np.asarray(bias, np.float64) - bound @ w))


def _new_action_bias(log_z: float, k: float, tolerance: float) -> tuple[float, float, float]:
    """(bias, the k new choices' largest total probability, the KL bound) for new choices whose
    total probability keeps KL(old || new) <= tolerance where log Z >= log_z."""
    # The largest new-choice probability with KL <= tolerance, a hair lower against rounding.
    target = -math.expm1(-tolerance) * (1.0 - 1e-6)
    bias = log_z + math.log(target / k)
    max_prob = min(k * math.exp(bias - log_z), 1.0)
    kl = -math.log1p(-max_prob) if max_prob < 1.0 else float("inf")
    return bias, max_prob, kl


def add_q_actions(
    params, num_new: int = 1, *, num_actions: int, atoms: int = 1, dueling: bool = False,
    value_range=(-10.0, 10.0), value: float = 0.0,
) -> OpResult:  # fmt: skip
    """Appends actions to a Q head (networks.heads.QHead) with the old actions' values exact.

    Plain head: zero kernel columns and a bias that makes each new action's value `value` for
    every input (with atoms, a distribution on the two atoms around it whose mean is `value`).
    Dueling head: Q = V + A - mean A, so any new advantage column but the old columns' mean
    would move every old action's value through the mean; the new columns are that mean (kernel
    and bias, atom by atom), and each new action's value is the state value V(s) (`value` is
    not used).
    """
    if num_new < 1:
        raise SurgeryError(f"add_actions: num_new={num_new} must be >= 1")
    flat = flatten_params(params)
    layer = ("params", "policy_head", "advantage" if dueling else "q")
    kernel, bias = _kernel(flat, layer), np.asarray(flat[layer + ("bias",)])
    k, a_old = int(atoms), int(num_actions)
    if kernel.shape[1] != a_old * k:
        raise SurgeryError(
            f"{path_str(layer)} has {kernel.shape[1]} outputs, not {a_old} actions x {k} atoms"
        )
    a_new = a_old + int(num_new)
    head_map = AxisMap.append(a_old, a_new)
    src = np.where(head_map.src[:, None] >= 0, head_map.src[:, None] * k + np.arange(k), -1)
    columns = AxisMap.from_src(src.reshape(-1), a_old * k)
    new, pmap = _new_head_columns(flat, layer, kernel, bias, columns, 0.0)
    new = flatten_params(new)
    fresh = columns.new_entries
    if dueling:
        mean_k = kernel.reshape(kernel.shape[0], a_old, k).mean(axis=1)
        mean_b = bias.reshape(a_old, k).mean(axis=0)
        new[layer + ("kernel",)][:, fresh] = np.tile(mean_k, (1, int(num_new)))
        new[layer + ("bias",)][fresh] = np.tile(mean_b, int(num_new))
        start = float("nan")
    else:
        if k == 1:
            logits = np.array([value], np.float64)
        else:
            support = np.linspace(float(value_range[0]), float(value_range[1]), k)
            z = float(np.clip(value, support[0], support[-1]))
            weight = np.clip(1.0 - np.abs(z - support) / (support[1] - support[0]), 0.0, 1.0)
            # A finite stand-in for log 0, as heads.MASKED_LOGIT: the mean is `value` to ~1e-9.
            logits = np.log(np.maximum(weight, 1e-12))
        new[layer + ("bias",)][fresh] = np.tile(logits, int(num_new)).astype(bias.dtype)
        start = float(value)
    info = ActionInfo(
        num_actions_old=a_old,
        num_actions_new=a_new,
        new_actions=tuple(int(p) for p in head_map.new_entries),
        bias=start,
        rule="q_value" if not dueling else "q_state_value",
        max_new_prob=float("nan"),
        kl_bound=float("nan"),
    )
    return OpResult(unflatten_params(new), pmap, action_map=head_map, action_info=info)


def add_action_dims(params, num_new: int = 1, *, graph: LayerGraph, mean=0.0, std=1.0):
    """Adds continuous action dimensions to a Gaussian head: zero kernel columns in its mean
    layer with bias `mean`, and log-std log(`std`) (a new entry of the log-std vector, or zero
    kernel columns with that bias in a state-dependent log-std layer). The old dimensions' means
    and stds do not change, so their distribution is exactly the old one, and each new dimension
    is N(mean, std^2) for every input, independent of the others (appended after the old ones).
    """
    if not graph.gaussian:
        raise SurgeryError(
            "add_action_dims: the network has no Gaussian head (no continuous action)"
        )
    if num_new < 1 or not std > 0:
        raise SurgeryError(f"add_action_dims: num_new={num_new} must be >= 1 and std={std} > 0")
    flat = flatten_params(params)
    mean_path = as_path(graph.gaussian[0])
    kernel = _kernel(flat, mean_path)
    dims = kernel.shape[1]
    grow = AxisMap.append(dims, dims + int(num_new))
    new, pmap = _new_head_columns(flat, mean_path, kernel, flat[mean_path + ("bias",)], grow, mean)
    new = flatten_params(new)
    if len(graph.gaussian) > 1:  # a state-dependent log-std layer
        path = as_path(graph.gaussian[1])
        bias = flat[path + ("bias",)]
        more, more_map = _new_head_columns(
            new, path, _kernel(flat, path), bias, grow, math.log(std)
        )
        new, pmap = flatten_params(more), pmap.then(more_map)
    else:
        path = mean_path[:-1] + ("log_std",)
        vector = np.asarray(flat[path])
        leaf = LeafMap(path, (grow.new_size,), vector.dtype.name, ((0, grow),))
        grown = leaf.apply(vector)
        grown[grow.new_entries] = np.asarray(math.log(std), grown.dtype)
        new[path] = grown
        pmap = pmap.then(ParamMap({path: leaf}))
    return OpResult(unflatten_params(new), pmap)


def add_action_head(
    params,
    size: int,
    *,
    graph: LayerGraph,
    index: int | None = None,
    bias: float | None = None,
    tolerance: float = 1e-6,
) -> OpResult:
    """Inserts a new argument (action head) of `size` choices; choice 0 means what the env did
    before the argument existed.

    The head's kernel columns are zero, its choice 0 has bias 0 and the others bias b, so for
    every input the new choices' probability is k e^b / (1 + k e^b) (k = size - 1): b is set
    so that it is below `tolerance`, and KL(old || new) = log(1 + k e^b) <= tolerance for every
    input, whatever the features. Mask choices 1.. (ActionInfo.legal_mask_old) to keep the old
    policy exactly and anneal them in. Action ids change (one more mixed-radix digit); the old
    action with arguments (d_1, ..., d_H) is the new one with a 0 inserted at `index`.

    Args:
      size: the new head's choices (>= 2).
      index: its position among the heads (default: last).
    """
    flat = flatten_params(params)
    sizes = graph.head_sizes
    index = len(sizes) if index is None else int(index)
    if not 0 <= index <= len(sizes):
        raise SurgeryError(f"index={index} must be in [0, {len(sizes)}] (heads {sizes})")
    if int(size) < 2:
        raise SurgeryError(f"a new action head needs at least 2 choices, not {size}")
    head_path, kernel, bias_leaf = _policy_head(graph, flat, "add_action_head")
    k = int(size) - 1
    target = -math.expm1(-tolerance) * (1.0 - 1e-6)
    rule = "given" if bias is not None else "new head"
    if bias is None:
        bias = math.log(target / (k * (1.0 - target)))
    max_prob = k * math.exp(bias) / (1.0 + k * math.exp(bias))
    kl = math.log1p(k * math.exp(bias))
    dense_start, logit_start = _head_columns(graph, index)
    inserted = AxisMap.from_src(np.full(int(size), -1), 0)
    dense_map = _insert(kernel.shape[1], dense_start, inserted)
    logit_map = _insert(sum(sizes), logit_start, inserted)
    fill = np.full(int(size), bias)
    fill[0] = 0.0
    info = ActionInfo(
        num_actions_old=logit_map.old_size,
        num_actions_new=logit_map.new_size,
        new_actions=tuple(range(logit_start + 1, logit_start + int(size))),
        bias=float(bias),
        rule=rule,
        max_new_prob=max_prob,
        kl_bound=kl,
    )
    new, pmap = _new_head_columns(flat, head_path, kernel, bias_leaf, dense_map, fill)
    # Heads after the new one move up an index: their pointer modules and conditioning tables
    # with them. A head that a later head now reads, and had no table, gets a zero one.
    new_sizes = (*sizes[:index], int(size), *sizes[index:])
    moved = {j: j + (j >= index) for j in range(len(sizes))}
    pointers = tuple(moved[j] for j in graph.pointer_heads)
    after = graph.with_module(action_heads=new_sizes, pointer_heads=pointers)
    renames = {
        as_path(graph.pointer_heads[j]): as_path(after.pointer_heads[moved[j]])
        for j in graph.pointer_heads
    }
    renames.update(
        (as_path(graph.conditioning[j]), as_path(after.conditioning[moved[j]]))
        for j in graph.conditioning
    )
    had_table = {moved[j] for j in graph.conditioning}
    tables = {
        as_path(layer) + ("kernel",): np.zeros((new_sizes[k], kernel.shape[0]), kernel.dtype)
        for k, layer in after.conditioning.items()
        if k not in had_table
    }
    flat = flatten_params(new)
    renames = {src: dst for src, dst in renames.items() if src != dst}
    under = {p: src for p in flat for src in renames if p[: len(src)] == src}
    out = {p: v for p, v in flat.items() if p not in under}
    leaves = {}
    for p, src in under.items():
        dst = renames[src] + p[len(src) :]
        out[dst] = flat[p]
        leaves[dst] = LeafMap(p, tuple(np.shape(flat[p])), np.asarray(flat[p]).dtype.name)
    for path, zeros in tables.items():
        out[path] = zeros
        leaves[path] = LeafMap(None, zeros.shape, zeros.dtype.name)
    dropped = frozenset(under) - frozenset(out)
    return OpResult(
        unflatten_params(out),
        pmap.then(ParamMap(leaves, dropped)) if leaves else pmap,
        action_map=logit_map,
        action_info=info,
        graph=after,
    )


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1)
    return m + np.log(np.sum(np.exp(x - m[..., None]), axis=-1))


def add_residual_block(
    params,
    torso: str,
    *,
    graph: LayerGraph,
    rng,
    index: int | None = None,
    init_scale: float = 1.0,
) -> OpResult:
    """Inserts a residual block into an MLP torso; exact because its output layer is zero.

    The block computes h + out(act(inner(h))) at the stream width; the inner layer gets a fresh
    orthogonal init (scale sqrt(2) * init_scale, as networks/torsos.py), the output layer's
    kernel and bias are 0, so gradients reach it at once. Blocks at and after `index` (default:
    the end) move up by one. The config gains network.residual_blocks += 1; the result carries
    the layer graph with the new block.

    Args:
      torso: the torso module, e.g. "policy_torso" (or "params/policy_torso").
    """
    root = as_path(torso)
    name = path_str(root[1:])
    flat = flatten_params(params)
    if name not in graph.torsos:
        raise SurgeryError(
            f"no torso {path_str(root)}; the network has "
            f"{[path_str(('params', t)) for t in graph.torsos]}"
        )
    t = graph.torsos[name]
    if t.kind != "mlp":
        raise SurgeryError(f"{path_str(root)} is a CNN torso; residual blocks are for MLP torsos")
    inner, outer = t.block_layers
    if t.layers:
        width = _kernel(flat, as_path(t.layers[-1])).shape[1]
    elif t.blocks:
        width = _kernel(flat, as_path(f"{t.blocks[0]}/{outer}")).shape[1]
    else:
        raise SurgeryError(f"{path_str(root)} has no layer that sets the stream width")
    index = len(t.blocks) if index is None else int(index)
    if not 0 <= index <= len(t.blocks):
        raise SurgeryError(f"{path_str(root)}: index {index} not in [0, {len(t.blocks)}]")
    after = graph.with_blocks(name, len(t.blocks) + 1)
    blocks = after.torsos[name].blocks  # the module's names for blocks 0 .. n
    moved = {as_path(b): as_path(blocks[j + (j >= index)]) for j, b in enumerate(t.blocks)}
    leaves: dict[Path, LeafMap] = {}
    out = {p: v for p, v in flat.items() if not any(p[: len(b)] == b for b in moved)}
    for src_block, dst_block in moved.items():
        for p, v in flat.items():
            if p[: len(src_block)] == src_block:
                dst = dst_block + p[len(src_block) :]
                out[dst] = v
                if dst != p:
                    leaves[dst] = LeafMap(p, tuple(np.shape(v)), np.asarray(v).dtype.name)
    block = as_path(blocks[index])
    # Orthogonal init (as networks/torsos.py), with the sign fix that makes it uniform.
    q, r = np.linalg.qr(generator(rng).standard_normal((width, width)))
    kernel = math.sqrt(2.0) * init_scale * q * np.sign(np.diag(r))
    new = {
        block + (inner, "kernel"): np.asarray(kernel, np.float32),
        block + (inner, "bias"): np.zeros(width, np.float32),
        block + (outer, "kernel"): np.zeros((width, width), np.float32),
        block + (outer, "bias"): np.zeros(width, np.float32),
    }
    out.update(new)
    leaves.update({p: LeafMap(None, v.shape, v.dtype.name) for p, v in new.items()})
    # A new leaf's optimizer moments are zeros; its values are set here, not by the map.
    return OpResult(unflatten_params(out), ParamMap(leaves), graph=after)
