"""Checks that surgery preserved the policy: old vs new network on steps and multi-step unrolls.

OpenAI Five App. B: "it is crucial to ensure agent behavior is unchanged after surgery". Both
networks see the same random observations (new features random too: their weights are zero, so
any value must give the same outputs) and, for recurrent networks, the same random non-zero
carries (the old carry padded for the new core).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from networks import heads
from surgery.ops import AxisMap, generator, pad_carry

LEGAL_ACTION_MASK = "legal_action_mask"


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """Old vs new policy on a batch of single steps and of unrolls.

    Attributes:
      step_max_abs_logits, unroll_max_abs_logits: max |new - old| over the old actions' logits.
      step_max_abs_value, unroll_max_abs_value: max |new - old| of the value.
      mean_kl, max_kl: KL(old || new) per sample (over all new actions), mean and max over
        steps and unroll steps.
      max_new_action_prob: the largest total probability of new actions (0 without new ones).
      logits_scale, value_scale: max |old logit| and max |old value| over the batch.
      batch_size, unroll_length: what was compared.
      max_abs_mean, max_abs_log_std: a Gaussian head's max |new - old| of its means and
        log-stds over the old dimensions (0 without continuous dimensions); both count in the
        logits' differences above, and the Gaussians' KL in the KL.
    """

    step_max_abs_logits: float
    step_max_abs_value: float
    unroll_max_abs_logits: float
    unroll_max_abs_value: float
    mean_kl: float
    max_kl: float
    max_new_action_prob: float
    logits_scale: float
    value_scale: float
    batch_size: int
    unroll_length: int
    max_abs_mean: float = 0.0
    max_abs_log_std: float = 0.0
    continuous: int = 0  # the old network's continuous action dimensions

    @property
    def max_abs_logits(self) -> float:
        return max(self.step_max_abs_logits, self.unroll_max_abs_logits)

    @property
    def max_abs_value(self) -> float:
        return max(self.step_max_abs_value, self.unroll_max_abs_value)

    @property
    def error(self) -> float:
        """The number compared with a tolerance: max of KL and of |Δ logits| and |Δ value|
        relative to the outputs' scale floored at 1 (absolute for O(1) outputs). A trained
        value head outputs O(100): an exact surgery then differs by float32 rounding ~1e-5,
        because the wider matmuls sum in another order."""
        return max(
            self.max_abs_logits / max(1.0, self.logits_scale),
            self.max_abs_value / max(1.0, self.value_scale),
            self.max_kl,
        )

    def ok(self, tolerance: float) -> bool:
        return bool(self.error <= tolerance)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        gaussian = ""
        if self.continuous:
            gaussian = (
                f"Gaussian max|Δmean| {self.max_abs_mean:.3g} "
                f"max|Δlog-std| {self.max_abs_log_std:.3g}  "
            )
        return (
            f"max|Δlogits| {self.max_abs_logits:.3g} (step {self.step_max_abs_logits:.3g}, "
            f"{self.unroll_length}-step unroll {self.unroll_max_abs_logits:.3g})  "
            f"max|Δvalue| {self.max_abs_value:.3g}  KL(old||new) mean {self.mean_kl:.3g} "
            f"max {self.max_kl:.3g}  max p(new actions) {self.max_new_action_prob:.3g}  "
            f"{gaussian}error {self.error:.3g} (scales: logits {self.logits_scale:.3g}, value "
            f"{self.value_scale:.3g}; {self.batch_size} rows)"
        )


def _sample(gen: np.random.Generator, spec_entry, stats, shape) -> np.ndarray:
    full = (*shape, *spec_entry.shape)
    dtype = spec_entry.dtype
    if np.issubdtype(dtype, np.floating):
        x = gen.standard_normal(full)
        if stats is not None:
            x = np.asarray(stats.mean) + np.sqrt(np.asarray(stats.var)) * x
        return x.astype(dtype)
    if dtype == np.bool_:
        return gen.random(full) < 0.5
    high = 256 if dtype == np.uint8 else 10
    return gen.integers(0, high, full).astype(dtype)


def sample_observations(spec, obs_norm, rng, batch_shape) -> dict:
    """Random observations key -> [*batch_shape, *shape] of `spec`.

    Float features are drawn around the normalizer's statistics when there are some (the range
    the network was trained on), N(0, 1) otherwise; integer and image features uniformly.
    """
    gen = generator(rng)
    return {
        k: _sample(gen, s, (obs_norm or {}).get(k), tuple(batch_shape))
        for k, s in sorted(spec.observation.items())
    }


def extend_observations(obs, old_spec, new_spec, new_obs_norm, rng) -> dict:
    """The new spec's observations holding `obs` (old spec) where the old features were.

    New keys and the new entries of grown keys are random (same batch shape).
    """
    key0 = next(iter(old_spec.observation))
    batch_shape = np.shape(obs[key0])[: np.ndim(obs[key0]) - len(old_spec.observation[key0].shape)]
    out = sample_observations(new_spec, new_obs_norm, rng, batch_shape)
    for k, old in obs.items():
        window = (Ellipsis, *(slice(0, d) for d in old_spec.observation[k].shape))
        out[k][window] = np.asarray(old)
    return out


def _legal_masks(old_spec, new_spec, rng, batch_shape, action_map: AxisMap | None):
    if LEGAL_ACTION_MASK not in old_spec.extras:
        return {}, {}
    old = generator(rng).random((*batch_shape, old_spec.logits_size)) < 0.7
    for start, size in zip(np.cumsum((0, *old_spec.head_sizes)), old_spec.head_sizes):
        head = old[..., start : start + size]  # a view: at least one legal choice per head
        head[..., 0] |= ~head.any(axis=-1)
    new = np.ones((*batch_shape, new_spec.logits_size), bool)  # new actions legal: worst case
    positions = _old_positions(action_map, old_spec.logits_size)
    new[..., positions] = old
    return {LEGAL_ACTION_MASK: old}, {LEGAL_ACTION_MASK: new}


def _actions(old_spec, new_spec, rng, batch_shape, mask, positions):
    """Random legal actions of the old network and the same actions of the new one: each old
    argument where the action map put its choice, a new argument at its choice 0."""
    old_sizes, new_sizes = old_spec.head_sizes, new_spec.head_sizes
    old_starts = np.cumsum((0, *old_sizes))
    new_starts = np.cumsum((0, *new_sizes))
    new_digits = [np.zeros(batch_shape, np.int64) for _ in new_sizes]
    old_digits = []
    for i, n in enumerate(old_sizes):
        scores = rng.random((*batch_shape, n))
        if mask is not None:
            scores = np.where(mask[..., old_starts[i] : old_starts[i] + n], scores, -1.0)
        digit = scores.argmax(-1)
        old_digits.append(digit)
        column = positions[old_starts[i] + digit]
        head = np.searchsorted(new_starts, column, side="right") - 1
        for k in np.unique(head):
            new_digits[k] = np.where(head == k, column - new_starts[k], new_digits[k])
    old_a = np.ravel_multi_index(old_digits, old_sizes).astype(np.int32)
    return old_a, np.ravel_multi_index(new_digits, new_sizes).astype(np.int32)


def _old_positions(action_map: AxisMap | None, num_actions: int) -> np.ndarray:
    return np.arange(num_actions) if action_map is None else action_map.old_positions


def random_carry(network, rng, batch: int):
    """A random non-zero LSTM carry (c ~ N(0, 1), h ~ U(-1, 1)), or () for feed-forward."""
    if not network.is_recurrent:
        return ()
    gen = generator(rng)
    size = network.module.core_spec.size
    return (
        gen.standard_normal((batch, size)).astype(np.float32),
        gen.uniform(-1.0, 1.0, (batch, size)).astype(np.float32),
    )


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    return m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def _log_softmax(logits: np.ndarray, sizes) -> np.ndarray:
    """Per head of a factorized action (sizes; one head: None)."""
    if not sizes:
        return logits - _logsumexp(logits)
    parts = np.split(logits, np.cumsum(sizes)[:-1], axis=-1)
    return np.concatenate([x - _logsumexp(x) for x in parts], axis=-1)


def _compare_gaussian(old, new, dims: int):
    """Max |Δ mean| and |Δ log-std| and KL(old || new) per row of two Gaussian heads' outputs
    [..., 2D] over the old network's D = `dims` dimensions (float64)."""
    old, new = np.asarray(old, np.float64), np.asarray(new, np.float64)
    mean_o, log_std_o = old[..., :dims], old[..., dims : 2 * dims]
    d_new = new.shape[-1] // 2
    mean_n, log_std_n = new[..., :dims], new[..., d_new : d_new + dims]
    d_mean = float(np.max(np.abs(mean_n - mean_o), initial=0.0))
    d_log_std = float(np.max(np.abs(log_std_n - log_std_o), initial=0.0))
    kl = np.asarray(heads.gaussian_kl(mean_o, log_std_o, mean_n, log_std_n), np.float64)
    return d_mean, d_log_std, kl.ravel()


def _per_atom(outputs, atoms: int):
    """A C51 Q head's (logits [R, ..., A * atoms], value [R, ...]) as `atoms` times the rows,
    each with one logit per action: every atom's logits are compared, action by action."""
    logits, value = np.asarray(outputs[0]), np.asarray(outputs[1])
    lead = logits.shape[:-1]
    per = np.moveaxis(logits.reshape(*lead, -1, atoms), -1, 0)  # [atoms, R, ..., A]
    value = np.broadcast_to(value, (atoms, *value.shape))
    return (
        per.reshape(atoms * lead[0], *lead[1:], per.shape[-1]),
        value.reshape(atoms * lead[0], *lead[1:]),
    )


def _values_only(compared: tuple) -> tuple:
    """_compare_all's result for a Q head: KL and new actions' probability are not defined
    (softmax of action values is no policy), and its value is the largest action value, new
    actions' included: the old actions' values (each atom's logits) are the comparison."""
    d_l, _, kl, _, scales, d_mean, d_log_std = compared
    return d_l, 0.0, np.zeros_like(kl), 0.0, scales, d_mean, d_log_std


def _compare_all(old, new, positions, sizes, old_spec, new_spec):
    """_compare for the categoricals' logits and _compare_gaussian for the continuous part:
    (max |Δ logits|, max |Δ value|, KL per row, new actions' mass, scales, Δ mean, Δ log-std)."""
    (old_l, old_v), (new_l, new_v) = old, new
    dims = old_spec.continuous
    if not dims:
        return (*_compare(old_l, old_v, new_l, new_v, positions, *sizes), 0.0, 0.0)
    cut_o, cut_n = old_spec.logits_size, new_spec.logits_size
    d_mean, d_log_std, kl = _compare_gaussian(old_l[..., cut_o:], new_l[..., cut_n:], dims)
    if cut_o:
        d_l, d_v, kl_c, mass, scales = _compare(
            old_l[..., :cut_o], old_v, new_l[..., :cut_n], new_v, positions, *sizes
        )
        kl = kl + kl_c
    else:
        d_v = float(np.max(np.abs(np.asarray(new_v) - np.asarray(old_v)), initial=0.0))
        d_l, mass, scales = 0.0, 0.0, (0.0, float(np.max(np.abs(np.asarray(old_v)))))
    scale = float(np.max(np.abs(np.asarray(old_l[..., cut_o:])), initial=0.0))
    scales = (max(scales[0], scale), scales[1])
    return max(d_l, d_mean, d_log_std), d_v, kl, mass, scales, d_mean, d_log_std


def _compare(old_logits, old_value, new_logits, new_value, positions, old_sizes, new_sizes):
    """Max |logit| and |value| differences, KL(old || new) per row, the new actions' largest
    probability and the outputs' scales.

    A factorized action's KL is the sum of its heads'. A head of the new network that holds no
    old logit is a new argument whose choice 0 is what the old policy did (ops.add_action_head):
    its KL term is -log p_new(choice 0).
    """
    old_logits = np.asarray(old_logits, np.float64)
    new_logits = np.asarray(new_logits, np.float64)
    kept = new_logits[..., positions]
    d_logits = float(np.max(np.abs(kept - old_logits), initial=0.0))
    d_value = float(np.max(np.abs(np.asarray(new_value) - np.asarray(old_value)), initial=0.0))
    logp_old = _log_softmax(old_logits, old_sizes)
    logp_new = _log_softmax(new_logits, new_sizes)
    p_old = np.exp(logp_old)
    # KL in float64 from the two log-softmaxes; only the old actions carry old probability mass.
    kl = np.sum(p_old * (logp_old - logp_new[..., positions]), axis=-1)
    old_column = np.zeros(new_logits.shape[-1], bool)
    old_column[positions] = True
    bounds = np.cumsum((0, *(new_sizes or (new_logits.shape[-1],))))
    stay = np.ones(kl.shape)  # probability that every argument is an old choice
    for a, b in zip(bounds[:-1], bounds[1:]):
        if old_column[a:b].any():
            stay = stay * np.sum(np.exp(logp_new[..., a:b][..., old_column[a:b]]), axis=-1)
        else:
            kl = kl - logp_new[..., a]
            stay = stay * np.exp(logp_new[..., a])
    new_mass = 0.0
    if new_logits.shape[-1] > len(positions):
        new_mass = max(float(np.max(1.0 - stay, initial=0.0)), 0.0)
    legal = old_logits[old_logits > heads.MASKED_LOGIT / 2]  # masked logits are -1e9
    scales = (float(np.max(np.abs(legal), initial=0.0)), float(np.max(np.abs(old_value))))
    return d_logits, d_value, kl.ravel(), new_mass, scales


def verify(
    old_network,
    old_params,
    old_obs_norm,
    new_network,
    new_params,
    new_obs_norm,
    *,
    rng,
    carry_map: AxisMap | None = None,
    action_map: AxisMap | None = None,
    batch_size: int = 32,
    unroll_length: int = 8,
) -> VerifyReport:
    """Compares old and new policies on random steps and unrolls from random non-zero carries.

    Args:
      old_network, new_network: networks.Network before and after surgery.
      old_params, old_obs_norm, new_params, new_obs_norm: their parameters and normalizers.
      rng: a jax PRNG key, an int seed or a numpy Generator.
      carry_map: how the LSTM units map (surgery.PlanResult.carry_map); None: unchanged.
      action_map: how the actions map (PlanResult.action_map); None: unchanged.
      batch_size: B rows of single steps and of unrolls.
      unroll_length: T steps per unroll (episode starts drawn at random after step 0).

    Returns:
      A VerifyReport; logits are compared over the old actions, KL over all new actions.
    """
    verifier = Verifier(old_network, new_network, batch_size, unroll_length)
    return verifier(
        old_params,
        old_obs_norm,
        new_params,
        new_obs_norm,
        rng=rng,
        carry_map=carry_map,
        action_map=action_map,
    )


def _steps(network, params, obs_norm, step_inputs, unroll_inputs, rows: int):
    """Feed-forward logits and values of step rows [B] and unroll rows [B, T] in one call."""
    (obs, extras, _, actions), (u_obs, u_extras, _, u_actions) = step_inputs, unroll_inputs

    def join(a, b):
        return jnp.concatenate([a, b.reshape((rows,) + b.shape[2:])])

    all_obs = {k: join(obs[k], u_obs[k]) for k in obs}
    all_extras = {k: join(extras[k], u_extras[k]) for k in extras}
    all_actions = None if actions is None else join(actions, u_actions)
    first = jnp.zeros((rows + len(next(iter(obs.values()))),), bool)
    return network.step(params, obs_norm, all_obs, all_extras, (), first, all_actions)[:2]


class Verifier:
    """`verify` for one pair of networks, compiled once and reusable (e.g. for every snapshot)."""

    def __init__(self, old_network, new_network, batch_size: int = 32, unroll_length: int = 8):
        self.old_network, self.new_network = old_network, new_network
        self.batch_size, self.unroll_length = batch_size, unroll_length

        recurrent = old_network.is_recurrent or new_network.is_recurrent

        def outputs(old_p, old_n, new_p, new_n, step_inputs, unroll_inputs):
            (o_step, n_step, step_first) = step_inputs
            (o_unroll, n_unroll, unroll_first) = unroll_inputs
            if not recurrent:
                # A feed-forward unroll is B*T independent steps: one step call for all rows
                # computes the same thing and halves the graph to compile.
                b, t = unroll_first.shape
                old_l, old_v = _steps(old_network, old_p, old_n, o_step, o_unroll, b * t)
                new_l, new_v = _steps(new_network, new_p, new_n, n_step, n_unroll, b * t)
                shape = (b, t)
                return (
                    (old_l[: -b * t], old_v[: -b * t]),
                    (new_l[: -b * t], new_v[: -b * t]),
                    (old_l[-b * t :].reshape(*shape, -1), old_v[-b * t :].reshape(shape)),
                    (new_l[-b * t :].reshape(*shape, -1), new_v[-b * t :].reshape(shape)),
                )

            def run(network, p, n, x, first, method):
                obs, extras, carry, actions = x
                return method(network, p, n, obs, extras, carry, first, actions)[:2]

            step, unroll = type(old_network).step, type(old_network).unroll
            return (
                run(old_network, old_p, old_n, o_step, step_first, step),
                run(new_network, new_p, new_n, n_step, step_first, step),
                run(old_network, old_p, old_n, o_unroll, unroll_first, unroll),
                run(new_network, new_p, new_n, n_unroll, unroll_first, unroll),
            )

        # One jit for all four calls: eager execution would compile every op for its shapes.
        self._outputs = jax.jit(outputs)

    def __call__(
        self,
        old_params,
        old_obs_norm,
        new_params,
        new_obs_norm,
        *,
        rng,
        carry_map: AxisMap | None = None,
        action_map: AxisMap | None = None,
    ) -> VerifyReport:
        """See `verify`."""
        old_spec, new_spec = self.old_network.spec, self.new_network.spec
        positions = _old_positions(action_map, old_spec.logits_size)
        sizes = (old_spec.action_heads or None, new_spec.action_heads or None)
        gen = generator(rng)
        batch_size, unroll_length = self.batch_size, self.unroll_length

        conditioned = self.old_network.module.head_spec.autoregressive or (
            self.new_network.module.head_spec.autoregressive
        )

        def inputs(shape):
            old_obs = sample_observations(old_spec, old_obs_norm, gen, shape)
            new_obs = extend_observations(old_obs, old_spec, new_spec, new_obs_norm, gen)
            old_extras, new_extras = _legal_masks(old_spec, new_spec, gen, shape, action_map)
            old_carry = random_carry(self.old_network, gen, batch_size)
            new_carry = pad_carry(old_carry, carry_map)
            old_a = new_a = None
            if conditioned:  # autoregressive logits are those of a given (legal) action
                mask = old_extras.get(LEGAL_ACTION_MASK)
                old_a, new_a = _actions(old_spec, new_spec, gen, shape, mask, positions)
            old = (old_obs, old_extras, old_carry, old_a)
            return old, (new_obs, new_extras, new_carry, new_a)

        step_inputs = (*inputs((batch_size,)), np.zeros((batch_size,), bool))
        shape = (batch_size, unroll_length)
        first = gen.random(shape) < 0.1
        first[:, 0] = False
        unroll_inputs = (*inputs(shape), first)
        old_s, new_s, old_u, new_u = self._outputs(
            old_params, old_obs_norm, new_params, new_obs_norm, step_inputs, unroll_inputs
        )
        head = self.old_network.module.head_spec
        if head.q and head.atoms > 1:
            old_s, new_s, old_u, new_u = (
                _per_atom(x, head.atoms) for x in (old_s, new_s, old_u, new_u)
            )
        step = _compare_all(old_s, new_s, positions, sizes, old_spec, new_spec)
        unroll = _compare_all(old_u, new_u, positions, sizes, old_spec, new_spec)
        if head.q:  # action values: the old actions' values are compared, no distribution
            step, unroll = (_values_only(x) for x in (step, unroll))
        kl = np.concatenate([step[2], unroll[2]])
        return VerifyReport(
            step_max_abs_logits=step[0],
            step_max_abs_value=step[1],
            unroll_max_abs_logits=unroll[0],
            unroll_max_abs_value=unroll[1],
            mean_kl=float(np.mean(kl)),
            max_kl=float(np.max(kl)),
            max_new_action_prob=max(step[3], unroll[3]),
            logits_scale=max(step[4][0], unroll[4][0]),
            value_scale=max(step[4][1], unroll[4][1]),
            batch_size=batch_size,
            unroll_length=unroll_length,
            max_abs_mean=max(step[5], unroll[5]),
            max_abs_log_std=max(step[6], unroll[6]),
            continuous=old_spec.continuous,
        )
