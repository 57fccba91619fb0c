"""V-trace off-policy targets and the IMPALA actor-critic loss (Espeholt et al. 2018,
arXiv:1802.01561, sec. 4)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from networks import heads
from seedlike.algos.batches import LossAux, SequenceBatch, forward_sequence


def vtrace(
    v_tm1: jax.Array,
    v_t: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    rho_tm1: jax.Array,
    lambda_t: jax.Array | float = 1.0,
    clip_rho: float = 1.0,
    clip_pg_rho: float = 1.0,
    clip_c: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """V-trace targets and policy-gradient advantages of one trajectory.

        rho_t = min(clip_rho, pi/mu),  c_t = lambda_t * min(clip_c, pi/mu)
        delta_t = rho_t (r_t + discount_t V(x_{t+1}) - V(x_t))
        v_s - V(x_s) = delta_s + discount_s c_s (v_{s+1} - V(x_{s+1}))
        A_s = min(clip_pg_rho, pi/mu) (r_s + discount_s v_{s+1} - V(x_s)),  v_T = V(x_T)

    Args:
      v_tm1: V(x_t) for t = 0..T-1, [T].
      v_t: V(x_{t+1}), [T].
      r_t: rewards, [T].
      discount_t: gamma, or 0 after a termination, [T].
      rho_tm1: importance ratios pi(a_t|x_t) / mu(a_t|x_t), [T].
      lambda_t: trace coefficient, scalar or [T]; 0 cuts the trace (a truncated episode end).
      clip_rho, clip_pg_rho, clip_c: the rho-bar and c-bar clipping thresholds.

    Returns:
      (vs [T], pg_advantages [T]); the caller stops gradients through both.
    """
    chex.assert_rank([v_tm1, v_t, r_t, discount_t, rho_tm1], 1)
    chex.assert_equal_shape([v_tm1, v_t, r_t, discount_t, rho_tm1])
    lambda_t = jnp.broadcast_to(jnp.asarray(lambda_t, jnp.float32), r_t.shape)
    clipped_rho = jnp.minimum(clip_rho, rho_tm1)
    c_t = lambda_t * jnp.minimum(clip_c, rho_tm1)
    delta_t = clipped_rho * (r_t + discount_t * v_t - v_tm1)

    def backward(acc, inputs):
        delta, discount, c = inputs
        acc = delta + discount * c * acc
        return acc, acc

    _, vs_minus_v = jax.lax.scan(
        backward, jnp.zeros((), jnp.float32), (delta_t, discount_t, c_t), reverse=True
    )
    vs = v_tm1 + vs_minus_v
    vs_tp1 = jnp.concatenate([vs[1:], v_t[-1:]])
    pg_advantages = jnp.minimum(clip_pg_rho, rho_tm1) * (r_t + discount_t * vs_tp1 - v_tm1)
    return vs, pg_advantages


def make_vtrace_loss(network, config, axis_name: str | None = None):
    """Returns loss_fn(params, target_params, obs_norm, batch: SequenceBatch, key) ->
    (loss, LossAux(metrics: ALGORITHMS["vtrace"].metrics)) (seedlike.algos' contract; V-trace
    reads neither target_params nor key).

    Steps whose action the env ignored (valid False) have rho = 0 and cut the trace, so their
    target is their own value; this is what makes truncated episodes bootstrap from the value of
    the final observation. Means are over valid steps of the whole minibatch, across devices.

    Args:
      network: a networks.Network.
      config: the `vtrace` config section (gamma, lambda_, clip_rho, clip_pg_rho, clip_c, vf_coef,
        ent_coef, reward_clip).
      axis_name: pmap axis of the minibatch, or None.
    """

    def pmean(x):
        return x if axis_name is None else jax.lax.pmean(x, axis_name)

    def loss_fn(params, target_params, obs_norm, batch: SequenceBatch, key):
        del target_params, key
        u = batch.unroll
        horizon = u.reward.shape[1]
        logits, values = forward_sequence(network, params, obs_norm, u, horizon + 1)
        valid = u.valid[:, :horizon]
        mask = valid.astype(jnp.float32)
        per_device = jnp.maximum(pmean(jnp.sum(mask)), 1e-8)

        def mean(x):
            return jnp.sum(mask * x) / per_device

        logp = heads.log_prob(logits[:, :horizon], u.action[:, :horizon], network.action_sizes)
        rho = jnp.where(valid, jnp.exp(logp - u.behaviour_logp[:, :horizon]), 0.0)
        rho = jax.lax.stop_gradient(rho)
        reward = u.reward
        if config.reward_clip:
            reward = jnp.clip(reward, -config.reward_clip, config.reward_clip)
        discount = jnp.where(valid & ~u.terminated, config.gamma, 0.0)
        lambda_t = jnp.where(valid & ~u.truncated, config.lambda_, 0.0)
        v = jax.lax.stop_gradient(values)
        vs, pg_adv = jax.vmap(
            lambda *a: vtrace(*a, config.clip_rho, config.clip_pg_rho, config.clip_c)
        )(v[:, :-1], v[:, 1:], reward, discount, rho, lambda_t)

        policy_loss = -logp * pg_adv
        value_loss = 0.5 * jnp.square(vs - values[:, :-1])
        entropy = heads.entropy(logits[:, :horizon], network.action_sizes)
        total = (
            mean(policy_loss) + config.vf_coef * mean(value_loss) - config.ent_coef * mean(entropy)
        )
        metrics = {
            "loss/total": total,
            "loss/policy": mean(policy_loss),
            "loss/value": mean(value_loss),
            "loss/entropy": mean(entropy),
            "loss/rho_mean": mean(rho),
            "loss/rho_clip_fraction": mean((rho > config.clip_rho).astype(jnp.float32)),
        }
        return total, LossAux(metrics)

    return loss_fn


make_loss = make_vtrace_loss  # the name seedlike.algos.Algorithm looks up


def advantages(config):
    """None: V-trace's targets come from the current values inside the loss, not beforehand."""
    del config
    return None
