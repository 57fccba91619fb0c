"""Learner state and the pure functions that change it: optimizer, sgd_step, batch preparation."""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import optax

from networks import normalization
from seedlike.algos import gae

# The one pmap axis every collective in the learner reduces over.
AXIS = "devices"


@flax.struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState
    obs_norm: dict  # key -> normalization.RunningStats (float observation keys only)
    sgd_steps: jax.Array  # int32 scalar: gradient steps taken
    updates: jax.Array  # int32 scalar: learner batches consumed == published policy version
    lr_zero_until: jax.Array  # int32 scalar: learning rate is 0 while sgd_steps < this (surgery)


def make_optimizer(optimizer_config) -> optax.GradientTransformation:
    """Global-norm clipping then Adam; the learning rate is an injected hyperparameter."""

    def build(learning_rate):
        return optax.chain(
            optax.clip_by_global_norm(optimizer_config.max_grad_norm),
            optax.adam(learning_rate, eps=optimizer_config.adam_eps),
        )

    return optax.inject_hyperparams(build)(learning_rate=optimizer_config.learning_rate)


def make_learning_rate_fn(optimizer_config, total_sgd_steps: int):
    """step -> learning rate: constant or linearly annealed to 0 over total_sgd_steps."""
    base = float(optimizer_config.learning_rate)
    anneal = bool(optimizer_config.anneal_lr)
    total = float(max(int(total_sgd_steps), 1))  # a float: a huge int would overflow int32

    def learning_rate(step):
        if not anneal:
            return jnp.asarray(base, jnp.float32)
        return jnp.asarray(base, jnp.float32) * jnp.clip(1.0 - step / total, 0.0, 1.0)

    return learning_rate


def init_train_state(network, optimizer, rng) -> TrainState:
    params = network.init(rng)
    zero = jnp.zeros((), jnp.int32)
    return TrainState(
        params=params,
        opt_state=optimizer.init(params),
        obs_norm=network.init_obs_norm(),
        sgd_steps=zero,
        updates=zero,
        lr_zero_until=zero,
    )


def make_sgd_step(loss_fn, optimizer, learning_rate_fn, axis_name: str = AXIS):
    """Returns the pure sgd_step(state, batch) -> (state, metrics), to be pmapped over axis_name."""

    def sgd_step(state: TrainState, batch):
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (_, metrics), grads = grad_fn(state.params, state.obs_norm, batch)
        grads = jax.lax.pmean(grads, axis_name)
        metrics = jax.lax.pmean(metrics, axis_name)

        lr = jnp.where(
            state.sgd_steps < state.lr_zero_until, 0.0, learning_rate_fn(state.sgd_steps)
        )
        opt_state = state.opt_state
        opt_state = opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": lr})
        updates, opt_state = optimizer.update(grads, opt_state, state.params)
        params = optax.apply_updates(state.params, updates)

        metrics["grad_norm"] = optax.tree.norm(grads)
        metrics["learning_rate"] = lr
        state = state.replace(params=params, opt_state=opt_state, sgd_steps=state.sgd_steps + 1)
        return state, metrics

    return sgd_step


def make_prepare(algo_config, compute_advantages: bool = True, axis_name: str = AXIS):
    """Returns prepare(state, unrolls) -> (advantage, value_target, obs_norm) for pmap.

    unrolls is a device shard of stacked Unrolls [B/n, T+1, ...]. For PPO, advantages are
    GAE(lambda) from the behaviour values recorded while acting (zeros without compute_advantages).
    The returned obs_norm merges this batch's observations (steps 0..T-1; step T is step 0 of the
    next unroll); the learner installs it after the epochs, so the first epoch sees the network
    that produced the data.
    """

    def single(unroll):
        reward = unroll.reward
        if algo_config.get("reward_clip", 0.0):
            reward = jnp.clip(reward, -algo_config.reward_clip, algo_config.reward_clip)
        discount_t, lambda_t = gae.episode_discounts(
            unroll.terminated,
            unroll.truncated,
            unroll.valid[:-1],
            algo_config.gamma,
            algo_config.gae_lambda,
        )
        advantage = gae.generalized_advantage_estimation(
            reward, discount_t, lambda_t, unroll.behaviour_value
        )
        return advantage, advantage + unroll.behaviour_value[:-1]

    def prepare(state: TrainState, unrolls):
        if compute_advantages:
            advantage, value_target = jax.vmap(single)(unrolls)
        else:
            advantage = value_target = jnp.zeros_like(unrolls.reward)
        obs_norm = {}
        for key, stats in state.obs_norm.items():
            x = unrolls.obs[key][:, :-1]
            x = x.reshape((-1,) + x.shape[2:])
            moments = normalization.batch_moments(
                x, jnp.ones(x.shape[:1], jnp.bool_), axis_name=axis_name
            )
            obs_norm[key] = normalization.update_stats(stats, *moments)
        return advantage, value_target, obs_norm

    return prepare
