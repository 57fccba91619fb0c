"""Surgery plans: a list of ops, written by hand (JSON) or derived from old and new networks.

A plan is data: every op is a small frozen dataclass that serializes to one JSON object
{"op": kind, ...fields}. `derive_plan(old_network, new_network)` compares two networks.Network
(built from the old and new configs and env specs) and returns the ops that turn the old
parameters into parameters of the new network computing the same function, or raises PlanError
listing every change that cannot be made (a shrink, a removed observation, a new layer type),
naming the layers and shapes. `Plan.apply` runs the ops and collects their maps.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from typing import ClassVar

import ml_collections
import numpy as np

from networks import torsos
from networks.entities import EntityGraph
from networks.graph import LayerGraph
from seedlike.types import TEAMMATES
from surgery import entities as entity_ops
from surgery import ops
from surgery.ops import ActionInfo, AxisMap, OpResult, ParamMap, SurgeryError

PLAN_FORMAT = "seedlike-surgery-plan"
PLAN_VERSION = 1


class PlanError(SurgeryError):
    """A plan that cannot be derived or applied; the message names the layers and shapes."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """What ops need to know about a network beyond its parameter tree.

    Attributes:
      graph: the network's layer graph (networks/graph.py): which layers read which units.
      torso: "mlp" or one of networks.torsos.CNN_TORSOS.
      image_key: the image observation of CNN torsos.
      image_layout: "HWC" or "CHW": how the image observation is laid out in the env spec.
      feature_positions: H*W of the last conv feature map (rows of dense_0 per channel).
      feature_bound: |x| <= feature_bound for the features the heads read (tanh MLP, LSTM h: 1),
        else None (autoregressive heads add their tables to them: ops.add_actions adds their
        largest entries).
    """

    graph: LayerGraph | None = None
    torso: str = "mlp"
    image_key: str | None = None
    image_layout: str = "HWC"
    feature_positions: int = 0
    feature_bound: float | None = None

    @property
    def entities(self) -> EntityGraph | None:
        return self.graph.entities if self.graph is not None else None


def _cnn_resolved(module) -> tuple[tuple[int, ...], int]:
    """(channels, hidden size) of a CNN torso, defaults filled in as networks/torsos.py does."""
    default_channels, default_hidden = _default_cnn(module.torso_spec.kind)
    channels = (
        tuple(module.torso_spec.cnn_channels)
        if module.torso_spec.cnn_channels
        else default_channels
    )
    return channels, int(module.torso_spec.cnn_hidden or default_hidden)


def layout_of(network) -> Layout:
    """The Layout of a networks.Network."""
    m = network.module
    bound = None
    if m.core_spec.size:
        bound = 1.0  # h = o * tanh(c)
    elif (
        m.torso_spec.kind == "mlp"
        and m.torso_spec.activation == "tanh"
        and m.torso_spec.hidden_sizes
    ):
        bound = 1.0 if not m.torso_spec.residual_blocks else None
    graph = network.layer_graph()
    if m.torso_spec.kind == "mlp":
        return Layout(graph, feature_bound=bound)
    positions = network.feature_positions()
    return Layout(
        graph, m.torso_spec.kind, m.torso_spec.image_key, network.image_layout, positions, bound
    )


def _torso_inputs(network) -> dict:
    """The observations the torso reads per agent as features: with a team pool, the agent's own
    keys (its teammates' observations go through the same torso, so they follow their own key);
    never the word ids of a text encoder (its features follow the others')."""
    m = network.module
    obs = {
        k: s
        for k, s in network.input_spec.items()
        if k not in (m.encoders.text_key, m.encoders.entity_key)
    }
    if not m.torso_spec.team_pool:
        return obs
    return {k: s for k, s in obs.items() if not k.startswith(TEAMMATES)}


def _hwc(shape, layout: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    return (shape[1], shape[2], shape[0]) if layout == "CHW" else shape


@dataclasses.dataclass(frozen=True)
class Context:
    """Inputs of Plan.apply besides the parameters.

    Attributes:
      layout: the old network's Layout (layout_of(network)); Plan.apply keeps its graph up to
        date when an op changes the network's structure.
      logits: the old policy's logits on a batch [N, A], for AddActions without a bias and
        without a feature bound.
    """

    layout: Layout = Layout()
    logits: np.ndarray | None = None

    @property
    def graph(self) -> LayerGraph:
        if self.layout.graph is None:
            raise SurgeryError(
                "the op needs the network's layer graph: apply the plan with "
                "Context(layout_of(network))"
            )
        return self.layout.graph


# Ops ---------------------------------------------------------------------------------------------


class _WidenLayer:
    """What WidenDense and WidenConv share: the layer at `path` widened to `units` by the ops
    function `widen` (mode "random" or "replicate"; init_scale and noise as ops.widen_dense)."""

    widen: ClassVar[Callable]

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return type(self).widen(
            params,
            self.path,
            self.units,
            graph=ctx.graph,
            rng=rng,
            mode=self.mode,
            init_scale=self.init_scale,
            noise=self.noise,
        )


@dataclasses.dataclass(frozen=True)
class WidenDense(_WidenLayer):
    """ops.widen_dense: a torso Dense layer to `width` units (mode "random" or "replicate")."""

    kind: ClassVar[str] = "widen_dense"
    widen: ClassVar[Callable] = ops.widen_dense
    path: str
    width: int
    mode: str = "random"
    init_scale: float = 0.1
    noise: float = 1e-2

    @property
    def units(self) -> int:
        return self.width


@dataclasses.dataclass(frozen=True)
class WidenConv(_WidenLayer):
    """ops.widen_conv: a CNN torso conv layer to `channels` filters."""

    kind: ClassVar[str] = "widen_conv"
    widen: ClassVar[Callable] = ops.widen_conv
    path: str
    channels: int
    mode: str = "random"
    init_scale: float = 0.1
    noise: float = 1e-2

    @property
    def units(self) -> int:
        return self.channels


@dataclasses.dataclass(frozen=True)
class WidenLSTM:
    """ops.widen_lstm: the LSTM core to `size` units; noise > 0 in mode "random" is inexact."""

    kind: ClassVar[str] = "widen_lstm"
    size: int
    mode: str = "random"
    noise: float = 0.0
    init_scale: float = 0.1

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.widen_lstm(
            params,
            self.size,
            graph=ctx.graph,
            rng=rng,
            mode=self.mode,
            noise=self.noise,
            init_scale=self.init_scale,
        )


@dataclasses.dataclass(frozen=True)
class AddObservations:
    """ops.add_input_features: observation key -> shape (as in the env spec) before and after."""

    kind: ClassVar[str] = "add_observations"
    old_shapes: Mapping[str, tuple[int, ...]]
    new_shapes: Mapping[str, tuple[int, ...]]

    def __post_init__(self):
        for name in ("old_shapes", "new_shapes"):
            shapes = {str(k): tuple(int(d) for d in v) for k, v in getattr(self, name).items()}
            object.__setattr__(self, name, shapes)

    def apply(self, params, rng, ctx: Context) -> OpResult:
        old, new = dict(self.old_shapes), dict(self.new_shapes)
        key = ctx.layout.image_key
        if key is not None:
            for shapes in (old, new):
                if key in shapes:
                    shapes[key] = _hwc(shapes[key], ctx.layout.image_layout)
        return ops.add_input_features(params, old, new, graph=ctx.graph, image_key=key)


@dataclasses.dataclass(frozen=True)
class AddActions:
    """ops.add_actions: `num_new` choices for action head `head` at `positions` (default
    appended; head 0 of a single categorical is its actions).

    bias None: chosen so that the new choices' probability stays below `tolerance`, guaranteed
    for every input when the head features are bounded (Layout.feature_bound), else on the
    batch of logits in the Context.
    """

    kind: ClassVar[str] = "add_actions"
    num_new: int = 1
    positions: tuple[int, ...] | None = None
    bias: float | None = None
    tolerance: float = 1e-6
    head: int = 0

    def __post_init__(self):
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_actions(
            params,
            self.num_new,
            graph=ctx.graph,
            head=self.head,
            positions=self.positions,
            bias=self.bias,
            tolerance=self.tolerance,
            feature_bound=ctx.layout.feature_bound,
            logits=ctx.logits,
        )


@dataclasses.dataclass(frozen=True)
class AddQActions:
    """ops.add_q_actions: `num_new` actions appended to a Q head of `num_actions` (atoms,
    dueling and value_range as the network's), each worth `value` (a dueling head's: V(s))."""

    kind: ClassVar[str] = "add_q_actions"
    num_new: int
    num_actions: int
    atoms: int = 1
    dueling: bool = False
    value_range: tuple[float, float] = (-10.0, 10.0)
    value: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "value_range", tuple(float(v) for v in self.value_range))

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_q_actions(
            params, self.num_new, num_actions=self.num_actions, atoms=self.atoms,
            dueling=self.dueling, value_range=self.value_range, value=self.value,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class AddActionHead:
    """ops.add_action_head: a new argument of `size` choices at head position `index` (default
    last); its choice 0 is what the env did without it."""

    kind: ClassVar[str] = "add_action_head"
    size: int
    index: int | None = None
    bias: float | None = None
    tolerance: float = 1e-6

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_action_head(
            params,
            self.size,
            graph=ctx.graph,
            index=self.index,
            bias=self.bias,
            tolerance=self.tolerance,
        )


@dataclasses.dataclass(frozen=True)
class AddActionDims:
    """ops.add_action_dims: `num_new` continuous action dimensions after the old ones, each
    N(mean, std^2) until learning changes them; the old dimensions' distribution is unchanged."""

    kind: ClassVar[str] = "add_action_dims"
    num_new: int = 1
    mean: float = 0.0
    std: float = 1.0

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_action_dims(
            params, self.num_new, graph=ctx.graph, mean=self.mean, std=self.std
        )


@dataclasses.dataclass(frozen=True)
class AddResidualBlock:
    """ops.add_residual_block: a zero-output residual block in an MLP torso."""

    kind: ClassVar[str] = "add_residual_block"
    torso: str
    index: int | None = None
    init_scale: float = 1.0

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_residual_block(
            params,
            self.torso,
            graph=ctx.graph,
            rng=rng,
            index=self.index,
            init_scale=self.init_scale,
        )


@dataclasses.dataclass(frozen=True)
class AddEntityAttributes:
    """surgery.entities.add_entity_attributes: `old` -> `new` attributes per entity."""

    kind: ClassVar[str] = "add_entity_attributes"
    old: int
    new: int

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return entity_ops.add_entity_attributes(params, _graph(ctx), self.old, self.new)


@dataclasses.dataclass(frozen=True)
class WidenEntities:
    """surgery.entities.widen_entities: the entity encoder (and its attention) to `size` units."""

    kind: ClassVar[str] = "widen_entities"
    size: int
    init_scale: float = 0.1

    def apply(self, params, rng, ctx: Context) -> OpResult:
        result = entity_ops.widen_entities(
            params, _graph(ctx), self.size, rng=rng, init_scale=self.init_scale
        )
        return dataclasses.replace(result, graph=ctx.graph.with_module(entity_size=self.size))


def _graph(ctx: Context) -> EntityGraph:
    if ctx.layout.entities is None:
        raise SurgeryError("the network has no entity encoder (network.entities is not set)")
    return ctx.layout.entities


OPS = {
    cls.kind: cls
    for cls in (
        WidenDense,
        WidenConv,
        WidenLSTM,
        AddObservations,
        AddActions,
        AddQActions,
        AddActionHead,
        AddActionDims,
        AddResidualBlock,
        AddEntityAttributes,
        WidenEntities,
    )
}
Op = (
    WidenDense
    | WidenConv
    | WidenLSTM
    | AddObservations
    | AddActions
    | AddQActions
    | AddActionHead
    | AddActionDims
    | AddResidualBlock
    | AddEntityAttributes
    | WidenEntities
)


# Plans -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class PlanResult:
    """What applying a plan produced.

    Attributes:
      params: the new parameter tree.
      param_maps: one ParamMap per op, in order (optimizer moments go through all of them).
      carry_map: how LSTM carries map (None: unchanged).
      action_map: how the logits axis maps (None: unchanged).
      action_infos: one ActionInfo per AddActions / AddActionHead op, its new actions at their
        positions in the final logits axis.
      exact: every op preserves the function (up to float rounding).
      graph: the layer graph of the new network (None if the plan ran without one).
    """

    params: dict
    param_maps: tuple[ParamMap, ...]
    carry_map: AxisMap | None
    action_map: AxisMap | None
    action_infos: tuple[ActionInfo, ...]
    exact: bool
    graph: LayerGraph | None = None

    @property
    def param_map(self) -> ParamMap:
        """All param_maps composed into one."""
        return functools.reduce(ParamMap.then, self.param_maps, ParamMap({}))


def _moved(info: ActionInfo, later: AxisMap) -> ActionInfo:
    """An earlier op's ActionInfo with its new actions where a later op's map puts them."""
    moved = later.old_positions[list(info.new_actions)]
    return dataclasses.replace(
        info, num_actions_new=later.new_size, new_actions=tuple(int(a) for a in moved)
    )


def _then(first: AxisMap | None, second: AxisMap | None) -> AxisMap | None:
    if first is None or second is None:
        return first or second
    return first.then(second)


@dataclasses.dataclass(frozen=True)
class Plan:
    """An ordered list of ops."""

    ops: tuple[Op, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "ops", tuple(self.ops))

    def apply(self, params, rng, ctx: Context | None = None) -> PlanResult:
        """Applies every op in order; errors name the op that failed.

        Args:
          params: the old network's parameter tree.
          rng: a jax PRNG key, an int seed or a numpy Generator.
          ctx: the old network's Layout (and logits for AddActions); ops that change layers
            need its layer graph (Context(layout_of(network))).
        """
        ctx = ctx or Context()
        gen = ops.generator(rng)
        maps, infos = [], []
        carry = actions = None
        exact = True
        for i, op in enumerate(self.ops):
            try:
                result = op.apply(params, gen, ctx)
            except SurgeryError as e:
                raise PlanError(f"op {i} ({op.kind}): {e}") from None
            params = result.params
            maps.append(result.param_map)
            carry = _then(carry, result.carry_map)
            actions = _then(actions, result.action_map)
            if result.action_map is not None:
                infos = [_moved(info, result.action_map) for info in infos]
                if ctx.logits is not None:  # later ops choose biases from the new columns
                    info = result.action_info
                    fill = info.bias if info is not None else 0.0
                    logits = result.action_map.apply(ctx.logits, -1, "index", fill=fill)
                    ctx = dataclasses.replace(ctx, logits=logits)
            if result.action_info is not None:
                infos.append(result.action_info)
            if result.graph is not None:
                ctx = dataclasses.replace(
                    ctx, layout=dataclasses.replace(ctx.layout, graph=result.graph)
                )
            exact = exact and result.exact
        return PlanResult(
            params, tuple(maps), carry, actions, tuple(infos), exact, ctx.layout.graph
        )

    @property
    def exact(self) -> bool:
        """False if an op is approximate by design (LSTM widening with noise)."""
        return not any(
            isinstance(op, WidenLSTM) and op.mode == "random" and op.noise > 0 for op in self.ops
        )

    def to_dict(self) -> dict:
        out = []
        for op in self.ops:
            fields = dataclasses.asdict(op)
            for key, value in fields.items():
                if isinstance(value, tuple):
                    fields[key] = list(value)
                elif isinstance(value, Mapping):
                    fields[key] = {k: list(v) for k, v in value.items()}
            out.append({"op": op.kind, **fields})
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "ops": out}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Mapping) -> Plan:
        if isinstance(data, list):
            data = {"ops": data}
        if data.get("format", PLAN_FORMAT) != PLAN_FORMAT:
            raise PlanError(f"not a surgery plan: format {data.get('format')!r}")
        if int(data.get("version", PLAN_VERSION)) > PLAN_VERSION:
            raise PlanError(f"plan version {data['version']} is newer than {PLAN_VERSION}")
        parsed = []
        for i, entry in enumerate(data.get("ops", [])):
            entry = dict(entry)
            kind = entry.pop("op", None)
            if kind not in OPS:
                raise PlanError(f"op {i}: unknown op {kind!r}; known ops: {', '.join(OPS)}")
            op_cls = OPS[kind]
            fields = {f.name: f for f in dataclasses.fields(op_cls)}
            unknown = sorted(set(entry) - set(fields))
            missing = sorted(
                n
                for n, f in fields.items()
                if n not in entry
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            )
            if unknown or missing:
                raise PlanError(
                    f"op {i} ({kind}): unknown fields {unknown}, missing fields {missing}; "
                    f"{kind} takes {', '.join(fields)}"
                )
            parsed.append(op_cls(**entry))
        return cls(tuple(parsed))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        lines = []
        for i, op in enumerate(self.ops):
            fields = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(op).items())
            lines.append(f"  {i}: {op.kind}({fields})")
        return "\n".join(lines) if lines else "  (no ops: the networks are the same)"


# Deriving plans ----------------------------------------------------------------------------------


def derive_plan(
    old,
    new,
    *,
    mode: str = "random",
    init_scale: float = 0.1,
    lstm_mode: str = "random",
    lstm_noise: float = 0.0,
    action_tolerance: float = 1e-6,
    new_action_value: float = 0.0,
) -> Plan:
    """The plan that turns networks.Network `old` into `new` (same function), or PlanError.

    Supported differences: observation keys added or grown, more actions, wider MLP layers, more
    residual blocks, more conv channels / a wider CNN dense layer, a wider LSTM. Everything else
    (a shrink, a removed observation, another torso, activation, normalization, ...) is an error
    listing each problem with the layers and shapes concerned.

    Args:
      old, new: networks.Network built from the old and new configs and env specs.
      mode: "random" or "replicate" (Net2Wider) for widened torso layers.
      init_scale: scale of new units' incoming weights relative to the layer's RMS.
      lstm_mode, lstm_noise: WidenLSTM settings (noise > 0 with "random" is approximate).
      action_tolerance: KL bound for new actions (AddActions.tolerance).
      new_action_value: a Q head's new actions' value (AddQActions; a dueling head's start at
        the state value).
    """
    om, nm = old.module, new.module
    problems = _unchangeable(old, new)
    if problems:
        raise PlanError("; ".join(problems))
    plan: list = []
    graph = old.layer_graph()
    _derive_observations(_torso_inputs(old), _torso_inputs(new), problems, plan)
    if om.torso_spec.kind == "mlp":
        _derive_mlp(om, nm, graph, mode, init_scale, problems, plan)
    else:
        _derive_cnn(om, nm, graph, mode, init_scale, problems, plan)
    last = {f"params/{t.layers[-1]}" for t in graph.torsos.values() if t.layers}
    if om.torso_spec.team_pool and any(
        op.path in last for op in plan if isinstance(op, WidenDense)
    ):
        problems.append(
            f"network.team_pool={om.torso_spec.team_pool}: the heads read the torso's last "
            "layer and its "
            f"pooled share ([F + S] features); widening {' and '.join(sorted(last))} would "
            "move the pooled features, which surgery does not do"
        )
    _derive_core(om, nm, lstm_mode, lstm_noise, init_scale, problems, plan)
    _derive_entities(old, new, init_scale, problems, plan)
    if om.head_spec.q:
        _derive_q_actions(old, new, new_action_value, problems, plan)
    else:
        _derive_actions(old, new, action_tolerance, problems, plan)
    if problems:
        raise PlanError("; ".join(problems))
    return Plan(tuple(plan))


def _unchangeable(old, new) -> list[str]:
    """The settings no function-preserving surgery can change, where `new` changes them."""
    om, nm = old.module, new.module
    problems: list[str] = []

    def same(what, a, b):
        if a != b:
            problems.append(f"{what} changes from {a!r} to {b!r}: no function-preserving surgery")

    same("network.torso", om.torso_spec.kind, nm.torso_spec.kind)
    same("network.activation", om.torso_spec.activation, nm.torso_spec.activation)
    same("network.layer_norm", om.torso_spec.layer_norm, nm.torso_spec.layer_norm)
    same("network.shared_torso (as built)", om.torso_spec.shared, nm.torso_spec.shared)
    same("network.image_key", om.torso_spec.image_key, nm.torso_spec.image_key)
    same("network.mirror", om.torso_spec.mirror, nm.torso_spec.mirror)
    same("network.team_pool", om.torso_spec.team_pool, nm.torso_spec.team_pool)
    same("network.text_key", om.encoders.text_key, nm.encoders.text_key)
    same("network.text_size", om.encoders.text_size, nm.encoders.text_size)
    same("network.entities", om.encoders.entity_key, nm.encoders.entity_key)
    same("network.entity_heads", om.encoders.entity_heads, nm.encoders.entity_heads)
    same("network.autoregressive", om.head_spec.autoregressive, nm.head_spec.autoregressive)
    same("network.policy_head", om.head_spec.policy, nm.head_spec.policy)
    if om.head_spec.q or nm.head_spec.q:
        same("network.atoms", om.head_spec.atoms, nm.head_spec.atoms)
        same("network.dueling", om.head_spec.dueling, nm.head_spec.dueling)
        same("network.value_range", om.head_spec.value_range, nm.head_spec.value_range)
        if om.head_spec.noisy or nm.head_spec.noisy:
            problems.append(
                "network.noisy: the noise of a noisy Q head's layers spans every input unit, so "
                "new units would change its outputs; surgery takes Q heads without noise"
            )
    same("network.cnn_kernel", om.torso_spec.cnn_kernel, nm.torso_spec.cnn_kernel)
    same("network.cnn_padding", om.torso_spec.cnn_padding, nm.torso_spec.cnn_padding)
    same("network.action_squash", old.action_squash, new.action_squash)
    same("network.normalize_obs", old.normalize_obs, new.normalize_obs)
    if old.normalize_obs:
        same("network.obs_clip", old.obs_clip, new.obs_clip)
    if om.torso_spec.kind != "mlp":
        same("network.image_scale", old.image_scale, new.image_scale)
        same("image layout", old.image_layout, new.image_layout)
    same("num_players", old.spec.num_players, new.spec.num_players)
    if old.board_lines and new.board_lines:  # turning them on adds an input (AddObservations)
        same("network.board_lines", old.board_lines, new.board_lines)
        same("network.board_gravity", old.board_gravity, new.board_gravity)
        same("network.board_key", old.board_key, new.board_key)
    if bool(om.core_spec.size) != bool(nm.core_spec.size):
        problems.append(
            f"network.core changes ({'lstm' if om.core_spec.size else 'none'} -> "
            f"{'lstm' if nm.core_spec.size else 'none'}): adding or removing a core is not "
            "function-preserving"
        )
    return problems


def _derive_core(om, nm, lstm_mode, lstm_noise, init_scale, problems, plan) -> None:
    """A wider LSTM core (WidenLSTM); a narrower one is a problem."""
    old_size, new_size = om.core_spec.size, nm.core_spec.size
    if new_size == old_size:
        return
    if new_size < old_size:
        problems.append(
            f"network.core_size {old_size} -> {new_size}: params/core/lstm would shrink (hi "
            f"kernel [{old_size}, {old_size}] -> [{new_size}, {new_size}]); surgery only adds "
            "units"
        )
    else:
        plan.append(WidenLSTM(new_size, lstm_mode, lstm_noise, init_scale))


def _derive_entities(old, new, init_scale: float, problems: list[str], plan: list) -> None:
    """Entity attributes may be added and the entity encoder widened (surgery/entities.py)."""
    om, nm = old.module, new.module
    if not om.encoders.entity_key or om.encoders.entity_key != nm.encoders.entity_key:
        return
    (e_old, f_old), (e_new, f_new) = (
        net.spec.observation[om.encoders.entity_key].shape for net in (old, new)
    )
    if e_old != e_new:
        problems.append(
            f"entity slots of {om.encoders.entity_key!r} change from {e_old} to {e_new}: "
            "pointer heads "
            "choose among the slots; surgery keeps their number"
        )
    if f_new < f_old:
        problems.append(f"entity attributes {f_old} -> {f_new}: surgery only adds them")
    elif f_new > f_old:
        plan.append(AddEntityAttributes(f_old, f_new))
    if nm.encoders.entity_size < om.encoders.entity_size:
        problems.append(
            f"network.entity_size {om.encoders.entity_size} -> {nm.encoders.entity_size}: "
            "surgery only widens"
        )
    elif nm.encoders.entity_size > om.encoders.entity_size:
        plan.append(WidenEntities(nm.encoders.entity_size, init_scale))


def _derive_q_actions(old, new, value: float, problems: list[str], plan: list) -> None:
    """More actions for a Q head: AddQActions (appended)."""
    a, b = old.spec.num_actions, new.spec.num_actions
    if b < a or len(new.spec.head_sizes) != 1:
        problems.append(
            f"num_actions {a} -> {b} ({len(new.spec.head_sizes)} heads): a Q head gains actions "
            "(appended) and loses none"
        )
    elif b > a:
        h = old.module.head_spec
        plan.append(AddQActions(b - a, a, h.atoms, h.dueling, h.value_range, value))


def _derive_actions(old, new, tolerance: float, problems: list[str], plan: list) -> None:
    """More choices for any action head, and at most one new (non-pointer) head. The joint
    action's KL is the sum of the heads', so the ops share `tolerance` equally. More continuous
    dimensions: AddActionDims (N(0, 1) for the new ones; edit the plan for another mean/std)."""
    d_old, d_new = old.spec.continuous, new.spec.continuous
    if d_new < d_old or (d_old == 0) != (d_new == 0):
        problems.append(
            f"continuous action dimensions {d_old} -> {d_new}: surgery adds dimensions to a "
            "Gaussian head and removes none (it cannot make a discrete policy continuous)"
        )
    elif d_new > d_old:
        bounds = (old.spec.action_low, old.spec.action_high)
        if (new.spec.action_low[:d_old], new.spec.action_high[:d_old]) != bounds:
            problems.append(
                f"the old action dimensions' bounds change ({bounds} -> "
                f"{(new.spec.action_low[:d_old], new.spec.action_high[:d_old])}): the same "
                "sample would act differently"
            )
        plan.append(AddActionDims(num_new=d_new - d_old))
    o, n = old.spec.head_sizes, new.spec.head_sizes
    ops_: list = []
    inserted = None
    if len(n) == len(o) + 1:
        # Where the heads allow several places, the one that grows the old heads least.
        fits = [
            (sum(n[:i] + n[i + 1 :]) - sum(o), i)
            for i in range(len(n))
            if all(b >= a for a, b in zip(o, n[:i] + n[i + 1 :]))
        ]
        inserted = min(fits)[1] if fits else None
        if inserted is None:
            problems.append(f"action heads {o} -> {n}: no head of {n} can be the new one")
            return
        ops_.append(AddActionHead(n[inserted], inserted))
    elif len(n) != len(o):
        problems.append(
            f"action heads {o} -> {n}: surgery adds one action head at a time and removes none"
        )
        return

    def moved(j: int) -> int:
        return j + (inserted is not None and j >= inserted)

    pointers = tuple(moved(j) for j in old.module.head_spec.pointer_heads)
    if pointers != tuple(new.module.head_spec.pointer_heads):
        problems.append(
            f"network.pointer_heads {tuple(old.module.head_spec.pointer_heads)} -> "
            f"{tuple(new.module.head_spec.pointer_heads)}: the old pointer heads must stay "
            "pointers "
            f"({pointers} with the new head) and a new head cannot be one"
        )
    for j, a in enumerate(o):
        b = n[moved(j)]
        if b < a:
            what = f"num_actions {a} -> {b}" if len(o) == 1 else f"action head {j}: {a} -> {b}"
            problems.append(
                f"{what}: params/policy_head/logits kernel would shrink; surgery only adds "
                "actions (mask removed ones instead)"
            )
        elif b > a:
            if j in old.module.head_spec.pointer_heads:
                problems.append(f"action head {j} is a pointer head: its {a} choices are fixed")
            else:
                ops_.append(AddActions(num_new=b - a, head=moved(j)))
    plan.extend(dataclasses.replace(op, tolerance=tolerance / len(ops_)) for op in ops_)


def _derive_observations(old_obs, new_obs, problems, plan):
    changed = False
    for key, spec in sorted(old_obs.items()):
        if key not in new_obs:
            problems.append(
                f"observation {key!r} {spec} is removed: surgery only adds features (keep it and "
                "feed a constant, OpenAI Five App. B)"
            )
        elif new_obs[key].dtype != spec.dtype:
            problems.append(f"observation {key!r} changes dtype: {spec} -> {new_obs[key]}")
        elif new_obs[key].shape != spec.shape:
            grows = len(spec.shape) == len(new_obs[key].shape) and all(
                o <= n for o, n in zip(spec.shape, new_obs[key].shape)
            )
            if not grows:
                problems.append(
                    f"observation {key!r} changes shape {spec} -> {new_obs[key]}: only growing "
                    "each dimension is supported"
                )
            changed = True
    changed = changed or bool(set(new_obs) - set(old_obs))
    if changed:
        plan.append(
            AddObservations(
                {k: s.shape for k, s in old_obs.items()}, {k: s.shape for k, s in new_obs.items()}
            )
        )


def _derive_mlp(om, nm, graph: LayerGraph, mode, init_scale, problems, plan):
    old_h, new_h = tuple(om.torso_spec.hidden_sizes), tuple(nm.torso_spec.hidden_sizes)
    if len(old_h) != len(new_h):
        problems.append(
            f"network.hidden_sizes {old_h} -> {new_h}: adding or removing a dense layer is not "
            f"function-preserving with {om.torso_spec.activation}; add residual blocks instead"
        )
        return
    for i, (o, n) in enumerate(zip(old_h, new_h)):
        paths = [f"params/{t.layers[i]}" for t in graph.torsos.values()]
        if n < o:
            problems.append(
                f"network.hidden_sizes[{i}] {o} -> {n}: {' and '.join(paths)} would shrink from "
                f"{o} to {n} units (kernel [*, {o}] -> [*, {n}]); surgery only adds units"
            )
        elif n > o:
            plan.extend(WidenDense(p, n, mode, init_scale) for p in paths)
    if nm.torso_spec.residual_blocks < om.torso_spec.residual_blocks:
        problems.append(
            f"network.residual_blocks {om.torso_spec.residual_blocks} -> "
            f"{nm.torso_spec.residual_blocks}: removing "
            "residual blocks is not function-preserving"
        )
    for _ in range(nm.torso_spec.residual_blocks - om.torso_spec.residual_blocks):
        plan.extend(AddResidualBlock(f"params/{t}") for t in graph.torsos)


def _derive_cnn(om, nm, graph: LayerGraph, mode, init_scale, problems, plan):
    (old_c, old_hidden), (new_c, new_hidden) = _cnn_resolved(om), _cnn_resolved(nm)
    (torso,) = graph.torsos.values()
    if len(old_c) != len(new_c):
        problems.append(
            f"network.cnn_channels {old_c} -> {new_c}: adding or removing conv layers is not "
            "supported"
        )
        return
    for i, (o, n) in enumerate(zip(old_c, new_c)):
        path = f"params/{torso.layers[i]}"
        if n < o:
            problems.append(
                f"network.cnn_channels[{i}] {o} -> {n}: {path} would shrink from {o} to {n} "
                "filters; surgery only adds units"
            )
        elif n > o:
            plan.append(WidenConv(path, n, mode, init_scale))
    dense = f"params/{torso.layers[-1]}"
    if new_hidden < old_hidden:
        problems.append(f"network.cnn_hidden {old_hidden} -> {new_hidden}: {dense} would shrink")
    elif new_hidden > old_hidden:
        plan.append(WidenDense(dense, new_hidden, mode, init_scale))


def config_from_params(config, params, graph: LayerGraph) -> ml_collections.ConfigDict:
    """`config` (a full experiment config) with its network section read from `params`.

    Used when a hand-written plan is applied without a new config file: the layer sizes,
    residual blocks, CNN channels and LSTM size of the transformed parameters become the new
    config (the env section is unchanged, so observation and action changes need a new config).
    `graph` is the layer graph after the plan (PlanResult.graph): it names the layers to read.
    """
    out = ml_collections.ConfigDict(config.to_dict())
    net = out.network
    flat = ops.flatten_params(params)

    def width(layer: str) -> int:
        return int(np.shape(flat[(*ops.as_path(layer), "kernel")])[-1])

    per_torso = {}
    for name, t in graph.torsos.items():
        if t.kind == "mlp":
            per_torso[name] = {
                "hidden_sizes": [width(x) for x in t.layers],
                "residual_blocks": len(t.blocks),
            }
        else:
            per_torso[name] = {
                "cnn_channels": [width(x) for x in t.layers[:-1]],
                "cnn_hidden": width(t.layers[-1]),
            }
    if len({json.dumps(v) for v in per_torso.values()}) > 1:
        raise PlanError(
            f"the torsos differ after the plan ({per_torso}); one config describes both: apply "
            "the same ops to params/policy_torso and params/value_torso"
        )
    found = next(iter(per_torso.values())) if per_torso else {}
    if "hidden_sizes" in found:
        net.hidden_sizes = type(net.hidden_sizes)(found["hidden_sizes"])
        net.residual_blocks = found["residual_blocks"]
    if "cnn_channels" in found:
        # Configs may leave the paper's defaults implicit (() and 0); keep them so if unchanged.
        default_channels, default_hidden = _default_cnn(net.get("torso"))
        channels, hidden = tuple(found["cnn_channels"]), found["cnn_hidden"]
        if channels != (tuple(net.cnn_channels) or default_channels):
            net.cnn_channels = type(net.cnn_channels)(channels)
        if hidden != (net.cnn_hidden or default_hidden):
            net.cnn_hidden = hidden
    if graph.core is not None:
        net.core_size = width(graph.core.writers[0])
    if graph.entities is not None:
        net.entity_size = width(graph.entities.attributes)
    return out


def _default_cnn(torso: str | None) -> tuple[tuple[int, ...], int]:
    cls = torsos.CNN_TORSOS[torso]
    return tuple(cls.channels), int(cls.hidden_size)


__all__ = [
    "AddActionDims",
    "AddActionHead",
    "AddActions",
    "AddQActions",
    "AddObservations",
    "AddResidualBlock",
    "Context",
    "Layout",
    "Plan",
    "PlanError",
    "PlanResult",
    "WidenConv",
    "WidenDense",
    "WidenLSTM",
    "config_from_params",
    "derive_plan",
    "layout_of",
]
