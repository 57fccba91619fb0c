"""Policy, pointer, Gaussian and value heads, and the distributions the policy samples from:
masked (factorized) categoricals, diagonal Gaussians (optionally tanh-squashed), and mixes of
both."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from networks.graph import Part, Reader, Space

# A finite stand-in for -inf: masked logits stay finite so softmax and gradients never see NaN,
# while exp(-1e9 - max) is exactly 0 in float32.
MASKED_LOGIT = -1e9


class CategoricalHead(nn.Module):
    """Logits over discrete actions; small init so the initial policy is near uniform."""

    num_actions: int
    init_scale: float = 0.01

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(
            self.num_actions,
            kernel_init=nn.initializers.orthogonal(self.init_scale),
            bias_init=nn.initializers.zeros,
            name="logits",
        )(x)

    def graph(self, name: str) -> Part:
        layer = f"{name}/logits"
        why = f"params/{layer} is the policy head: use add_actions"
        spaces = {layer: Space((layer,), refused=why)}
        return Part(readers=(Reader(layer),), spaces=spaces, logits=layer)


class NoisyDense(nn.Module):
    """A dense layer with factorised Gaussian noise on its weights (NoisyNet, Fortunato et al.
    2018): w = mu + sigma * f(e_in) f(e_out)^T, b = mu_b + sigma_b * f(e_out), f(e) =
    sign(e) sqrt|e|, one noise draw per call from the "noise" rng; without that rng (greedy
    evaluation) the layer is its mean. The means are `kernel` and `bias`, as a Dense layer's."""

    features: int
    sigma0: float = 0.5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n_in = x.shape[-1]
        bound = 1.0 / math.sqrt(n_in)
        uniform = functools.partial(jax.random.uniform, minval=-bound, maxval=bound)
        sigma = nn.initializers.constant(self.sigma0 / math.sqrt(n_in))
        kernel = self.param("kernel", lambda k, s: uniform(k, s), (n_in, self.features))
        bias = self.param("bias", lambda k, s: uniform(k, s), (self.features,))
        kernel_sigma = self.param("kernel_sigma", sigma, (n_in, self.features))
        bias_sigma = self.param("bias_sigma", sigma, (self.features,))
        y = x @ kernel + bias
        if not self.has_rng("noise"):
            return y
        noise_in, noise_out = jax.random.split(self.make_rng("noise"))

        def f(e):
            return jnp.sign(e) * jnp.sqrt(jnp.abs(e))

        e_in = f(jax.random.normal(noise_in, (n_in,), x.dtype))
        e_out = f(jax.random.normal(noise_out, (self.features,), x.dtype))
        return y + ((x * e_in) @ kernel_sigma) * e_out + bias_sigma * e_out


class QHead(nn.Module):
    """Action values: Q(s, a) [N, A], or with `atoms` > 1 the logits [N, A * atoms] of each
    action's return distribution over `atoms` fixed returns spread evenly over `value_range`
    (C51, Bellemare et al. 2017: `q_values` turns them into expectations). Dueling (Wang et al.
    2016): a state value and per-action advantages, Q = V + A - mean_a A, per atom.

    The learner reads these outputs where other networks have logits (seedlike.algos.rainbow);
    acting takes the greedy action or, with probability epsilon, a uniform one (Network.act).
    """

    num_actions: int
    atoms: int = 1
    dueling: bool = False
    noisy: bool = False  # NoisyDense layers: exploration by parameter noise
    # Its outputs are action values: the network has no value head beside it (its value is the
    # greedy action's), and acts epsilon-greedily.
    action_values = True

    @classmethod
    def from_spec(cls, num_actions: int, head_spec, **kwargs) -> QHead:
        """Built from the network's HeadSpec (its atoms, dueling and noisy settings)."""
        return cls(num_actions, head_spec.atoms, head_spec.dueling, head_spec.noisy, **kwargs)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        a, k = self.num_actions, self.atoms

        def dense(n, scale, name):
            if self.noisy:
                return NoisyDense(n, name=name)
            init = nn.initializers.orthogonal(scale)
            return nn.Dense(n, kernel_init=init, bias_init=nn.initializers.zeros, name=name)

        if not self.dueling:
            return dense(a * k, 0.01, "q")(x)
        value = dense(k, 1.0, "value")(x)
        adv = dense(a * k, 0.01, "advantage")(x)
        adv = adv.reshape(*adv.shape[:-1], a, k)
        q = value[..., None, :] + adv - jnp.mean(adv, axis=-2, keepdims=True)
        return q.reshape(*q.shape[:-2], a * k)

    def graph(self, name: str) -> Part:
        layers = (f"{name}/value", f"{name}/advantage") if self.dueling else (f"{name}/q",)
        why = "is the Q head: its outputs are the actions' values"
        return Part(
            readers=tuple(Reader(layer) for layer in layers),
            spaces={layer: Space((layer,), refused=f"params/{layer} {why}") for layer in layers},
        )


def q_support(atoms: int, value_range: Sequence[float]) -> jax.Array:
    """The returns a C51 head's atoms stand for: `atoms` evenly spaced over value_range."""
    return jnp.linspace(float(value_range[0]), float(value_range[1]), int(atoms))


def q_values(outputs: jax.Array, atoms: int, value_range: Sequence[float]) -> jax.Array:
    """Q(s, a) [..., A] from a QHead's outputs [..., A * atoms]: themselves with one atom, the
    expected return of each action's distribution otherwise."""
    if atoms == 1:
        return outputs
    logits = outputs.reshape(*outputs.shape[:-1], -1, atoms)
    return jnp.sum(jax.nn.softmax(logits, axis=-1) * q_support(atoms, value_range), axis=-1)


def epsilon_greedy(key, q: jax.Array, epsilon: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(action int32 [N], log pi(action) [N]) of the epsilon-greedy policy on Q [N, A]: the
    greedy action with probability 1 - epsilon [N], else a uniform one."""
    num = q.shape[-1]
    explore, pick = jax.random.split(key)
    greedy_action = q.argmax(-1).astype(jnp.int32)
    uniform = jax.random.randint(pick, greedy_action.shape, 0, num, jnp.int32)
    action = jnp.where(jax.random.uniform(explore, epsilon.shape) < epsilon, uniform, greedy_action)
    prob = epsilon / num + jnp.where(action == greedy_action, 1.0 - epsilon, 0.0)
    return action, jnp.log(prob)


# The policy heads network.policy_head names: a module taking the number of dense choices, mapping
# features [N, F] to their outputs, with a `graph(name)` Part that names its layers; a
# `from_spec(num_actions, head_spec, **kwargs)` classmethod where it reads the network's HeadSpec,
# and `action_values = True` where its outputs are action values (QHead) rather than logits. A new
# one is a module and a line here (tests/integration/test_extending.py registers one from outside).
# An algorithm's record names the head it learns (seedlike.algos.Algorithm.head: rainbow, r2d2).
POLICY_HEADS: dict[str, type[nn.Module]] = {"categorical": CategoricalHead, "q": QHead}


def action_values(name: str) -> bool:
    """Whether the policy head `name` outputs action values (a Q head) rather than logits."""
    return bool(getattr(POLICY_HEADS.get(name), "action_values", False))


class GaussianHead(nn.Module):
    """Mean and log-std [N, 2D] of a diagonal Gaussian over D continuous action dimensions.

    The log-std is one learned vector shared by all states (CleanRL's and the PPO paper's choice
    for MuJoCo) or, with `state_dependent`, a Dense layer of the features, clipped to
    [LOG_STD_MIN, LOG_STD_MAX] so that a few outlying states cannot collapse or blow up the std.
    The mean starts near 0 (small init) and the std at exp(log_std_init).
    """

    size: int
    state_dependent: bool  # network.state_dependent_std
    log_std_init: float  # network.log_std_init
    init_scale: float = 0.01

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = functools.partial(
            nn.Dense, self.size, kernel_init=nn.initializers.orthogonal(self.init_scale)
        )
        mean = dense(bias_init=nn.initializers.zeros, name="mean")(x)
        if self.state_dependent:
            log_std = dense(bias_init=nn.initializers.constant(self.log_std_init), name="log_std")
            log_std = jnp.clip(log_std(x), LOG_STD_MIN, LOG_STD_MAX)
        else:
            vector = self.param(
                "log_std", nn.initializers.constant(self.log_std_init), (self.size,)
            )
            log_std = jnp.broadcast_to(vector.astype(mean.dtype), mean.shape)
        return jnp.concatenate([mean, log_std], axis=-1)

    def graph(self, name: str) -> Part:
        """The mean layer, then a state-dependent log-std layer (a log-std vector reads no
        features: it lives at <name>/log_std beside the mean, outside the graph)."""
        layers = (f"{name}/mean",) + ((f"{name}/log_std",) if self.state_dependent else ())
        why = "is the Gaussian policy head: its outputs are the action's dimensions"
        return Part(
            readers=tuple(Reader(layer) for layer in layers),
            spaces={layer: Space((layer,), refused=f"params/{layer} {why}") for layer in layers},
        )


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class ValueHead(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(
            1,
            kernel_init=nn.initializers.orthogonal(1.0),
            bias_init=nn.initializers.zeros,
            name="value",
        )(x)[..., 0]

    def graph(self, name: str) -> Part:
        layer = f"{name}/value"
        why = f"params/{layer} is the value head: its single output cannot be widened"
        return Part(readers=(Reader(layer),), spaces={layer: Space((layer,), refused=why)})


class Autoregressive(nn.Module):
    """The inputs of factorized heads that condition on the arguments chosen before them
    (OpenAI Five's target head reads the chosen action type): head i reads

        h_i = h + sum_{j < i} W_j onehot(a_j),

    one zero-initialized table W_j [n_j, F] per argument that some later head reads, so a new
    network starts as independent heads and learns which arguments matter.
    """

    sizes: Sequence[int]

    @nn.compact
    def __call__(self, h: jax.Array, args: jax.Array) -> list[jax.Array]:
        """h [N, F], args int [N, H] (only a_0 .. a_{H-2} are read) -> [h_0, ..., h_{H-1}]."""
        out = [h]
        for j, n in enumerate(self.sizes[:-1]):
            table = nn.Dense(
                h.shape[-1], use_bias=False, kernel_init=nn.initializers.zeros, name=f"embed_{j}"
            )
            out.append(out[-1] + table(jax.nn.one_hot(args[:, j], n, dtype=h.dtype)))
        return out

    def graph(self, name: str) -> Part:
        """Table j (spaces in j order) adds into the heads' input features."""
        tables = [f"{name}/embed_{j}" for j in range(len(self.sizes) - 1)]
        why = "feeds an argument to the later heads: it grows with add_actions and add_action_head"
        return Part(
            residual=tuple(Reader(layer) for layer in tables),
            spaces={layer: Space((layer,), refused=f"params/{layer} {why}") for layer in tables},
        )


class PointerHead(nn.Module):
    """Logits over a set of entities: attention from the core's output to each entity's embedding.

    logit_j = <W_q h, W_k e_j> / sqrt(d) for entity j (absent entities: MASKED_LOGIT), followed by
    `extra` ordinary logits W_x h for choices that are no entity (e.g. "no target"). Permuting
    the entities permutes their logits, and the head works for any number of entities.
    """

    key_size: int = 32
    extra: int = 0
    init_scale: float = 0.01

    @nn.compact
    def __call__(self, h: jax.Array, entities: jax.Array, present: jax.Array) -> jax.Array:
        """h [N, F], entities [N, E, D], present bool [N, E] -> logits [N, E + extra]."""
        dense = functools.partial(nn.Dense, kernel_init=nn.initializers.orthogonal(self.init_scale))
        query = dense(self.key_size, name="query")(h)
        key = nn.Dense(self.key_size, name="key")(entities)
        logits = jnp.einsum("nd,ned->ne", query, key) / jnp.sqrt(float(self.key_size))
        logits = jnp.where(present, logits, MASKED_LOGIT)
        if self.extra:
            logits = jnp.concatenate([logits, dense(self.extra, name="extra")(h)], axis=-1)
        return logits

    def graph(self, name: str) -> Part:
        """Its query (and extra logits) read the features; its key reads the entity encoder's
        stream (networks.entities.EntityGraph)."""
        layers = (f"{name}/query",) + ((f"{name}/extra",) if self.extra else ())
        return Part(readers=tuple(Reader(layer) for layer in layers))


# Distributions over actions. `sizes` = (n_1, ..., n_H) of a factorized action (EnvSpec.head_sizes):
# logits [..., n_1 + ... + n_H] hold each argument's categorical side by side, and an action is
# one int whose mixed-radix digits are the arguments (EnvSpec.action_heads). The arguments are
# independent given the logits, so log-probabilities and entropies add up over heads and the
# KL too. sizes=None is one categorical over the whole last axis.
#
# With continuous dimensions `sizes` is an ActionLayout: the distribution's parameters
# [..., L + 2D] are the categoricals' logits (L = n_1 + ... + n_H, maybe none), then the D means
# and D log-stds of a diagonal Gaussian; an action is float32 [..., H + D], the arguments' digits
# as floats, then the Gaussian sample u. With `squash` the env gets tanh(u) (rescaled to its
# bounds by the actor); u itself is what is stored, so log-probabilities never take an atanh of a
# saturated value:
#
#   log pi(a) = sum_d [ log N(u_d; mu_d, sigma_d) - log(1 - tanh(u_d)^2) ]
#
# The tanh is a bijection, so the KL between two squashed Gaussians is the Gaussians' KL; their
# entropy has no closed form, and is E[-log pi] per dimension by Gauss-Hermite quadrature.


@dataclasses.dataclass(frozen=True)
class ActionLayout:
    """How an action with continuous dimensions is laid out (see above)."""

    sizes: tuple[int, ...] = ()  # the discrete arguments, n_1 .. n_H
    continuous: int = 0  # D
    squash: bool = False  # tanh-squashed Gaussian

    @property
    def logits_size(self) -> int:
        return sum(self.sizes)


HERMITE_NODES = 24
_HERMITE = np.polynomial.hermite.hermgauss(HERMITE_NODES)
_LOG_2PI = math.log(2.0 * math.pi)


def _gaussian(params: jax.Array, layout: ActionLayout):
    """(mean, log_std) [..., D] of a layout's parameters."""
    start = layout.logits_size
    d = layout.continuous
    return params[..., start : start + d], params[..., start + d : start + 2 * d]


def _categoricals(params: jax.Array, layout: ActionLayout) -> list[jax.Array]:
    """Each discrete argument's logits (none for a purely continuous action)."""
    if not layout.sizes:
        return []
    return split(params[..., : layout.logits_size], layout.sizes)


def _discrete_args(action: jax.Array, layout: ActionLayout) -> list[jax.Array]:
    h = len(layout.sizes)
    return [jnp.rint(action[..., i]).astype(jnp.int32) for i in range(h)]


def log_det_tanh(u: jax.Array) -> jax.Array:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for any u."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def gaussian_log_prob(mean, log_std, u, squash: bool = False) -> jax.Array:
    """log pi(u) summed over the last axis (of tanh(u) with `squash`)."""
    z = (u - mean) * jnp.exp(-log_std)
    logp = -0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI
    if squash:
        logp = logp - log_det_tanh(u)
    return jnp.sum(logp, axis=-1)


def gaussian_entropy(mean, log_std, squash: bool = False) -> jax.Array:
    """The entropy summed over the last axis: sum_d log sigma_d + (1 + log 2 pi) / 2, plus with
    `squash` E_u[log(1 - tanh(u)^2)] per dimension (Gauss-Hermite quadrature)."""
    entropy = log_std + 0.5 * (1.0 + _LOG_2PI)
    if squash:
        nodes, weights = (jnp.asarray(x, mean.dtype) for x in _HERMITE)
        u = mean[..., None] + math.sqrt(2.0) * jnp.exp(log_std)[..., None] * nodes
        entropy = entropy + jnp.sum(weights * log_det_tanh(u), axis=-1) / math.sqrt(math.pi)
    return jnp.sum(entropy, axis=-1)


def gaussian_kl(mean_p, log_std_p, mean_q, log_std_q) -> jax.Array:
    """KL(p || q) of diagonal Gaussians, summed over the last axis (also of their tanh images)."""
    var_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
    mahalanobis = jnp.square((mean_p - mean_q) * jnp.exp(-log_std_q))
    return jnp.sum(0.5 * (var_ratio + mahalanobis - 1.0) - (log_std_p - log_std_q), axis=-1)


def split(logits: jax.Array, sizes: Sequence[int] | None) -> list[jax.Array]:
    """Each head's logits [..., n_i]."""
    if sizes is None or len(sizes) == 1:
        return [logits]
    return jnp.split(logits, np.cumsum(sizes)[:-1].tolist(), axis=-1)


def digits(action: jax.Array, sizes: Sequence[int]) -> list[jax.Array]:
    """The arguments d_i of actions a = ravel_multi_index((d_1, ..., d_H), sizes)."""
    strides = np.cumprod((1, *sizes[:0:-1]))[::-1]
    action = action.astype(jnp.int32)
    return [(action // int(s)) % int(n) for s, n in zip(strides, sizes)]


def join(args: Sequence[jax.Array], sizes: Sequence[int]) -> jax.Array:
    """The inverse of `digits`: one int32 action from its arguments."""
    action = jnp.zeros_like(args[0], jnp.int32)
    for d, n in zip(args, sizes):
        action = action * int(n) + d.astype(jnp.int32)
    return action


def apply_mask(logits: jax.Array, mask: jax.Array | None, sizes=None) -> jax.Array:
    """Sets the logits of illegal choices (mask False) to MASKED_LOGIT."""
    if mask is None:
        return logits
    if isinstance(sizes, ActionLayout):  # the mask covers the categoricals' logits only
        split_at = sizes.logits_size
        masked = apply_mask(logits[..., :split_at], mask, sizes.sizes)
        return jnp.concatenate([masked, logits[..., split_at:]], axis=-1)
    # A head with no legal choice (only ever a padding row) falls back to all its choices.
    mask = jnp.concatenate(
        [jnp.logical_or(m, ~jnp.any(m, axis=-1, keepdims=True)) for m in split(mask, sizes)],
        axis=-1,
    )
    return jnp.where(mask, logits, MASKED_LOGIT)


def log_prob(logits: jax.Array, action: jax.Array, sizes=None) -> jax.Array:
    if isinstance(sizes, ActionLayout):
        mean, log_std = _gaussian(logits, sizes)
        u = action[..., len(sizes.sizes) :]
        total = gaussian_log_prob(mean, log_std, u, sizes.squash)
        for x, d in zip(_categoricals(logits, sizes), _discrete_args(action, sizes)):
            total = total + log_prob(x, d)
        return total
    if sizes is None or len(sizes) == 1:
        logp = jax.nn.log_softmax(logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return sum(log_prob(x, d) for x, d in zip(split(logits, sizes), digits(action, sizes)))


def entropy(logits: jax.Array, sizes=None) -> jax.Array:
    total = 0.0
    if isinstance(sizes, ActionLayout):
        total = gaussian_entropy(*_gaussian(logits, sizes), sizes.squash)
        if not sizes.sizes:
            return total
        logits, sizes = logits[..., : sizes.logits_size], sizes.sizes
    for x in split(logits, sizes):
        logp = jax.nn.log_softmax(x)
        total = total - jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return total


def kl_divergence(logits_p: jax.Array, logits_q: jax.Array, sizes=None) -> jax.Array:
    """KL(p || q) per row."""
    total = 0.0
    if isinstance(sizes, ActionLayout):
        total = gaussian_kl(*_gaussian(logits_p, sizes), *_gaussian(logits_q, sizes))
        if not sizes.sizes:
            return total
        end = sizes.logits_size
        logits_p, logits_q, sizes = logits_p[..., :end], logits_q[..., :end], sizes.sizes
    for p, q in zip(split(logits_p, sizes), split(logits_q, sizes)):
        logp, logq = jax.nn.log_softmax(p), jax.nn.log_softmax(q)
        total = total + jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)
    return total


def sample(key: jax.Array, logits: jax.Array, sizes=None) -> jax.Array:
    """int32 actions drawn from the logits (each head independently); float32 [..., H + D] with
    continuous dimensions."""
    if isinstance(sizes, ActionLayout):
        key, noise = jax.random.split(key)
        mean, log_std = _gaussian(logits, sizes)
        u = mean + jnp.exp(log_std) * jax.random.normal(noise, mean.shape, mean.dtype)
        keys = jax.random.split(key, max(len(sizes.sizes), 1))
        args = [jax.random.categorical(k, x) for k, x in zip(keys, _categoricals(logits, sizes))]
        return _continuous_action(args, u)
    if sizes is None or len(sizes) == 1:
        return jax.random.categorical(key, logits).astype(jnp.int32)
    keys = jax.random.split(key, len(sizes))
    return join([jax.random.categorical(k, x) for k, x in zip(keys, split(logits, sizes))], sizes)


def greedy(logits: jax.Array, sizes=None) -> jax.Array:
    """The most likely action: each head's most likely choice (and the Gaussian's mean)."""
    if isinstance(sizes, ActionLayout):
        args = [x.argmax(-1) for x in _categoricals(logits, sizes)]
        return _continuous_action(args, _gaussian(logits, sizes)[0])
    if sizes is None or len(sizes) == 1:
        return logits.argmax(-1).astype(jnp.int32)
    return join([x.argmax(-1) for x in split(logits, sizes)], sizes)


def _continuous_action(args: Sequence[jax.Array], u: jax.Array) -> jax.Array:
    """float32 [..., H + D]: the arguments' digits, then the continuous values."""
    digits_ = [a.astype(jnp.float32)[..., None] for a in args]
    return jnp.concatenate([*digits_, u.astype(jnp.float32)], axis=-1)
