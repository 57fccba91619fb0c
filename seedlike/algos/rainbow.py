"""A Rainbow-style learner (Hessel et al. 2018, arXiv:1710.02298) from the replay: n-step double
Q-learning with a target network, over a plain, dueling or distributional (C51) Q head
(networks.heads.QHead), each sample weighted by its prioritized-replay importance weight.

The replay (seedlike.learning.replay) turns each stored unroll into transitions with `n_step`
targets once, when it is inserted (seedlike.algos.td.n_step_targets); the loss reads a
`Transitions` batch (seedlike.algos.batches): the observation acted on, the action, the
discounted n-step reward R, the discount D to the bootstrap observation (0 past a termination)
and that observation. The target is

    R + D * Q_target(s', argmax_a Q_online(s', a))     (double Q; Q_target's own argmax without),

or, with atoms, the target network's distribution at that action shifted by R and scaled by D,
projected onto the atoms (`categorical_projection`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from networks import heads
from seedlike.algos.batches import LossAux, Transitions
from seedlike.algos.td import huber


def categorical_projection(values: jax.Array, probs: jax.Array, support: jax.Array) -> jax.Array:
    """The distribution putting probs [..., K] on values [..., K], projected onto the evenly
    spaced `support` [K]: each value's mass split between its two nearest atoms in proportion to
    closeness (values beyond the ends go to the ends). Returns [..., K]."""
    values = jnp.clip(values, support[0], support[-1])
    delta = support[1] - support[0]
    # weight[..., i, j]: the share of source atom j's mass that lands on atom i.
    weight = jnp.clip(1.0 - jnp.abs(values[..., None, :] - support[:, None]) / delta, 0.0, 1.0)
    return jnp.sum(weight * probs[..., None, :], axis=-1)


def make_rainbow_loss(network, config, axis_name: str | None = None):
    """Returns loss_fn(params, target_params, obs_norm, batch: Transitions, key) ->
    (loss, LossAux(metrics: ALGORITHMS["rainbow"].metrics, priority [S])) (`key`: a noisy
    head's weight noise, one draw for the online network and one for the target): the
    importance-weighted mean of the per-sample losses (Huber on the TD error with one atom; the
    cross-entropy to the projected target distribution with atoms), and each sample's new
    priority (|TD error|, or that cross-entropy).

    Means are over the whole (device-sharded) minibatch: each device divides its sum by the
    per-device sample count, so pmean of the gradients is the gradient of the global mean.
    """
    head = network.module.head_spec
    atoms, double = int(head.atoms), bool(config.double_q)
    support = heads.q_support(atoms, head.value_range) if atoms > 1 else None
    delta = float(config.huber_delta)

    def pmean(x):
        return x if axis_name is None else jax.lax.pmean(x, axis_name)

    noisy = bool(head.noisy)

    def outputs(params, obs_norm, obs, extras, key):
        return network.apply(params, obs_norm, obs, extras, noise=key if noisy else None)[0]

    def loss_fn(params, target_params, obs_norm, batch: Transitions, key):
        online_key, target_key = jax.random.split(key)
        size = batch.action.shape[0]
        both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), batch.obs, batch.next_obs)
        both_extras = jax.tree.map(
            lambda a, b: jnp.concatenate([a, b]), batch.extras, batch.next_extras
        )
        online = outputs(params, obs_norm, both, both_extras, online_key)
        now, after = online[:size], jax.lax.stop_gradient(online[size:])
        target = jax.lax.stop_gradient(
            outputs(target_params, obs_norm, batch.next_obs, batch.next_extras, target_key)
        )
        chooser = after if double else target
        best = network.q_values(chooser).argmax(-1)
        reward, discount = batch.reward, batch.discount
        if atoms == 1:
            q = jnp.take_along_axis(now, batch.action[:, None], -1)[:, 0]
            q_next = jnp.take_along_axis(target, best[:, None], -1)[:, 0]
            td = reward + discount * q_next - q
            per_sample = huber(td, delta)
            priority = jnp.abs(td)
            q_taken = q
        else:
            logits = now.reshape(size, -1, atoms)
            logits = jnp.take_along_axis(logits, batch.action[:, None, None], 1)[:, 0]
            next_probs = jax.nn.softmax(target.reshape(size, -1, atoms), axis=-1)
            next_probs = jnp.take_along_axis(next_probs, best[:, None, None], 1)[:, 0]
            shifted = reward[:, None] + discount[:, None] * support[None]
            goal = jax.lax.stop_gradient(categorical_projection(shifted, next_probs, support))
            per_sample = -jnp.sum(goal * jax.nn.log_softmax(logits), axis=-1)
            priority = per_sample
            q_taken = jnp.sum(jax.nn.softmax(logits) * support, axis=-1)
        count = jnp.maximum(pmean(jnp.float32(size)), 1.0)

        def mean(x):
            return jnp.sum(x) / count

        # Importance weights over the sgd batch's largest, on every device alike.
        largest = jnp.max(batch.weight)
        largest = largest if axis_name is None else jax.lax.pmax(largest, axis_name)
        weight = batch.weight / jnp.maximum(largest, 1e-12)
        loss = mean(weight * per_sample)
        metrics = {
            "loss/total": loss,
            "loss/td_abs": mean(priority),
            "loss/q_mean": mean(q_taken),
            "loss/weight_mean": mean(weight),
        }
        return loss, LossAux(metrics, jax.lax.stop_gradient(priority))

    return loss_fn


make_loss = make_rainbow_loss  # the name seedlike.algos.Algorithm looks up
