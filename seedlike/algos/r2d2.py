"""R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning"): recurrent n-step double Q-learning from a replay of sequences, each stored with the
recurrent state it started from.

A sampled sequence is one stored unroll of T+1 steps (seedlike.learning.replay.SequenceReplay).
The online and the target network each run over it from its stored state (`stored_state`; else
from zeros); the first `burn_in` steps only refresh that state: no loss, and no gradient flows
through them. On the steps after, with R the discounted n-step reward sum and D the discount to
the bootstrap step b (both computed once, at insert: seedlike.algos.td.n_step_targets),

    y_t = h(R_t + D_t * h^-1(Q_target(s_b, argmax_a Q_online(s_b, a))))

under the invertible value rescaling h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x, and the loss is
Huber (or squared) on y_t - Q_online(s_t, a_t). A sequence's priority is
eta * max_t |TD_t| + (1 - eta) * mean_t |TD_t| over its learned steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seedlike.algos.batches import LossAux, Sequences
from seedlike.algos.td import huber


def rescale(x: jax.Array, eps: float = 1e-3) -> jax.Array:
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x: large returns compressed, invertibly."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def unrescale(x: jax.Array, eps: float = 1e-3) -> jax.Array:
    """h^-1(x) = sign(x)(((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1), with the
    fraction written as 2(|x| + 1 + eps) / (sqrt(...) + 1): the same number, without the float32
    cancellation of sqrt(...) - 1 (about 1e-4 of the root at eps = 1e-3)."""
    a = jnp.abs(x) + 1.0 + eps
    root = 2.0 * a / (jnp.sqrt(1.0 + 4.0 * eps * a) + 1.0)
    return jnp.sign(x) * (jnp.square(root) - 1.0)


def rescaled_target(reward, discount, value_next, eps: float = 1e-3):
    """h(R + D h^-1(v)): the n-step target of a rescaled value v at the bootstrap step."""
    return rescale(reward + discount * unrescale(value_next, eps), eps)


def sequence_priority(td_abs: jax.Array, mask: jax.Array, eta: float) -> jax.Array:
    """eta * max + (1 - eta) * mean of |TD| [S, T] over each sequence's masked steps: [S] (0 for
    a sequence with none)."""
    mask = mask.astype(td_abs.dtype)
    count = jnp.sum(mask, axis=-1)
    mean = jnp.sum(td_abs * mask, axis=-1) / jnp.maximum(count, 1.0)
    largest = jnp.max(jnp.where(mask > 0, td_abs, 0.0), axis=-1)
    return jnp.where(count > 0, eta * largest + (1.0 - eta) * mean, 0.0)


def make_r2d2_loss(network, config, axis_name: str | None = None):
    """Returns loss_fn(params, target_params, obs_norm, batch: Sequences, key) ->
    (loss, LossAux(metrics: ALGORITHMS["r2d2"].metrics, priority [S])): the importance-weighted mean
    over the learned steps of the Huber loss on the rescaled n-step double-Q TD error (module
    docstring), and each sequence's priority. Means are over the whole (device-sharded)
    minibatch, as in rainbow.make_rainbow_loss."""
    burn = int(config.burn_in)
    eps, eta, delta = (
        float(config.rescale_eps),
        float(config.priority_eta),
        float(config.huber_delta),
    )
    double, stored = bool(config.double_q), bool(config.stored_state)

    def pmean(x):
        return x if axis_name is None else jax.lax.pmean(x, axis_name)

    def run(params, obs_norm, batch: Sequences):
        """Q values [S, T+1-burn, A] of the steps after the burn-in."""
        carry = batch.carry
        if not stored:
            carry = jax.tree.map(jnp.zeros_like, carry)
        obs, extras, first = batch.obs, batch.extras, batch.first
        if burn:
            h_obs, h_extras, h_first = jax.tree.map(lambda x: x[:, :burn], (obs, extras, first))
            _, _, carry = network.unroll(params, obs_norm, h_obs, h_extras, carry, h_first)
            carry = jax.lax.stop_gradient(carry)
            obs, extras, first = jax.tree.map(lambda x: x[:, burn:], (obs, extras, first))
        outputs, _, _ = network.unroll(params, obs_norm, obs, extras, carry, first)
        return network.q_values(outputs)

    def loss_fn(params, target_params, obs_norm, batch: Sequences, key):
        del key  # no noisy heads: R2D2 explores epsilon-greedily
        q = run(params, obs_norm, batch)  # [S, L+1, A], L = T - burn
        q_target = jax.lax.stop_gradient(run(target_params, obs_norm, batch))
        size, span = q.shape[0], q.shape[1] - 1
        rows = jnp.arange(size)[:, None]
        t = slice(burn, burn + span)
        boot = batch.boot[:, t] - burn  # within the learned steps' outputs, in (t, L]
        chooser = jax.lax.stop_gradient(q) if double else q_target
        best = chooser.argmax(-1)[rows, boot]
        value_next = q_target[rows, boot, best]
        goal = rescaled_target(batch.reward[:, t], batch.discount[:, t], value_next, eps)
        taken = jnp.take_along_axis(q[:, :span], batch.action[:, t, None], -1)[..., 0]
        td = jax.lax.stop_gradient(goal) - taken
        mask = batch.learn[:, t].astype(jnp.float32)
        count = jnp.maximum(pmean(jnp.sum(mask)), 1.0)
        sequences = jnp.maximum(pmean(jnp.float32(size)), 1.0)
        largest = jnp.max(batch.weight)
        largest = largest if axis_name is None else jax.lax.pmax(largest, axis_name)
        weight = (batch.weight / jnp.maximum(largest, 1e-12))[:, None]
        loss = jnp.sum(weight * mask * huber(td, delta)) / count
        priority = sequence_priority(jnp.abs(td), mask, eta)
        metrics = {
            "loss/total": loss,
            "loss/td_abs": jnp.sum(mask * jnp.abs(td)) / count,
            "loss/q_mean": jnp.sum(mask * unrescale(taken, eps)) / count,
            "loss/weight_mean": jnp.sum(weight) / sequences,
            "loss/state_age": jnp.sum(batch.age) / sequences,
        }
        return loss, LossAux(metrics, jax.lax.stop_gradient(priority))

    return loss_fn


make_loss = make_r2d2_loss  # the name seedlike.algos.Algorithm looks up
