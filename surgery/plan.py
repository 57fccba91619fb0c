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
from collections.abc import Mapping
from typing import ClassVar

import jax
import ml_collections
import numpy as np

from networks import torsos
from networks.actor_critic import EntityGraph, entity_graph
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
      torso: "mlp" or one of networks.torsos.CNN_TORSOS.
      image_key: the image observation of CNN torsos.
      image_layout: "HWC" or "CHW": how the image observation is laid out in the env spec.
      feature_positions: H*W of the last conv feature map (rows of dense_0 per channel).
      feature_bound: |x| <= feature_bound for the heads' inputs (tanh MLP, LSTM h: 1), else None.
      entities: the network's EntityGraph (who reads the entity encoder), None without one.
    """

    torso: str = "mlp"
    image_key: str | None = None
    image_layout: str = "HWC"
    feature_positions: int = 0
    feature_bound: float | None = None
    entities: EntityGraph | None = None


def _cnn_resolved(module) -> tuple[tuple[int, ...], int]:
    """(channels, hidden size) of a CNN torso, defaults filled in as networks/torsos.py does."""
    default_channels, default_hidden = _default_cnn(module.torso_kind)
    channels = tuple(module.cnn_channels) if module.cnn_channels else default_channels
    return channels, int(module.cnn_hidden or default_hidden)


def layout_of(network) -> Layout:
    """The Layout of a networks.Network."""
    m = network.module
    bound = None
    if m.core_size:
        bound = 1.0  # h = o * tanh(c)
    elif m.torso_kind == "mlp" and m.activation == "tanh" and m.hidden_sizes:
        bound = 1.0 if not m.residual_blocks else None
    graph = entity_graph(m)
    if m.torso_kind == "mlp":
        return Layout(feature_bound=bound, entities=graph)
    # dense_0 reads the flattened last feature map, then the other (flattened) observations;
    # its kernel's rows give H*W whatever the convs, strides and pools of the torso.
    shapes = jax.eval_shape(network.init, jax.random.key(0))
    rows = shapes["params"]["torso"]["dense_0"]["kernel"].shape[0]
    others = (
        sum(int(np.prod(s.shape)) for k, s in _torso_inputs(network).items() if k != m.image_key)
        + (m.text_size if m.text_key else 0)
        + (m.entity_size if m.entity_key else 0)
    )
    positions = (rows - others) // _cnn_resolved(m)[0][-1]
    return Layout(m.torso_kind, m.image_key, network.image_layout, positions, bound, graph)


def _torso_inputs(network) -> dict:
    """The observations the torso reads per agent as features: with a team pool, the agent's own
    keys (its teammates' observations go through the same torso, so they follow their own key);
    never the word ids of a text encoder (its features follow the others')."""
    m = network.module
    obs = {k: s for k, s in network.spec.observation.items() if k not in (m.text_key, m.entity_key)}
    if not m.team_pool:
        return obs
    return {k: s for k, s in obs.items() if not k.startswith(TEAMMATES)}


def _hwc(shape, layout: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    return (shape[1], shape[2], shape[0]) if layout == "CHW" else shape


@dataclasses.dataclass(frozen=True)
class Context:
    """Inputs of Plan.apply besides the parameters.

    Attributes:
      layout: the old network's Layout.
      logits: the old policy's logits on a batch [N, A], for AddActions without a bias and
        without a feature bound.
    """

    layout: Layout = Layout()
    logits: np.ndarray | None = None


# Ops ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WidenDense:
    """ops.widen_dense: a torso Dense layer to `width` units (mode "random" or "replicate")."""

    kind: ClassVar[str] = "widen_dense"
    path: str
    width: int
    mode: str = "random"
    init_scale: float = 0.1
    noise: float = 1e-2

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.widen_dense(
            params,
            self.path,
            self.width,
            rng=rng,
            mode=self.mode,
            init_scale=self.init_scale,
            noise=self.noise,
        )


@dataclasses.dataclass(frozen=True)
class WidenConv:
    """ops.widen_conv: a CNN torso conv layer to `channels` filters."""

    kind: ClassVar[str] = "widen_conv"
    path: str
    channels: int
    mode: str = "random"
    init_scale: float = 0.1
    noise: float = 1e-2

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.widen_conv(
            params,
            self.path,
            self.channels,
            rng=rng,
            feature_positions=ctx.layout.feature_positions or None,
            mode=self.mode,
            init_scale=self.init_scale,
            noise=self.noise,
        )


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
            params, self.size, rng=rng, mode=self.mode, noise=self.noise, init_scale=self.init_scale
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
        return ops.add_input_features(params, old, new, image_key=key)


@dataclasses.dataclass(frozen=True)
class AddActions:
    """ops.add_actions: `num_new` actions at `positions` (default appended).

    bias None: chosen so that the new actions' probability stays below `tolerance`, guaranteed
    for every input when the head features are bounded (Layout.feature_bound), else on the
    batch of logits in the Context.
    """

    kind: ClassVar[str] = "add_actions"
    num_new: int = 1
    positions: tuple[int, ...] | None = None
    bias: float | None = None
    tolerance: float = 1e-6

    def __post_init__(self):
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    def apply(self, params, rng, ctx: Context) -> OpResult:
        return ops.add_actions(
            params,
            self.num_new,
            positions=self.positions,
            bias=self.bias,
            tolerance=self.tolerance,
            feature_bound=ctx.layout.feature_bound,
            logits=ctx.logits,
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
            params, self.torso, rng=rng, index=self.index, init_scale=self.init_scale
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
        return entity_ops.widen_entities(
            params, _graph(ctx), self.size, rng=rng, init_scale=self.init_scale
        )


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
      action_infos: one ActionInfo per AddActions op.
      exact: every op preserves the function (up to float rounding).
    """

    params: dict
    param_maps: tuple[ParamMap, ...]
    carry_map: AxisMap | None
    action_map: AxisMap | None
    action_infos: tuple[ActionInfo, ...]
    exact: bool

    @property
    def param_map(self) -> ParamMap:
        """All param_maps composed into one."""
        return functools.reduce(ParamMap.then, self.param_maps, ParamMap({}))


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
          ctx: the old network's Layout (and logits for AddActions); default: an MLP.
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
            if result.action_info is not None:
                infos.append(result.action_info)
            exact = exact and result.exact
        return PlanResult(params, tuple(maps), carry, actions, tuple(infos), exact)

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


def _torso_names(module) -> list[str]:
    if module.torso_kind != "mlp" or module.shared_torso:
        return ["torso"]
    return ["policy_torso", "value_torso"]


def derive_plan(
    old,
    new,
    *,
    mode: str = "random",
    init_scale: float = 0.1,
    lstm_mode: str = "random",
    lstm_noise: float = 0.0,
    action_tolerance: float = 1e-6,
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
    """
    om, nm = old.module, new.module
    problems: list[str] = []
    plan: list = []

    def same(what, a, b):
        if a != b:
            problems.append(f"{what} changes from {a!r} to {b!r}: no function-preserving surgery")

    same("network.torso", om.torso_kind, nm.torso_kind)
    same("network.activation", om.activation, nm.activation)
    same("network.shared_torso (as built)", om.shared_torso, nm.shared_torso)
    same("network.image_key", om.image_key, nm.image_key)
    same("network.mirror", om.mirror, nm.mirror)
    same("network.team_pool", om.team_pool, nm.team_pool)
    same("network.text_key", om.text_key, nm.text_key)
    same("network.text_size", om.text_size, nm.text_size)
    if om.entity_key or nm.entity_key or om.action_heads or nm.action_heads:
        return _derive_entities(old, new, init_scale, problems)
    same("network.cnn_kernel", om.cnn_kernel, nm.cnn_kernel)
    same("network.cnn_padding", om.cnn_padding, nm.cnn_padding)
    same("network.normalize_obs", old.normalize_obs, new.normalize_obs)
    if old.normalize_obs:
        same("network.obs_clip", old.obs_clip, new.obs_clip)
    if om.torso_kind != "mlp":
        same("network.image_scale", old.image_scale, new.image_scale)
        same("image layout", old.image_layout, new.image_layout)
    same("num_players", old.spec.num_players, new.spec.num_players)
    if bool(om.core_size) != bool(nm.core_size):
        problems.append(
            f"network.core changes ({'lstm' if om.core_size else 'none'} -> "
            f"{'lstm' if nm.core_size else 'none'}): adding or removing a core is not "
            "function-preserving"
        )
    if problems:
        raise PlanError("; ".join(problems))

    _derive_observations(_torso_inputs(old), _torso_inputs(new), problems, plan)
    if om.text_key and plan:
        problems.append(
            f"observations {sorted(_torso_inputs(old))} change, and the text encoder's features "
            f"(network.text_key={om.text_key!r}) follow them in the torso's first layer: surgery "
            "does not move them"
        )
    names = _torso_names(om)
    if om.torso_kind == "mlp":
        _derive_mlp(om, nm, names, mode, init_scale, problems, plan)
    else:
        _derive_cnn(om, nm, mode, init_scale, problems, plan)
    widened = [op.path for op in plan if isinstance(op, WidenDense)]
    if om.team_pool and any(p.split("/")[2:] == [_last_torso_layer(om)] for p in widened):
        problems.append(
            f"network.team_pool={om.team_pool}: the heads read the torso's last layer and its "
            f"pooled share ([F + S] features); widening {_last_torso_layer(om)} would move the "
            "pooled features, which surgery does not do"
        )
    if nm.core_size != om.core_size:
        if nm.core_size < om.core_size:
            problems.append(
                f"network.core_size {om.core_size} -> {nm.core_size}: params/core/lstm would "
                f"shrink (hi kernel [{om.core_size}, {om.core_size}] -> "
                f"[{nm.core_size}, {nm.core_size}]); surgery only adds units"
            )
        else:
            plan.append(WidenLSTM(nm.core_size, lstm_mode, lstm_noise, init_scale))
    a_old, a_new = old.spec.num_actions, new.spec.num_actions
    if a_new < a_old:
        problems.append(
            f"num_actions {a_old} -> {a_new}: params/policy_head/logits kernel would shrink from "
            f"[*, {a_old}] to [*, {a_new}]; surgery only adds actions (mask removed ones instead)"
        )
    elif a_new > a_old:
        plan.append(AddActions(num_new=a_new - a_old, tolerance=action_tolerance))
    if problems:
        raise PlanError("; ".join(problems))
    return Plan(tuple(plan))


def _derive_entities(old, new, init_scale: float, problems: list[str]) -> Plan:
    """Networks with an entity encoder or factorized actions: their entity attributes and the
    encoder's width may grow (surgery/entities.py); everything else must stay as it is, since the
    torso ops do not know the pointer heads that read the torso's features."""
    om, nm = old.module, new.module
    plan: list = []

    def same(what, a, b):
        if a != b:
            problems.append(
                f"{what} changes from {a!r} to {b!r}: with network.entities or factorized "
                "actions, surgery only adds entity attributes and widens the entity encoder"
            )

    same("network.entities", om.entity_key, nm.entity_key)
    same("network.entity_heads", om.entity_heads, nm.entity_heads)
    same("network.pointer_heads", tuple(om.pointer_heads), tuple(nm.pointer_heads))
    same("action heads", old.spec.head_sizes, new.spec.head_sizes)
    for field in ("hidden_sizes", "residual_blocks", "cnn_channels", "cnn_hidden", "core_size"):
        same(f"network.{field}", getattr(om, field), getattr(nm, field))
    same("observations", _torso_inputs(old), _torso_inputs(new))
    same("extras", old.spec.extras, new.spec.extras)
    if om.entity_key and om.entity_key == nm.entity_key:
        (e_old, f_old), (e_new, f_new) = (
            net.spec.observation[om.entity_key].shape for net in (old, new)
        )
        same(f"entity slots of {om.entity_key!r}", e_old, e_new)
        if f_new < f_old:
            problems.append(f"entity attributes {f_old} -> {f_new}: surgery only adds them")
        elif f_new > f_old:
            plan.append(AddEntityAttributes(f_old, f_new))
        if nm.entity_size < om.entity_size:
            problems.append(
                f"network.entity_size {om.entity_size} -> {nm.entity_size}: surgery only widens"
            )
        elif nm.entity_size > om.entity_size:
            plan.append(WidenEntities(nm.entity_size, init_scale))
    if problems:
        raise PlanError("; ".join(problems))
    return Plan(tuple(plan))


def _last_torso_layer(module) -> str:
    """The torso layer whose width the heads read (the path below params/<torso>/)."""
    if module.torso_kind != "mlp":
        return "dense_0"
    return f"dense_{len(module.hidden_sizes) - 1}"  # residual blocks keep its width


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


def _derive_mlp(om, nm, names, mode, init_scale, problems, plan):
    old_h, new_h = tuple(om.hidden_sizes), tuple(nm.hidden_sizes)
    if len(old_h) != len(new_h):
        problems.append(
            f"network.hidden_sizes {old_h} -> {new_h}: adding or removing a dense layer is not "
            f"function-preserving with {om.activation}; add residual blocks instead"
        )
        return
    for i, (o, n) in enumerate(zip(old_h, new_h)):
        paths = [f"params/{t}/dense_{i}" for t in names]
        if n < o:
            problems.append(
                f"network.hidden_sizes[{i}] {o} -> {n}: {' and '.join(paths)} would shrink from "
                f"{o} to {n} units (kernel [*, {o}] -> [*, {n}]); surgery only adds units"
            )
        elif n > o:
            plan.extend(WidenDense(p, n, mode, init_scale) for p in paths)
    if nm.residual_blocks < om.residual_blocks:
        problems.append(
            f"network.residual_blocks {om.residual_blocks} -> {nm.residual_blocks}: removing "
            f"params/{names[0]}/res_{nm.residual_blocks}.. is not function-preserving"
        )
    for _ in range(nm.residual_blocks - om.residual_blocks):
        plan.extend(AddResidualBlock(f"params/{t}") for t in names)


def _derive_cnn(om, nm, mode, init_scale, problems, plan):
    (old_c, old_hidden), (new_c, new_hidden) = _cnn_resolved(om), _cnn_resolved(nm)
    impala = om.torso_kind == "impala_cnn"
    if len(old_c) != len(new_c):
        problems.append(
            f"network.cnn_channels {old_c} -> {new_c}: adding or removing conv layers is not "
            "supported"
        )
        return
    for i, (o, n) in enumerate(zip(old_c, new_c)):
        path = f"params/torso/stack_{i}/conv" if impala else f"params/torso/conv_{i}"
        if n < o:
            problems.append(
                f"network.cnn_channels[{i}] {o} -> {n}: {path} would shrink from {o} to {n} "
                "filters; surgery only adds units"
            )
        elif n > o:
            plan.append(WidenConv(path, n, mode, init_scale))
    if new_hidden < old_hidden:
        problems.append(
            f"network.cnn_hidden {old_hidden} -> {new_hidden}: params/torso/dense_0 would shrink"
        )
    elif new_hidden > old_hidden:
        plan.append(WidenDense("params/torso/dense_0", new_hidden, mode, init_scale))


def config_from_params(config, params) -> ml_collections.ConfigDict:
    """`config` (a full experiment config) with its network section read from `params`.

    Used when a hand-written plan is applied without a new config file: the layer sizes,
    residual blocks, CNN channels and LSTM size of the transformed parameters become the new
    config (the env section is unchanged, so observation and action changes need a new config).
    """
    out = ml_collections.ConfigDict(config.to_dict())
    net = out.network
    flat = ops.flatten_params(params)
    names = sorted({p[1] for p in flat if len(p) > 2 and p[1] in ops.TORSOS})

    def kernel(*path):
        return np.shape(flat[("params", *path, "kernel")])

    def layers(torso, stem):
        return ops._indices(flat, ("params", torso), stem)

    per_torso = {}
    for t in names:
        if layers(t, "stack"):
            stacks = layers(t, "stack")
            per_torso[t] = {"cnn_channels": [kernel(t, f"stack_{i}", "conv")[-1] for i in stacks]}
            per_torso[t]["cnn_hidden"] = kernel(t, "dense_0")[1]
        elif layers(t, "conv"):
            per_torso[t] = {"cnn_channels": [kernel(t, f"conv_{i}")[-1] for i in layers(t, "conv")]}
            per_torso[t]["cnn_hidden"] = kernel(t, "dense_0")[1]
        else:
            per_torso[t] = {
                "hidden_sizes": [kernel(t, f"dense_{i}")[1] for i in layers(t, "dense")],
                "residual_blocks": len(layers(t, "res")),
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
    if ("params", "core", "lstm", "hi", "kernel") in flat:
        net.core_size = int(np.shape(flat[("params", "core", "lstm", "hi", "kernel")])[0])
    return out


def _default_cnn(torso: str | None) -> tuple[tuple[int, ...], int]:
    cls = torsos.CNN_TORSOS[torso]
    return tuple(cls.channels), int(cls.hidden_size)


__all__ = [
    "AddActions",
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
