"""PQN (Gallici et al. 2024, arXiv:2407.04811, "Simplifying Deep Temporal Difference Learning"):
Q-learning on-policy, from each learner batch of unrolls as it comes, in passes of minibatches as
PPO takes them: no replay and no target network. The target of step t is Q(lambda)'s return
over the unroll, from the greedy values max_a Q(s, a) recorded while acting (Peng's Q(lambda)):

    G_t = r_t + gamma_t * ((1 - lambda_t) * max_a Q(s_{t+1}, a) + lambda_t * G_{t+1}),
    G_T = max_a Q(s_T, a)  (the unroll's bootstrap step),

with gamma_t 0 past a termination and lambda_t 0 past a truncation (as GAE's inputs,
seedlike.algos.gae). Acting is epsilon-greedy with an annealed rate (seedlike.algos.exploration);
LayerNorm in the torso (network.layer_norm) is what keeps the bootstrapped targets from diverging
without a target network (the paper's sec. 4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seedlike.algos import gae
from seedlike.algos.batches import LossAux, SequenceBatch, forward_sequence, step_mask


def make_pqn_loss(network, config, axis_name: str | None = None):
    """Returns loss_fn(params, target_params, obs_norm, batch, key) ->
    (loss, LossAux(metrics: ALGORITHMS["pqn"].metrics)): half the squared error between
    Q(s_t, a_t) and the batch's value_target (the Q(lambda) return, `advantages`), averaged over
    the minibatch's valid steps on every device. PQN reads neither target_params nor key.

    The batch is a SampleBatch of independent steps, or a SequenceBatch of whole unrolls (a
    recurrent network replays them from the stored carry).
    """

    def pmean(x):
        return x if axis_name is None else jax.lax.pmean(x, axis_name)

    def loss_fn(params, target_params, obs_norm, batch, key):
        del target_params, key
        if isinstance(batch, SequenceBatch):
            u = batch.unroll
            horizon = u.reward.shape[1]
            outputs, _ = forward_sequence(network, params, obs_norm, u, horizon)
            action, mask = u.action[:, :horizon], step_mask(batch, horizon)
        else:
            outputs, _ = network.apply(params, obs_norm, batch.obs, batch.extras)
            action, mask = batch.action, batch.mask
        mask = mask.astype(jnp.float32)
        per_device = jnp.maximum(pmean(jnp.sum(mask)), 1e-8)

        def mean(x):
            return jnp.sum(mask * x) / per_device

        q = jnp.take_along_axis(network.q_values(outputs), action[..., None], -1)[..., 0]
        td = jax.lax.stop_gradient(batch.value_target) - q
        loss = mean(0.5 * jnp.square(td))
        metrics = {
            "loss/total": loss,
            "loss/td_abs": mean(jnp.abs(td)),
            "loss/q_mean": mean(q),
            "loss/target_mean": mean(batch.value_target),
        }
        return loss, LossAux(metrics)

    return loss_fn


make_loss = make_pqn_loss  # the name seedlike.algos.Algorithm looks up


def advantages(config):
    """Returns fn(unroll) -> (G - V [T], G [T]) for one Unroll [T+1, ...]: the Q(lambda)
    returns G (module docstring) and their excess over the recorded greedy values V. The
    recursion is GAE's over V = max_a Q (G_t - V_t is GAE's advantage), so the two share
    seedlike.algos.gae. Rewards are clipped to +-reward_clip where set, then scaled by
    reward_scale.

    Args:
      config: the `pqn` config section (gamma, lambda_, reward_clip, reward_scale).
    """
    gamma, lam = float(config.gamma), float(config.lambda_)
    clip, scale = float(config.reward_clip), float(config.reward_scale)

    def fn(unroll):
        reward = jnp.clip(unroll.reward, -clip, clip) if clip else unroll.reward
        discount_t, lambda_t = gae.episode_discounts(
            unroll.terminated, unroll.truncated, unroll.valid[:-1], gamma, lam
        )
        excess = gae.generalized_advantage_estimation(
            scale * reward, discount_t, lambda_t, unroll.behaviour_value
        )
        return excess, excess + unroll.behaviour_value[:-1]

    return fn
