"""What an algorithm's loss reads from the learner: minibatches of independent samples
(`SampleBatch`: feed-forward PPO) or of whole unrolls (`SequenceBatch`: recurrent networks, and
losses whose targets run along the unroll, like V-trace). `Algorithm.sequences` and the network
say which (seedlike.learning.learner)."""

from __future__ import annotations

from typing import NamedTuple

import jax


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
    advantages and value targets of steps 0..T-1 [b, T] (None for V-trace)."""

    unroll: object
    advantage: jax.Array | None = None
    value_target: jax.Array | None = None


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
