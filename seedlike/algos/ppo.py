"""PPO (Schulman et al. 2017, arXiv:1707.06347): clipped surrogate, value loss, entropy bonus."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from networks import heads
from seedlike.algos import gae
from seedlike.algos.batches import (
    LossAux,
    SampleBatch,
    SequenceBatch,
    forward_sequence,
    step_mask,
)


def make_ppo_loss(network, config, axis_name: str | None = None):
    """Returns loss_fn(params, target_params, obs_norm, batch, key) ->
    (loss, LossAux(metrics: ALGORITHMS["ppo"].metrics)) (seedlike.algos' contract; PPO reads
    neither target_params nor key).

    The batch is a SampleBatch of independent samples, or a SequenceBatch of whole unrolls
    (recurrent networks replay them from the stored carry).

    Means are over the masked samples of the whole (possibly device-sharded) minibatch: each device
    divides its local sum by the mean sample count per device, so that `lax.pmean` of the
    gradients equals the gradient of the global mean even when devices hold different numbers of
    masked samples.

    Args:
      network: a networks.Network.
      config: the `ppo` config section (clip_eps, vf_coef, ent_coef, normalize_advantages,
        clip_value, value_clip_eps).
      axis_name: the pmap axis the minibatch is sharded over, or None on one device.
    """

    def pmean(x):
        return x if axis_name is None else jax.lax.pmean(x, axis_name)

    def loss_fn(params, target_params, obs_norm, batch, key):
        del target_params, key
        if isinstance(batch, SequenceBatch):
            u = batch.unroll
            horizon = u.reward.shape[1]
            logits, value = forward_sequence(network, params, obs_norm, u, horizon)
            step = lambda x: x[:, :horizon]  # noqa: E731
            samples = SampleBatch(
                obs=None,
                extras=None,
                action=step(u.action),
                behaviour_logp=step(u.behaviour_logp),
                behaviour_value=step(u.behaviour_value),
                advantage=batch.advantage,
                value_target=batch.value_target,
                mask=step_mask(batch, horizon),
            )
        else:
            samples = batch
            logits, value = network.apply(params, obs_norm, batch.obs, batch.extras, batch.action)
        loss, metrics = ppo_terms(logits, value, samples, config, pmean, network.action_sizes)
        return loss, LossAux(metrics)

    return loss_fn


def ppo_terms(logits, value, batch: SampleBatch, config, pmean, sizes=None):
    """The PPO objective from the current logits [*S, A] and values [*S] of the batch's samples
    (`sizes`: a factorized action's argument sizes, networks.heads)."""
    mask = batch.mask.astype(jnp.float32)
    per_device = jnp.maximum(pmean(jnp.sum(mask)), 1e-8)

    def mean(x):
        return jnp.sum(mask * x) / per_device

    logp = heads.log_prob(logits, batch.action, sizes)
    log_ratio = logp - batch.behaviour_logp
    ratio = jnp.exp(log_ratio)

    advantage = batch.advantage
    if config.normalize_advantages:
        adv_mean = pmean(mean(advantage))
        adv_var = pmean(mean(jnp.square(advantage - adv_mean)))
        advantage = (advantage - adv_mean) / (jnp.sqrt(adv_var) + 1e-8)
    advantage = jax.lax.stop_gradient(advantage)

    clipped = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
    policy_loss = -jnp.minimum(ratio * advantage, clipped * advantage)

    value_error = jnp.square(value - batch.value_target)
    if config.clip_value:
        clipped_value = batch.behaviour_value + jnp.clip(
            value - batch.behaviour_value, -config.value_clip_eps, config.value_clip_eps
        )
        value_error = jnp.maximum(value_error, jnp.square(clipped_value - batch.value_target))
    value_loss = 0.5 * value_error
    entropy = heads.entropy(logits, sizes)

    total = mean(policy_loss) + config.vf_coef * mean(value_loss) - config.ent_coef * mean(entropy)
    metrics = {
        "loss/total": total,
        "loss/policy": mean(policy_loss),
        "loss/value": mean(value_loss),
        "loss/entropy": mean(entropy),
        # (ratio - 1) - log ratio: a low-variance, non-negative KL estimate (Schulman 2020).
        "loss/approx_kl": mean((ratio - 1.0) - log_ratio),
        "loss/clip_fraction": mean((jnp.abs(ratio - 1.0) > config.clip_eps).astype(jnp.float32)),
    }
    return total, metrics


make_loss = make_ppo_loss  # the name seedlike.algos.Algorithm looks up


def advantages(config):
    """Returns fn(unroll) -> (advantage [T], value_target [T]) for one Unroll [T+1, ...]:
    GAE(lambda) from the behaviour values recorded while acting (rewards clipped to
    +-config.reward_clip where set), value targets advantage + V. The learner's prepare step
    vmaps it over the batch.

    Args:
      config: the `ppo` config section (gamma, gae_lambda, reward_clip).
    """
    gamma, lam, clip = float(config.gamma), float(config.gae_lambda), float(config.reward_clip)

    def fn(unroll):
        reward = jnp.clip(unroll.reward, -clip, clip) if clip else unroll.reward
        discount_t, lambda_t = gae.episode_discounts(
            unroll.terminated, unroll.truncated, unroll.valid[:-1], gamma, lam
        )
        advantage = gae.generalized_advantage_estimation(
            reward, discount_t, lambda_t, unroll.behaviour_value
        )
        return advantage, advantage + unroll.behaviour_value[:-1]

    return fn
