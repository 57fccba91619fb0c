"""Running observation statistics equal the statistics of all data seen, merged in any order."""

import jax
import jax.numpy as jnp
import numpy as np

from networks import normalization


def test_running_stats_match_numpy_over_all_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 5)).astype(np.float32) for n in (7, 1, 30, 12)]
    masks = [rng.random(len(b)) > 0.3 for b in batches]
    stats = normalization.init_stats((5,))
    for x, m in zip(batches, masks):
        stats = normalization.update_stats(
            stats, *normalization.batch_moments(jnp.asarray(x), jnp.asarray(m))
        )
    seen = np.concatenate([x[m] for x, m in zip(batches, masks)])
    np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var, seen.var(0), rtol=1e-4)
    assert float(stats.count) == len(seen)


def test_moments_combine_across_devices():
    x = np.random.default_rng(1).normal(size=(2, 6, 3)).astype(np.float32)
    mask = np.ones((2, 6), bool)
    mask[1, 4:] = False
    fn = jax.pmap(
        lambda a, m: normalization.batch_moments(a, m, "d"), "d", devices=jax.local_devices()[:2]
    )
    count, mean, m2 = (np.asarray(v)[0] for v in fn(x, mask))
    flat = x.reshape(12, 3)[mask.reshape(12)]
    assert count == 10
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-5)
    np.testing.assert_allclose(m2, ((flat - flat.mean(0)) ** 2).sum(0), rtol=1e-4)


def test_normalize_clips_to_five_and_empty_stats_are_identity():
    stats = normalization.init_stats((2,))
    stats = normalization.update_stats(
        stats, *normalization.batch_moments(jnp.zeros((0, 2)), jnp.zeros((0,), bool))
    )
    np.testing.assert_allclose(
        normalization.normalize(stats, jnp.array([[1.5, -2.0]])), [[1.5, -2.0]], rtol=1e-6
    )
    stats = normalization.RunningStats(jnp.zeros(2), jnp.full(2, 0.01), jnp.ones(()))
    np.testing.assert_allclose(
        normalization.normalize(stats, jnp.array([[1.0, -0.01]])), [[5.0, -0.1]], rtol=1e-5
    )
