"""The compiled program of an on-device run: n policy versions in one call, each a rollout of
every env followed by the algorithm's update, through the one learner contract (seedlike.algos):
its `advantages`, its `make_loss` and train_state.make_sgd_step, as the SEED learner
(seedlike.learning.update.Learner) runs them on actors' unrolls. pmapped over the local devices:
each holds its share of the envs, and the sgd step averages gradients over all of them."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from networks import normalization
from seedlike.algos import ALGORITHMS, UNROLLS, batches, exploration
from seedlike.config import ConfigError
from seedlike.envs.device import TurnEnv
from seedlike.league.league import bots_of
from seedlike.learning import train_state as ts
from seedlike.ondevice import rollout as rollout_lib
from seedlike.ondevice import selfplay


class Totals(NamedTuple):
    """Sums over the updates of one call: the loss metrics' means per kept update (a discarded
    one adds nothing), and the counts: updates, nonfinite, episodes, episode_return_sum,
    episode_length_sum and, in a two-player game, outcomes (the episodes that ended, by
    opponent and result: rollout.by_label)."""

    metrics: dict
    counts: dict


@dataclasses.dataclass(frozen=True)
class Shape:
    """One device's share of an update: envs (each gives one unroll), steps per unroll, and the
    algorithm's passes over the batch."""

    envs: int
    length: int
    epochs: int
    minibatches: int
    sequences: bool  # minibatches of whole unrolls (a recurrent network, a batch of unrolls)


def shape_of(config, network, devices: int) -> Shape:
    """The per-device shape, or ConfigError (one line) where the config's does not divide."""
    c = config[config.algo]
    algorithm = ALGORITHMS[config.algo]
    sequences = network.is_recurrent or algorithm.batch == UNROLLS
    envs, length, m = int(config.batch_unrolls), int(config.unroll_length), int(c.num_minibatches)
    items = envs // devices if sequences else envs // devices * length
    lanes = int(config.league.device_lanes) if network.spec.num_players == 2 else 1
    if envs % devices == 0 and (envs // devices) % lanes:
        raise ConfigError(
            f"batch_unrolls={envs} (the on-device envs) must split over {devices} devices and "
            f"each device's into league.device_lanes={lanes} lanes of equal size"
        )
    if envs % devices or items % m:
        what = "batch_unrolls" if sequences else "batch_unrolls*unroll_length"
        raise ConfigError(
            f"batch_unrolls={envs} (the on-device envs) must split over {devices} devices, and "
            f"each device's {what} into {config.algo}.num_minibatches={m} minibatches"
        )
    return Shape(envs // devices, length, int(c.epochs), m, sequences)


def make_epsilon(config, network, shape: Shape, devices: int):
    """epsilon(policy_version) -> [envs] for one device (under pmap): each env's exploration
    rate before that version's rollout, where the network is a Q network (None otherwise). Env
    i of all the program's envs holds Ape-X slot i mod epsilon_slots (seedlike.algos.exploration,
    as the inference server gives a slot to each actor identity), annealed over the env steps of
    the versions before."""
    c = config[config.algo]
    if not network.q:
        return None
    rates = exploration.apex_epsilons(c.epsilon, c.epsilon_alpha, c.epsilon_slots)
    table = rates[np.arange(devices * shape.envs) % int(c.epsilon_slots)]
    table = table.reshape(devices, shape.envs)
    steps_per_version = float(devices * shape.envs * shape.length)
    anneal = float(c.anneal_steps)

    def epsilon(version):
        own = jnp.asarray(table)[jax.lax.axis_index(ts.AXIS)]
        if anneal <= 0:
            return own
        left = jnp.clip(1.0 - version.astype(jnp.float32) * steps_per_version / anneal, 0.0, 1.0)
        return exploration.annealed(own, left)

    return epsilon


def make_update(config, network, env, shape: Shape, sgd_step, devices: int):
    """update(state, acting, table) -> (state, acting, metrics, counts) for one device (under
    pmap): one policy version. A non-finite loss or gradient leaves the state as it was
    (nonfinite 1). `env` a DeviceEnv (table None), or a two-player game's TurnEnv: the learner's
    seat against the table's snapshot slots (selfplay.Table without the learner's own row, which
    the update puts first: this version's params) and the league's bots (none for an
    exploiter)."""
    algorithm = ALGORITHMS[config.algo]
    turns = isinstance(env, TurnEnv)
    bots = bots_of(config.league) if turns else ()
    lanes = int(config.league.device_lanes)
    every = int(config.league.snapshot_every)
    lanes_key = jax.random.key(int(config.seed))
    epsilon = make_epsilon(config, network, shape, devices)
    c = config[config.algo]
    reward_norm = None
    if c.normalize_rewards:
        reward_norm = rollout_lib.RewardNorm(
            float(c.gamma), float(c.normalized_reward_clip), ts.AXIS
        )
    advantages = algorithm.load().advantages(config[config.algo])
    take = batches.take_unrolls if shape.sequences else batches.take_steps
    items_per_device = shape.envs if shape.sequences else shape.envs * shape.length

    def learn(state, unroll, key):
        if advantages is not None:
            advantage, value_target = jax.vmap(advantages)(unroll)
        else:
            advantage = value_target = None
        if shape.sequences:
            items = batches.SequenceBatch(unroll, advantage, value_target)
        else:
            items = batches.step_source(unroll, advantage, value_target)

        def epoch(state, key):
            order = jax.random.permutation(key, items_per_device)
            order = order.reshape(shape.minibatches, -1)
            return jax.lax.scan(lambda s, idx: sgd_step(s, take(items, idx)), state, order)

        state, (metrics, _) = jax.lax.scan(epoch, state, jax.random.split(key, shape.epochs))
        return state, jax.tree.map(jnp.mean, metrics)

    def update(state, acting, table=None):
        key, learn_key = jax.random.split(jax.random.wrap_key_data(acting.key))
        acting = acting._replace(key=jax.random.key_data(key))
        version = state.policy_version
        # A two-player game's lanes hold their snapshots from one snapshot to the next (the
        # table's period), each device's its own.
        period = version // every
        lane_key = jax.random.fold_in(
            jax.random.fold_in(lanes_key, period), jax.lax.axis_index(ts.AXIS)
        )
        seat = seat_of(env, network, state, table, lanes, lane_key, period, bots)
        acting, unroll, episodes = rollout_lib.rollout(
            network, seat, state.params, state.obs_norm, acting, shape.length, version,
            None if epsilon is None else epsilon(version), reward_norm,
        )  # fmt: skip
        new, metrics = learn(state, unroll, learn_key)
        finite = jnp.all(jnp.stack([jnp.isfinite(v) for v in jax.tree.leaves(metrics)]))
        new = new.replace(
            obs_norm=_observed(state.obs_norm, unroll), policy_version=state.policy_version + 1
        )
        state = jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, state)
        counts = {
            "updates": jnp.float32(1),
            "nonfinite": 1.0 - finite.astype(jnp.float32),
            "episodes": jax.lax.psum(episodes.count, ts.AXIS),
            "episode_return_sum": jax.lax.psum(episodes.return_sum, ts.AXIS),
            "episode_length_sum": jax.lax.psum(episodes.length_sum, ts.AXIS),
        }
        if turns:
            counts["outcomes"] = jax.lax.psum(episodes.outcomes, ts.AXIS)
        return state, acting, metrics, counts

    return update


def seat_of(env, network, state, table, lanes: int, key, period, bots: tuple[str, ...]):
    """The env the learner's program steps: `env` itself, or a two-player game's learner seat
    (selfplay.seat_env: its lanes' snapshots drawn with `key`, fixed through `period`) against
    the table's slots, `bots` and this state's own policy (the table's choice 0)."""
    if not isinstance(env, TurnEnv):
        return env
    own = {"params": state.params, "obs_norm": state.obs_norm}
    players = jax.tree.map(
        lambda o, pool: jnp.concatenate([o[None].astype(pool.dtype), pool]), own, table.players
    )
    table = table._replace(players=players)
    return selfplay.seat_env(env, network, table, lanes, key, period, bots)


def _observed(obs_norm: dict, unroll) -> dict:
    """The running observation statistics with the unrolls' steps 0..T-1 merged in, over every
    device (the bootstrap step is the next unroll's first)."""
    merged = {}
    for k, stats in obs_norm.items():
        x = unroll.obs[k][:, :-1].astype(jnp.float32)
        x = x.reshape((-1,) + x.shape[2:])
        count = jnp.float32(x.shape[0])
        mean = jnp.mean(x, 0)
        m2 = jnp.sum(jnp.square(x - mean), 0)
        moments = normalization.combine_moments(count, mean, m2, 1, ts.AXIS)
        merged[k] = normalization.update_stats(stats, *moments)
    return merged


def make_program(config, network, env, shape: Shape, sgd_step, devices):
    """program(state, acting, n, table) -> (state, acting, Totals) for n [devices] updates per
    call (the same n on every device; a traced count, so every call size shares one compile).
    state, acting and the Totals carry [devices, seeds, ...]: config.seeds agents side by side,
    vmapped (each averages its gradients over the devices, with no other agent). `table`: a
    two-player game's opponents (make_update), the same on every device and agent; else None."""
    update = make_update(config, network, env, shape, sgd_step, len(devices))

    def run(state, acting, n, table):
        def body(_, carry):
            state, acting, totals = carry
            state, acting, metrics, counts = update(state, acting, table)
            # A discarded update's metrics (non-finite) stay out of the sums.
            kept = 1.0 - counts["nonfinite"]
            metrics = jax.tree.map(lambda m: jnp.where(kept > 0, m, 0.0), metrics)
            return state, acting, Totals(*jax.tree.map(jnp.add, totals, Totals(metrics, counts)))

        zeros = _zeros(update, state, acting, table)
        return jax.lax.fori_loop(0, n, body, (state, acting, zeros))

    agents = jax.vmap(run, in_axes=(0, 0, None, None))
    return jax.pmap(
        agents, ts.AXIS, in_axes=(0, 0, 0, None), devices=devices, donate_argnums=(0, 1)
    )


def _zeros(update, state, acting, table) -> Totals:
    """Totals of zeros to sum into, in the structure of an update's, traced without running it."""
    _, _, metrics, counts = jax.eval_shape(update, state, acting, table)
    zeros = lambda s: jnp.zeros(s.shape, s.dtype)  # noqa: E731
    return Totals(jax.tree.map(zeros, metrics), jax.tree.map(zeros, counts))
