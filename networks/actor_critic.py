"""The policy/value network used by the server (acting) and the learner (training).

`Network` bundles a Flax module with the preprocessing that happens outside it (running mean/std
normalization of float inputs, uint8 scaling, image layout), so acting and learning run exactly the
same function of (params, obs_norm, obs, carry).

Parameter paths (`layer_graph` tells surgery which layer reads which; see networks/graph.py):
  torso:      params/torso/... (shared), or params/policy_torso/... and params/value_torso/...
              MLP: dense_i, res_j/dense_{0,1}; Nature CNN: conv_0..2, dense_0;
              IMPALA CNN: stack_i/{conv, block_j/conv_k}, dense_0
  core:       params/core/lstm/{ii,if,ig,io,hi,hf,hg,ho} (flax LSTMCell, one Dense per gate)
  heads:      params/policy_head/logits, params/value_head/value; continuous dimensions
              params/gaussian_head/{mean, log_std} (log_std a vector, or a Dense layer when
              state-dependent)
  text:       params/text_encoder/{embed, gru} (with network.text_key)
  entities:   params/entity_encoder/{embed, attention/{query,key,value,out}, mlp}
              (with network.entities); pointer heads params/pointers_<i>/{query, key, extra}
              for action head i, the other heads' logits side by side in params/policy_head/logits

A factorized action (EnvSpec.action_heads) has one categorical per argument, independent given
the features; a pointer head (network.pointer_heads) chooses an entity of the set
`network.entities` by attention from the features to the entities' embeddings.

With `team_pool` (OpenAI Five's cross-hero pool) the torso also runs on each teammate's
observation (keys "teammates/...", seedlike/envs/teammates.py) and its features gain a max-pool
over the agent and its present teammates: the heads then read [F + S] features, S = the pooled
share of F.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from networks import board, entities, graph, heads, normalization, torsos
from networks.entities import EntityEncoder
from networks.graph import LayerGraph
from networks.text import TextEncoder
from seedlike.types import MISSION_VOCAB_SIZE, TEAMMATES, ArraySpec, EnvSpec
from seedlike.types import TEAMMATES_PRESENT as PRESENT

BOARD_LINES = "_lines"  # the suffix of the line-features input (Network.board_lines)


class LSTMCore(nn.Module):
    """An LSTM whose carry is zeroed where `first` marks the first step of an episode."""

    features: int

    @nn.compact
    def __call__(self, carry, x: jax.Array, first: jax.Array):
        carry = jax.tree.map(lambda c: jnp.where(first[:, None], jnp.zeros_like(c), c), carry)
        return nn.LSTMCell(self.features, name="lstm")(carry, x)


def team_max_pool(h: jax.Array, present: jax.Array, pooled: int) -> jax.Array:
    """OpenAI Five's cross-hero pool: the agent's features and a max-pool of the first `pooled`
    features over itself and its teammates that are present.

    Args:
      h: float [N, K, F], features of the agent (k = 0) and of its K-1 teammates.
      present: bool [N, K], which of them are in the game (k = 0 always).
      pooled: S <= F.

    Returns:
      [N, F + S]: h[:, 0] followed by max_k h[:, k, :S] over the present k. Absent teammates are
      masked with -inf, so they neither change the pool nor receive gradient.
    """
    masked = jnp.where(present[..., None], h[..., :pooled], -jnp.inf)
    return jnp.concatenate([h[:, 0], jnp.max(masked, axis=1)], axis=-1)


def pooled_size(features: int, share: float) -> int:
    """S, the pooled features of `team_max_pool` for a torso of `features` and a pooled share."""
    return min(features, max(1, round(share * features)))


@dataclasses.dataclass(frozen=True)
class TorsoSpec:
    """The torso: what turns observations into features (networks/torsos.py), and how it is
    applied (once, on the board and its mirror image, or on the agent and its teammates).

    Attributes:
      kind: "mlp" or one of torsos.CNN_TORSOS.
      hidden_sizes, activation, residual_blocks, layer_norm: an MLP's layers.
      shared: one torso for policy and value (always with a CNN or a core), or one each.
      cnn_channels, cnn_hidden, cnn_kernel, cnn_padding: a CNN's; None, 0 and "" leave the
        torso's own (the paper's) value.
      image_key: the image observation a CNN reads ([N, H, W, C] inside the network).
      space_to_depth: the Nature CNN's stride-2 conv over 2x2 blocks (same function).
      mirror: left-right symmetric boards: "columns" (an action per column, Connect Four) or
        "cells" (an action per cell, row-major, TicTacToe); "" = off (`mirror_actions`).
      board_width: W of the mirrored board.
      team_pool: > 0: pool this share of the features across teammates (team_max_pool); the
        inputs then hold "teammates/<key>" [N, K-1, ...] and "teammates/present" [N, K-1].
    """

    kind: str
    hidden_sizes: tuple[int, ...]
    activation: str
    residual_blocks: int
    layer_norm: bool
    shared: bool
    cnn_channels: tuple[int, ...] | None
    cnn_hidden: int | None
    cnn_kernel: int
    cnn_padding: str
    image_key: str | None
    space_to_depth: bool
    mirror: str
    board_width: int
    team_pool: float


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """Encoders beside the torso, whose features join its other (non-image) inputs.

    Attributes:
      text_key: an input of word ids [N, L] read by a TextEncoder; "": none.
      text_size: its embedding and GRU width.
      entity_key: an entity set input [N, E, F] read by an EntityEncoder
        (networks/entities.py); "": none.
      num_entities: E.
      entity_size, entity_heads: its width and attention heads.
    """

    text_key: str
    text_size: int
    entity_key: str
    num_entities: int
    entity_size: int
    entity_heads: int


@dataclasses.dataclass(frozen=True)
class CoreSpec:
    """The recurrent core between torso and heads: an LSTM of `size` units; 0: feed-forward."""

    size: int


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """The heads: what the policy outputs, and the value head beside it.

    Attributes:
      num_actions: discrete choices in all (0: continuous actions only).
      action_heads: a factorized action's argument sizes (EnvSpec.action_heads); () for one
        categorical.
      policy: the policy head module of the dense choices, a key of heads.POLICY_HEADS.
      pointer_heads: action heads (indices into action_heads) that point into the entity set:
        their first E choices are the entities, any further ones ordinary logits.
      autoregressive: each factorized head also reads the arguments chosen before it
        (heads.Autoregressive); the logits then depend on the action, and acting samples head
        by head (`act`).
      continuous: D continuous action dimensions (EnvSpec.continuous): a diagonal Gaussian head
        whose mean and log-std follow the categoricals' logits.
      state_dependent_std, log_std_init: the Gaussian's log-std (heads.GaussianHead).
      atoms, dueling, value_range, noisy: a Q head's (policy "q", heads.QHead); such a network
        has no value head: its value is the greedy action's Q.
    """

    num_actions: int
    action_heads: tuple[int, ...]
    policy: str
    pointer_heads: tuple[int, ...]
    autoregressive: bool
    continuous: int
    state_dependent_std: bool
    log_std_init: float
    atoms: int = 1
    dueling: bool = False
    value_range: tuple[float, float] = (-10.0, 10.0)
    noisy: bool = False

    @property
    def q(self) -> bool:
        return heads.action_values(self.policy)


SPECS = {
    "torso_spec": TorsoSpec,
    "encoders": EncoderSpec,
    "core_spec": CoreSpec,
    "head_spec": HeadSpec,
}


class ActorCritic(nn.Module):
    """Torso -> optional LSTM core -> policy logits and value, described by four specs.

    Inputs are dicts of float arrays with one batch dimension [N, ...]; the torso spec's
    `image_key` names the image input of CNN torsos ([N, H, W, C]); other inputs are flattened
    and join the CNN features.

    The encoders (torsos.py, text.py, entities.py) and the heads (`head_modules`, heads.py) are
    modules of their own, and each names its layers for surgery (their `graph`; `layer_graph`
    joins the parts). A new policy head is a module with its `graph` and one line in
    heads.POLICY_HEADS (network.policy_head selects it); tests/integration/test_extending.py adds
    one from outside.
    """

    torso_spec: TorsoSpec
    encoders: EncoderSpec
    core_spec: CoreSpec
    head_spec: HeadSpec

    def with_fields(self, **fields) -> ActorCritic:
        """An unbound copy with these spec fields changed (each name is a field of one spec)."""
        specs = {name: getattr(self, name) for name in SPECS}
        for field, value in fields.items():
            (name,) = [n for n, cls in SPECS.items() if field in cls.__dataclass_fields__]
            specs[name] = dataclasses.replace(specs[name], **{field: value})
        return self.clone(parent=None, **specs)

    @property
    def head_sizes(self) -> tuple[int, ...]:
        return tuple(self.head_spec.action_heads) or (
            (self.head_spec.num_actions,) if self.head_spec.num_actions else ()
        )

    def setup(self):
        if self.torso_spec.kind == "mlp" and not self.torso_spec.shared:
            self.policy_torso = make_torso(self)
            self.value_torso = make_torso(self)
        else:
            self.torso = make_torso(self)
        if self.core_spec.size:
            self.core = LSTMCore(self.core_spec.size)
        if self.encoders.text_key:
            self.text_encoder = TextEncoder(MISSION_VOCAB_SIZE, self.encoders.text_size)
        if self.encoders.entity_key:
            self.entity_encoder = EntityEncoder(
                self.encoders.entity_size, self.encoders.entity_heads
            )
        for name, head in self.head_modules().items():
            setattr(self, name, head)

    def torso_module(self, **kwargs) -> nn.Module:
        """A torso module of this network (kwargs: e.g. parent=None outside `setup`)."""
        return make_torso(self, **kwargs)

    def encoder_modules(self, **kwargs) -> dict[str, nn.Module]:
        """The text and entity encoders by module name, where the network has them."""
        out = {}
        if self.encoders.text_key:
            out["text_encoder"] = TextEncoder(MISSION_VOCAB_SIZE, self.encoders.text_size, **kwargs)
        if self.encoders.entity_key:
            out["entity_encoder"] = EntityEncoder(
                self.encoders.entity_size, self.encoders.entity_heads, **kwargs
            )
        return out

    def head_modules(self, **kwargs) -> dict[str, nn.Module]:
        """The heads by module name (kwargs: e.g. parent=None for ones outside `setup`, as
        `layer_graph` reads their parts): `policy_head`, the categorical arguments' logits side by
        side; `gaussian_head` for continuous dimensions; `pointers_<i>` for pointer head i;
        `conditioning`, the autoregressive heads' argument tables; `value_head`."""
        sizes, out = self.head_sizes, {}
        dense = sum(n for i, n in enumerate(sizes) if i not in self.head_spec.pointer_heads)
        if dense:
            head = heads.POLICY_HEADS[self.head_spec.policy]
            make = getattr(head, "from_spec", None)
            out["policy_head"] = (
                make(dense, self.head_spec, **kwargs) if make else head(dense, **kwargs)
            )
        if self.head_spec.continuous:
            out["gaussian_head"] = heads.GaussianHead(
                self.head_spec.continuous,
                self.head_spec.state_dependent_std,
                self.head_spec.log_std_init,
                **kwargs,
            )
        for i in self.head_spec.pointer_heads:
            extra = sizes[i] - self.encoders.num_entities
            out[f"pointers_{i}"] = heads.PointerHead(extra=extra, **kwargs)
        if self.head_spec.autoregressive:
            out["conditioning"] = heads.Autoregressive(sizes, **kwargs)
        if not self.head_spec.q:
            out["value_head"] = heads.ValueHead(**kwargs)
        return out

    def _pointer(self, i: int) -> nn.Module:
        return getattr(self, f"pointers_{i}")

    def encode(self, inputs: dict) -> tuple[jax.Array, jax.Array, dict]:
        """Policy and value features [N, F] (the same array for a shared torso), and what the
        heads read besides: {"entities": [N, E, D], "present": bool [N, E]} for pointer heads,
        else {}.

        A mirrored network returns [N, 2F]: the features of the board and of its mirror image,
        which `outputs` turns into one equivariant policy and one invariant value.
        """
        if self.torso_spec.team_pool:
            return (*self._encode_team(inputs), {})
        if not self.torso_spec.mirror:
            return self._encode(inputs)
        flipped = {k: jnp.flip(v, axis=2) for k, v in inputs.items()}  # [N, H, W, C]: W
        (p, v, _), (pm, vm, _) = self._encode(inputs), self._encode(flipped)
        return jnp.concatenate([p, pm], -1), jnp.concatenate([v, vm], -1), {}

    def _encode_team(self, inputs: dict) -> tuple[jax.Array, jax.Array]:
        """The torso on the agent and its teammates in one pass, then team_max_pool."""
        present = inputs[PRESENT] > 0
        n, mates = present.shape
        agents = {}
        for key, own in inputs.items():
            if key.startswith(TEAMMATES):
                continue
            both = jnp.concatenate([own[:, None], inputs[TEAMMATES + key]], axis=1)
            agents[key] = both.reshape((n * (mates + 1),) + own.shape[1:])
        present = jnp.concatenate([jnp.ones((n, 1), bool), present], axis=1)

        def pool(h):
            h = h.reshape(n, mates + 1, -1)
            return team_max_pool(h, present, pooled_size(h.shape[-1], self.torso_spec.team_pool))

        policy_h, value_h, _ = self._encode(agents)
        if policy_h is value_h:
            pooled = pool(policy_h)
            return pooled, pooled
        return pool(policy_h), pool(value_h)

    def _encode(self, inputs: dict) -> tuple[jax.Array, jax.Array, dict]:
        inputs, encoded, ctx = dict(inputs), [], {}
        if self.encoders.text_key:
            encoded.append(self.text_encoder(inputs.pop(self.encoders.text_key)))
        if self.encoders.entity_key:
            units = inputs.pop(self.encoders.entity_key)
            mask = entities.present(units)
            pooled, embedded = self.entity_encoder(units, mask)
            encoded.append(pooled)
            ctx = {"entities": embedded, "present": mask}
        if self.torso_spec.kind == "mlp":
            flat = jnp.concatenate(
                ([torsos.flatten_features(inputs, 1)] if inputs else []) + encoded, -1
            )
            if not self.torso_spec.shared:
                return self.policy_torso(flat), self.value_torso(flat), ctx
            h = self.torso(flat)
            return h, h, ctx
        others = {k: v for k, v in inputs.items() if k != self.torso_spec.image_key}
        parts = ([torsos.flatten_features(others, 1)] if others else []) + encoded
        extra = jnp.concatenate(parts, -1) if parts else None
        h = self.torso(inputs[self.torso_spec.image_key], extra)
        return h, h, ctx

    def core_step(self, carry, x: jax.Array, first: jax.Array):
        return self.core(carry, x, first)

    def outputs(self, policy_h, value_h, ctx=None, args=None) -> tuple[jax.Array, jax.Array]:
        """Logits and values from the features; `args` int [N, H]: the arguments of the actions
        taken, which an autoregressive network's later heads condition on."""
        if self.head_spec.q:  # no value head: the greedy action's value
            outputs = self._logits(policy_h, ctx, args)
            h = self.head_spec
            return outputs, heads.q_values(outputs, h.atoms, h.value_range).max(-1)
        if not self.torso_spec.mirror:
            return self._logits(policy_h, ctx, args), self.value_head(value_h)
        # pi(a | s) from the average of the logits for s and, with actions mirrored back, for
        # mirror(s): the policy is exactly equivariant and the value invariant, and every game
        # teaches both orientations.
        p, pm = jnp.split(policy_h, 2, axis=-1)
        v, vm = jnp.split(value_h, 2, axis=-1)
        mirrored = self.policy_head(pm)[
            ...,
            mirror_actions(
                self.torso_spec.mirror, self.head_spec.num_actions, self.torso_spec.board_width
            ),
        ]
        logits = 0.5 * (self.policy_head(p) + mirrored)
        return logits, 0.5 * (self.value_head(v) + self.value_head(vm))

    def _logits(self, h: jax.Array, ctx, args=None) -> jax.Array:
        """The distribution's parameters: the categoricals' logits, then the Gaussian's mean and
        log-std (heads.ActionLayout)."""
        parts = [self._categorical_logits(h, ctx, args)] if self.head_sizes else []
        if self.head_spec.continuous:
            parts.append(self.gaussian_head(h))
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)

    def _categorical_logits(self, h: jax.Array, ctx, args=None) -> jax.Array:
        """The heads' logits side by side: pointer heads attend to ctx's entities."""
        if self.head_spec.autoregressive:
            inputs = self.conditioning(h, args)
            return jnp.concatenate(
                [self._head_logits(i, x, ctx) for i, x in enumerate(inputs)], axis=-1
            )
        if not self.head_spec.pointer_heads:
            return self.policy_head(h)
        dense = (
            self.policy_head(h)
            if len(self.head_spec.pointer_heads) < len(self.head_sizes)
            else None
        )
        parts, start = [], 0
        for i, n in enumerate(self.head_sizes):
            if i in self.head_spec.pointer_heads:
                parts.append(self._pointer(i)(h, ctx["entities"], ctx["present"]))
            else:
                parts.append(dense[:, start : start + n])
                start += n
        return jnp.concatenate(parts, axis=-1)

    def _head_logits(self, i: int, h: jax.Array, ctx) -> jax.Array:
        """Head i's logits [N, n_i] from its input h."""
        if i in self.head_spec.pointer_heads:
            return self._pointer(i)(h, ctx["entities"], ctx["present"])
        start = sum(
            n for j, n in enumerate(self.head_sizes[:i]) if j not in self.head_spec.pointer_heads
        )
        return self.policy_head(h)[:, start : start + self.head_sizes[i]]

    def act(self, inputs: dict, carry, first, mask, key, greedy: bool):
        """One autoregressive step: (action int32 [N], log pi(action) [N], value [N], carry).

        Head i's legal choices come from its part of `mask` (bool [N, n_1 + ... + n_H] or None);
        it is sampled (or taken greedily) given the arguments already chosen.
        """
        policy_h, value_h, ctx, carry = self._features(inputs, carry, first)
        sizes = self.head_sizes
        masks = heads.split(mask, sizes) if mask is not None else [None] * len(sizes)
        args = jnp.zeros((policy_h.shape[0], len(sizes)), jnp.int32)
        logp = jnp.zeros(policy_h.shape[0], jnp.float32)
        for i, k in enumerate(jax.random.split(key, len(sizes))):
            logits = self._head_logits(i, self.conditioning(policy_h, args)[i], ctx)
            logits = heads.apply_mask(logits, masks[i])
            arg = heads.greedy(logits) if greedy else heads.sample(k, logits)
            logp = logp + heads.log_prob(logits, arg)
            args = args.at[:, i].set(arg)
        action = heads.join([args[:, i] for i in range(len(sizes))], sizes)
        return action, logp, self.value_head(value_h), carry

    def _features(self, inputs: dict, carry, first):
        """What the heads read: (policy features, value features, ctx, new carry)."""
        policy_h, value_h, ctx = self.encode(inputs)
        if self.core_spec.size:
            carry, policy_h = self.core_step(carry, policy_h, first)
            value_h = policy_h
        return policy_h, value_h, ctx, carry

    def __call__(self, inputs: dict, carry=(), first=None, args=None):
        policy_h, value_h, ctx, carry = self._features(inputs, carry, first)
        logits, value = self.outputs(policy_h, value_h, ctx, args)
        return logits, value, carry


def make_torso(module: ActorCritic, **kwargs):
    """The torso module of an ActorCritic (kwargs: e.g. parent=None for one outside `setup`)."""
    m = module
    if m.torso_spec.kind == "mlp":
        return torsos.MLP(
            m.torso_spec.hidden_sizes,
            m.torso_spec.activation,
            m.torso_spec.residual_blocks,
            m.torso_spec.layer_norm,
            **kwargs,
        )
    if m.torso_spec.cnn_channels is not None:
        kwargs["channels"] = tuple(m.torso_spec.cnn_channels)
    if m.torso_spec.cnn_hidden is not None:
        kwargs["hidden_size"] = m.torso_spec.cnn_hidden
    if m.torso_spec.kind == "nature_cnn":
        kwargs["space_to_depth"] = m.torso_spec.space_to_depth
    if m.torso_spec.cnn_kernel:
        kwargs["kernel_size"] = m.torso_spec.cnn_kernel
    if m.torso_spec.cnn_padding:
        kwargs["padding"] = m.torso_spec.cnn_padding
    if m.torso_spec.layer_norm:
        kwargs["layer_norm"] = True
    return torsos.CNN_TORSOS[m.torso_spec.kind](**kwargs)


def _noise(key) -> dict:
    """The rngs of a module call: a noisy Q head's "noise" key where one is given."""
    return {} if key is None else {"noise": key}


def mirror_actions(kind: str, num_actions: int, width: int) -> np.ndarray:
    """Index array m with m[a] = the action that mirrors a left-right on a board W wide.

    "columns": action a is column a of the board (Connect Four), so m[a] = A - 1 - a.
    "cells": action a is cell (a // W, a % W), so m[a] = row * W + W - 1 - col (TicTacToe).
    """
    if kind == "columns":
        return np.arange(num_actions)[::-1].copy()
    if kind == "cells":
        cells = np.arange(num_actions).reshape(-1, width)
        return cells[:, ::-1].reshape(-1).copy()
    raise ValueError(f"network.mirror={kind!r} is not one of '', 'columns', 'cells'")


@dataclasses.dataclass(frozen=True)
class Network:
    """Pure functions of (params, obs_norm, obs, extras[, carry, first]) and their initializers.

    Observations are dicts key -> [*batch, *spec.shape]. Feed-forward networks have carry ().
    """

    spec: EnvSpec
    module: ActorCritic
    normalize_obs: bool = True
    obs_clip: float = normalization.DEFAULT_CLIP
    image_layout: str = "HWC"  # layout of spec.observation[module.torso_spec.image_key]
    image_scale: float = 1.0 / 255.0
    # Continuous dimensions: the env gets tanh(u) of the Gaussian's sample u (heads.ActionLayout).
    action_squash: bool = False
    # > 0: the torso also reads networks/board.py's line features of observation `board_key`
    # (cells that complete `board_lines` in a row for either side, playable cells), as the input
    # "<board_key>_lines".
    board_lines: int = 0
    board_gravity: bool = False
    board_key: str = ""

    @property
    def input_spec(self) -> dict[str, ArraySpec]:
        """What the module reads: the observations, and the derived line features if any."""
        spec = dict(self.spec.observation)
        if self.board_lines:
            h, w, _ = spec[self.board_key].shape
            spec[self.board_key + BOARD_LINES] = ArraySpec(np.float32, (h, w, board.FEATURES))
        return spec

    @property
    def is_recurrent(self) -> bool:
        return self.module.core_spec.size > 0

    @property
    def action_sizes(self) -> tuple[int, ...] | heads.ActionLayout | None:
        """How the distribution functions (heads.log_prob etc.) read the policy's outputs: the
        argument sizes of a factorized action, None for one categorical, an ActionLayout with
        continuous dimensions."""
        if self.spec.continuous:
            return heads.ActionLayout(
                tuple(self.spec.action_heads), self.spec.continuous, self.action_squash
            )
        return self.spec.action_heads or None

    def layer_graph(self) -> LayerGraph:
        """Which parameters read which units (networks/graph.py), for surgery."""
        return graph.layer_graph(self.module, self.feature_positions())

    def feature_positions(self) -> int:
        """H*W of a CNN torso's last feature map (0 for MLP torsos)."""
        m = self.module
        if m.torso_spec.kind == "mlp":
            return 0
        # dense_0 reads the flattened last feature map, then the other (flattened) inputs; its
        # kernel's rows give H*W whatever the convs, strides and pools of the torso.
        rows = jax.eval_shape(self.init, jax.random.key(0))["params"]["torso"]["dense_0"]
        others = sum(
            int(np.prod(s.shape))
            for k, s in self.input_spec.items()
            if k not in (m.torso_spec.image_key, m.encoders.text_key, m.encoders.entity_key)
            and not (m.torso_spec.team_pool and k.startswith(TEAMMATES))
        )
        others += (m.encoders.text_size if m.encoders.text_key else 0) + (
            m.encoders.entity_size if m.encoders.entity_key else 0
        )
        return (rows["kernel"].shape[0] - others) // make_torso(m, parent=None).channels[-1]

    def init(self, rng: jax.Array):
        obs = {k: jnp.zeros((1, *s.shape), s.dtype) for k, s in self.spec.observation.items()}
        inputs = self._inputs(self.init_obs_norm(), obs, 1)
        args = jnp.zeros((1, len(self.spec.head_sizes)), jnp.int32)  # read if autoregressive
        return self.module.init(rng, inputs, self.initial_carry(1), jnp.ones((1,), bool), args)

    def init_obs_norm(self) -> dict[str, normalization.RunningStats]:
        """Running statistics for every float observation key (others are not normalized)."""
        if not self.normalize_obs:
            return {}
        return {
            k: normalization.init_stats(s.shape)
            for k, s in self.spec.observation.items()
            if np.issubdtype(s.dtype, np.floating)
            and not k.startswith(TEAMMATES)
            and k
            != self.module.encoders.entity_key  # symlog-scaled in the encoder (networks/entities)
        }

    def initial_carry(self, batch: int):
        if not self.is_recurrent:
            return ()
        zeros = jnp.zeros((batch, self.module.core_spec.size), jnp.float32)
        return (zeros, zeros)

    def _args(self, actions, batch_shape) -> jax.Array | None:
        """int32 [n, H] arguments of the taken actions, for an autoregressive network's logits."""
        if not self.module.head_spec.autoregressive:
            return None
        if actions is None:
            raise ValueError(
                "network.autoregressive: the logits of later heads depend on the arguments "
                "chosen before them, so pass the actions taken (or act() to choose them)"
            )
        n = int(np.prod(batch_shape, dtype=np.int64))
        actions = jnp.reshape(actions, (n,))
        return jnp.stack(heads.digits(actions, self.spec.head_sizes), axis=-1)

    def step(self, params, obs_norm, obs, extras, carry, first, actions=None, noise=None):
        """One step for a batch: obs [N, ...], carry [N, ...], first bool [N].

        Returns masked logits [N, A], values [N] and the new carry. An autoregressive network
        needs the actions taken [N] (its logits are those of each argument given the ones before).
        `noise`: a key for a noisy Q head's weight noise (None: its mean weights).
        """
        inputs = self._inputs(obs_norm, obs, 1)
        args = self._args(actions, first.shape)
        logits, value, carry = self.module.apply(
            params, inputs, carry, first, args, rngs=_noise(noise)
        )
        mask = (extras or {}).get("legal_action_mask")
        return self._masked(logits, mask), value, carry

    @property
    def q(self) -> bool:
        """Whether the policy head outputs action values (heads.QHead)."""
        return self.module.head_spec.q

    def q_values(self, outputs: jax.Array) -> jax.Array:
        """Q(s, a) [..., A] from a Q network's outputs (heads.q_values)."""
        h = self.module.head_spec
        return heads.q_values(outputs, h.atoms, h.value_range)

    def act(
        self, params, obs_norm, obs, extras, carry, first, key, greedy: bool = False, epsilon=None
    ):
        """Chooses actions for a batch (sampled, or greedy): (action int32 [N], log pi(action) [N],
        value [N], carry). Autoregressive networks choose argument by argument. A Q network acts
        epsilon-greedily with each row's epsilon [N] (None: greedily)."""
        if self.q:
            noisy = self.module.head_spec.noisy and not greedy
            key, noise = jax.random.split(key)
            outputs, value, carry = self.step(
                params, obs_norm, obs, extras, carry, first, noise=noise if noisy else None
            )
            q = self.q_values(outputs)
            if greedy or epsilon is None:
                return q.argmax(-1).astype(jnp.int32), jnp.zeros_like(value), value, carry
            action, logp = heads.epsilon_greedy(key, q, epsilon)
            return action, logp, value, carry
        mask = (extras or {}).get("legal_action_mask")
        if self.module.head_spec.autoregressive:
            inputs = self._inputs(obs_norm, obs, 1)
            return self.module.apply(
                params, inputs, carry, first, mask, key, greedy, method=ActorCritic.act
            )
        logits, value, carry = self.step(params, obs_norm, obs, extras, carry, first)
        sizes = self.action_sizes
        action = heads.greedy(logits, sizes) if greedy else heads.sample(key, logits, sizes)
        return action, heads.log_prob(logits, action, sizes), value, carry

    def unroll(self, params, obs_norm, obs, extras, carry, first, actions=None):
        """A sequence per batch row: obs [B, T, ...], carry [B, ...], first bool [B, T].

        The torso runs on all B*T steps at once; only the core scans over time. Returns masked
        logits [B, T, A], values [B, T] and the final carry (`actions` [B, T]: as in `step`).
        """
        key = next(iter(self.spec.observation))
        b, t = obs[key].shape[:2]
        args = self._args(actions, (b, t))
        flat = jax.tree.map(lambda x: x.reshape((b * t,) + x.shape[2:]), obs)
        policy_h, value_h, ctx = self.module.apply(
            params, self._inputs(obs_norm, flat, 1), method=ActorCritic.encode
        )
        if self.is_recurrent:

            def scan_step(c, xs):
                x, f = xs
                return self.module.apply(params, c, x, f, method=ActorCritic.core_step)

            time_major = jnp.swapaxes(policy_h.reshape((b, t, -1)), 0, 1)
            carry, h = jax.lax.scan(scan_step, carry, (time_major, jnp.swapaxes(first, 0, 1)))
            policy_h = value_h = jnp.swapaxes(h, 0, 1).reshape((b * t, -1))
        logits, value = self.module.apply(
            params, policy_h, value_h, ctx, args, method=ActorCritic.outputs
        )
        logits = logits.reshape((b, t, -1))
        mask = (extras or {}).get("legal_action_mask")
        return self._masked(logits, mask), value.reshape((b, t)), carry

    def apply(self, params, obs_norm, obs, extras=None, actions=None, noise=None):
        """Feed-forward networks only: logits [*batch, A] and values [*batch] for any batch dims
        (`actions` [*batch] and `noise`: as in `step`)."""
        if self.is_recurrent:
            raise ValueError("a recurrent network needs step() or unroll() with a carry")
        key = next(iter(self.spec.observation))
        batch_shape = obs[key].shape[: obs[key].ndim - len(self.spec.observation[key].shape)]
        n = int(np.prod(batch_shape, dtype=np.int64))
        flat = jax.tree.map(lambda x: x.reshape((n,) + x.shape[len(batch_shape) :]), obs)
        inputs = self._inputs(obs_norm, flat, 1)
        logits, value, _ = self.module.apply(
            params, inputs, (), None, self._args(actions, (n,)), rngs=_noise(noise)
        )
        logits = logits.reshape(batch_shape + (-1,))
        mask = (extras or {}).get("legal_action_mask")
        return self._masked(logits, mask), value.reshape(batch_shape)

    def _masked(self, logits: jax.Array, mask) -> jax.Array:
        """The logits with illegal choices masked; a Q head's outputs as they are (its networks
        are refused for envs that mask actions: an all-legal mask, as games.NetworkAgent passes
        for every env, changes nothing)."""
        return logits if self.q else heads.apply_mask(logits, mask, self.action_sizes)

    def _inputs(self, obs_norm, obs, batch_ndim: int) -> dict:
        inputs = {}
        for k, s in self.spec.observation.items():
            # A teammate's observation [*batch, K-1, ...] is preprocessed as the agent's own
            # (the agent's normalizer statistics), with one more batch dimension.
            own, nd = (
                (k[len(TEAMMATES) :], batch_ndim + 1)
                if k.startswith(TEAMMATES)
                else (k, batch_ndim)
            )
            x = obs[k]
            if own in obs_norm:
                x = normalization.normalize(obs_norm[own], x, self.obs_clip)
            elif own == self.module.torso_spec.image_key:
                x = x.astype(jnp.float32) * self.image_scale
                if self.image_layout == "CHW":
                    x = jnp.moveaxis(x, nd, -1)
            elif own == self.module.encoders.text_key:
                inputs[k] = x.astype(jnp.int32)  # word ids for the text encoder
                continue
            elif s.dtype == np.uint8:
                x = x.astype(jnp.float32) / 255.0
            inputs[k] = x.astype(jnp.float32)
        if self.board_lines:
            features = board.line_features(
                obs[self.board_key], self.board_lines, self.board_gravity
            )
            inputs[self.board_key + BOARD_LINES] = features
        return inputs
