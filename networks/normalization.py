"""Running mean/std observation normalization (OpenAI Five, App. E).

For each float observation feature a running mean and variance of all data ever observed is kept;
inputs are normalized as (x - mean) / std and clipped to [-clip, clip] (clip = 5 in the paper). The
statistics live in the learner state, not in the network parameters, so gradient steps never touch
them; they are updated once per learner batch with the parallel-variance formula.
"""

from __future__ import annotations

import collections

import flax
import jax
import jax.numpy as jnp
import numpy as np

DEFAULT_CLIP = 5.0
_EPS = 1e-8


@flax.struct.dataclass
class RunningStats:
    """mean and var have the feature shape; count is a float32 scalar."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_stats(shape) -> RunningStats:
    return RunningStats(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.zeros((), jnp.float32),
    )


class IdentityWindow:
    """The observation moments of a learner batch, bounded in how far one actor identity, or one
    row, can move them (host side, numpy; the learner merges the result with `update_stats`).

    Rows are first clipped to the running statistics' mean +- row_clip std (once they have data):
    what the network sees of a row is clipped there anyway (`normalize`). Each identity's sums over
    the batches of the last `seconds` give its mean and variance; the batch's are the medians over
    the identities of that window: mean = median_g mean_g, var = median_g (var_g + (mean_g -
    mean)^2), and its count is the batch's rows. With one identity these are the moments of its
    recent rows; with bad identities a minority of three or more, both lie within the honest
    identities' range whatever values the bad ones send, also in batches that only they filled.
    """

    def __init__(self, seconds: float = 30.0, row_clip: float = DEFAULT_CLIP):
        self.seconds = float(seconds)
        self.row_clip = float(row_clip)
        self._batches: collections.deque = collections.deque()  # (time, {key: {id: sums}})
        self._totals: dict = {}  # key -> identity -> [rows, sum, sum of squares] in the window

    def moments(self, obs: dict, mask, identity, stats: dict, now: float) -> dict:
        """{key: (count, mean, m2)} of a batch for each key of `stats` (RunningStats, host
        values). obs: key -> [B, T, ...] (the steps learned from), mask [B, T] the rows that
        count, identity [B] each unroll's identity."""
        mask = np.asarray(mask, bool)
        identity = np.asarray(identity)
        batch = {}
        for key, st in stats.items():
            x = np.asarray(obs[key], np.float64)
            if float(st.count) > 0:
                std = np.sqrt(np.asarray(st.var, np.float64) + _EPS)
                mean = np.asarray(st.mean, np.float64)
                x = np.clip(x, mean - self.row_clip * std, mean + self.row_clip * std)
            w = mask.reshape(mask.shape + (1,) * (x.ndim - 2))
            rows, s1, s2 = mask.sum(axis=1), np.sum(w * x, axis=1), np.sum(w * x * x, axis=1)
            batch[key] = {
                i.item(): [rows[mine].sum(), s1[mine].sum(0), s2[mine].sum(0)]
                for i in np.unique(identity)
                for mine in [identity == i]
            }
        self._add(batch, +1.0)
        self._batches.append((now, batch))
        while self._batches[0][0] < now - self.seconds:
            self._add(self._batches.popleft()[1], -1.0)
        return {key: self._merged(key, float(mask.sum())) for key in stats}

    def _add(self, batch: dict, sign: float) -> None:
        for key, per_id in batch.items():
            totals = self._totals.setdefault(key, {})
            for i, sums in per_id.items():
                have = totals.setdefault(i, [0.0, 0.0, 0.0])
                for j in range(3):
                    have[j] = have[j] + sign * sums[j]
                if sign < 0 and have[0] <= 0.5:  # no rows of it left in the window
                    del totals[i]

    def _merged(self, key, count: float):
        present = [v for v in self._totals.get(key, {}).values() if v[0] > 0.5]
        if not present:
            return 0.0, 0.0, 0.0
        n = np.array([v[0] for v in present]).reshape((-1,) + (1,) * np.ndim(present[0][1]))
        mean_g = np.stack([v[1] for v in present]) / n
        var_g = np.maximum(np.stack([v[2] for v in present]) / n - np.square(mean_g), 0.0)
        mean = np.median(mean_g, axis=0)
        var = np.median(var_g + np.square(mean_g - mean), axis=0)
        return count, mean.astype(np.float32), (var * count).astype(np.float32)


def combine_moments(count, mean, m2, parts: int, axis_name: str | None = None):
    """Moments a host computed, given to each of its `parts` local devices, merged across the
    pmap axis (one host: the same moments; several: Chan et al.'s parallel merge of theirs)."""
    count, m2 = count / parts, m2 / parts
    if axis_name is None:
        return count, mean, m2
    total = jax.lax.psum(count, axis_name)
    merged = jax.lax.psum(count * mean, axis_name) / jnp.maximum(total, 1.0)
    m2 = jax.lax.psum(m2 + count * jnp.square(mean - merged), axis_name)
    return total, merged, m2


def update_stats(stats: RunningStats, count, mean, m2) -> RunningStats:
    """Merges batch moments into running statistics (Chan et al. parallel variance)."""
    total = stats.count + count
    safe_total = jnp.maximum(total, 1.0)
    delta = mean - stats.mean
    new_mean = stats.mean + delta * count / safe_total
    old_m2 = stats.var * stats.count
    new_var = (old_m2 + m2 + jnp.square(delta) * stats.count * count / safe_total) / safe_total
    # With no data yet keep the identity transform instead of dividing by zero.
    empty = total <= 0
    return RunningStats(
        mean=jnp.where(empty, stats.mean, new_mean),
        var=jnp.where(empty, stats.var, new_var),
        count=total,
    )


def normalize(stats: RunningStats, x: jax.Array, clip: float = DEFAULT_CLIP) -> jax.Array:
    z = (x.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + _EPS)
    return jnp.clip(z, -clip, clip)
