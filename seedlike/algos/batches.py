"""What an algorithm's loss reads, one type per batch kind of seedlike.algos (`Algorithm.batch`),
and what it returns beside the loss (`LossAux`):

    steps        SampleBatch: independent steps of actors' unrolls (SequenceBatch where the
                 network is recurrent: whole unrolls replayed from their stored carry)
    unrolls      SequenceBatch: whole unrolls (targets that run along the unroll, like V-trace)
    transitions  Transitions: n-step transitions sampled from the replay
    sequences    Sequences: stored unrolls sampled whole from the replay, with the recurrent
                 state each started from (R2D2)

Storage (seedlike.learning.replay) builds the replay's types; the learners build the others.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class LossAux(NamedTuple):
    """What a loss_fn returns beside the loss: its metrics (scalars, the record's `metrics`), and
    for a replay's batch each sample's new priority [S] (None where nothing is replayed)."""

    metrics: dict
    priority: jax.Array | None = None


class SampleBatch(NamedTuple):
    """A minibatch of samples; every array has the same leading shape [*S] (any rank).

    obs/extras: dict key -> [*S, *spec.shape]; action int32; behaviour_logp, behaviour_value,
    advantage, value_target float32; mask float32 (1 for samples that count in the loss).
    """

    obs: dict
    extras: dict
    action: jax.Array
    behaviour_logp: jax.Array
    behaviour_value: jax.Array
    advantage: jax.Array
    value_target: jax.Array
    mask: jax.Array


class SequenceBatch(NamedTuple):
    """Unrolls [b, T+1, ...] (seedlike.types.Unroll with `first` and `carry`) and, for PPO, the
    advantages and value targets of steps 0..T-1 [b, T] (None for V-trace); weight [b] float32
    what each unroll's valid steps count for in the loss (None: 1; the learner's per-identity
    factors, update.Learner._weights)."""

    unroll: object
    advantage: jax.Array | None = None
    value_target: jax.Array | None = None
    weight: jax.Array | None = None


class Transitions(NamedTuple):
    """A minibatch of n-step transitions sampled from the replay; leading shape [S].

    obs/extras, next_obs/next_extras: dict key -> [S, *spec.shape]; action int32; reward float32
    (the discounted n-step sum); discount float32 (gamma^m, 0 after a termination); weight
    float32, the importance weight of prioritized sampling, (N P(i))^-beta (1 when uniform; the
    loss divides by the batch's largest).
    """

    obs: dict
    extras: dict
    action: jax.Array
    reward: jax.Array
    discount: jax.Array
    next_obs: dict
    next_extras: dict
    weight: jax.Array


class Sequences(NamedTuple):
    """A minibatch of stored sequences; leading shape [S], then T+1 steps.

    obs/extras: dict key -> [S, T+1, ...]; action int32 [S, T+1]; first bool [S, T+1] (an
    episode starts: the core resets before the step); carry: the recurrent state before step 0
    (a pytree of [S, ...]); reward, discount float32 [S, T] and boot int32 [S, T] (the n-step
    targets' pieces, seedlike.algos.td.n_step_targets); learn bool [S, T]: the steps the
    loss counts (valid, after the burn-in); weight float32 [S], the importance weight; age
    float32 [S]: how many policy versions older than the learner the stored state is.
    """

    obs: dict
    extras: dict
    action: jax.Array
    first: jax.Array
    carry: Any
    reward: jax.Array
    discount: jax.Array
    boot: jax.Array
    learn: jax.Array
    weight: jax.Array
    age: jax.Array


def forward_sequence(network, params, obs_norm, unroll, steps: int):
    """Logits [b, steps, A] and values [b, steps] for the first `steps` steps of the unrolls,
    replayed from the carry stored at the unroll start (truncated BPTT)."""
    take = lambda tree: jax.tree.map(lambda x: x[:, :steps], tree)  # noqa: E731
    if network.is_recurrent:
        logits, value, _ = network.unroll(
            params,
            obs_norm,
            take(unroll.obs),
            take(unroll.extras),
            unroll.carry,
            unroll.first[:, :steps],
            take(unroll.action),
        )
        return logits, value
    return network.apply(
        params, obs_norm, take(unroll.obs), take(unroll.extras), take(unroll.action)
    )


def step_source(unrolls, advantage, value_target, weight=None) -> SampleBatch:
    """What feed-forward PPO samples steps from: the unrolls' fields [B, T+1, ...] (step T only
    bootstraps, so it is never drawn) beside the advantages and value targets [B, T]; weight
    [B] as SequenceBatch's, in the mask."""
    return SampleBatch(
        obs=unrolls.obs,
        extras=unrolls.extras,
        action=unrolls.action,
        behaviour_logp=unrolls.behaviour_logp,
        behaviour_value=unrolls.behaviour_value,
        advantage=advantage,
        value_target=value_target,
        mask=unrolls.valid if weight is None else unrolls.valid * weight[..., None],
    )


def step_mask(items: SequenceBatch, steps: int):
    """What steps 0..steps-1 of a SequenceBatch's unrolls count for in the loss [b, steps]: the
    valid ones their unroll's weight."""
    mask = items.unroll.valid[:, :steps].astype(jnp.float32)
    return mask if items.weight is None else mask * items.weight[:, None]


def take_steps(source: SampleBatch, idx) -> SampleBatch:
    """The minibatch of steps idx [S] (step t of unroll b is b * T + t) from a step_source."""
    horizon = source.advantage.shape[1]
    unroll, step = idx // horizon, idx % horizon
    batch = jax.tree.map(lambda x: x[unroll, step], source)
    return batch._replace(mask=batch.mask.astype(jnp.float32))


def take_unrolls(items: SequenceBatch, idx) -> SequenceBatch:
    """The minibatch of whole unrolls idx [S]."""
    return jax.tree.map(lambda x: x[idx], items)


def strength(batch) -> jax.Array | None:
    """How much of a step a minibatch of weighed samples makes: its heaviest sample's weight,
    capped at 1 (float32 []), or None for a batch without such weights (a replay batch's are
    importance weights). The loss's means are weighted, so within a minibatch only the ratios
    count; this is the absolute part: a minibatch of nothing but identities on probation
    (update.Learner._weights, relative to the run's most trusted identity) moves the
    parameters that much less, instead of as much as any other."""
    if isinstance(batch, SampleBatch):
        weights = batch.mask
    elif isinstance(batch, SequenceBatch) and batch.weight is not None:
        weights = batch.weight
    else:
        return None
    return jnp.minimum(1.0, jnp.max(jnp.asarray(weights, jnp.float32)))
