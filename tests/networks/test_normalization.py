"""Running observation statistics equal the statistics of all data seen, merged in any order, and
one actor (or one row) moves them only as far as identity_moments allows."""

import jax
import jax.numpy as jnp
import numpy as np

from networks import normalization


def moments(x, identity=None, stats=None, window=None, now=0.0):
    """IdentityWindow moments of rows x [N, F] as one unroll each (every row counts)."""
    x = np.asarray(x, np.float32)
    identity = np.zeros(len(x), np.int64) if identity is None else np.asarray(identity)
    stats = stats or normalization.init_stats(x.shape[1:])
    window = window or normalization.IdentityWindow(seconds=30.0)
    got = window.moments({"x": x[:, None]}, np.ones((len(x), 1), bool), identity, {"x": stats}, now)
    return got["x"]


def test_running_stats_match_numpy_over_all_batches():
    """One identity, one batch per window, statistics without data: plain running moments."""
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 5)).astype(np.float32) for n in (7, 1, 30, 12)]
    merged = normalization.init_stats((5,))
    window = normalization.IdentityWindow(seconds=30.0, row_clip=1e9)
    for i, x in enumerate(batches):  # 100 s apart: each window holds its own batch only
        got = moments(x, stats=merged, window=window, now=100.0 * i)
        merged = normalization.update_stats(merged, *got)
    seen = np.concatenate(batches)
    np.testing.assert_allclose(merged.mean, seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(merged.var, seen.var(0), rtol=1e-4)
    assert float(merged.count) == len(seen)


def test_moments_combine_across_devices():
    """Two hosts' moments merge like their rows (Chan et al.); one host's copies on two devices
    give its own moments back."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 3)).astype(np.float32) * np.array([1.0, 2.0, 5.0], np.float32)
    parts = [moments(x[d]) for d in range(2)]
    stacked = [np.stack([np.asarray(p[i], np.float32) for p in parts]) for i in range(3)]
    fn = jax.pmap(
        lambda c, m, s: normalization.combine_moments(c, m, s, 1, "d"),
        "d",
        devices=jax.local_devices()[:2],
    )
    count, mean, m2 = (np.asarray(v)[0] for v in fn(*stacked))
    flat = x.reshape(12, 3)
    assert count == 12
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-5)
    np.testing.assert_allclose(m2, ((flat - flat.mean(0)) ** 2).sum(0), rtol=1e-4)
    one = moments(flat)
    halves = jax.pmap(
        lambda c, m, s: normalization.combine_moments(c, m, s, 2, "d"),
        "d",
        devices=jax.local_devices()[:2],
    )(*(np.stack([np.asarray(v, np.float32)] * 2) for v in one))
    np.testing.assert_allclose(np.asarray(halves[2])[0], one[2], rtol=1e-5)
    assert float(np.asarray(halves[0])[0]) == 12


def test_median_over_identities_against_numpy():
    """mean = median of identity means; var = median of (var_g + (mean_g - mean)^2)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(30, 2)).astype(np.float32) + np.repeat([0.0, 1.0, 3.0], 10)[:, None]
    identity = np.repeat([7, 1, 4], 10)
    count, mean, m2 = moments(x, identity)
    means = np.stack([x[identity == g].mean(0) for g in (7, 1, 4)])
    vars_ = np.stack([x[identity == g].var(0) for g in (7, 1, 4)])
    np.testing.assert_allclose(mean, np.median(means, 0), rtol=1e-5)
    np.testing.assert_allclose(
        m2 / 30, np.median(vars_ + (means - np.median(means, 0)) ** 2, 0), rtol=1e-4
    )
    assert count == 30


def test_one_bad_identity_of_three_moves_nothing_beyond_the_honest_range():
    """Identity 2 sends the codec's largest legal value in every row, first mixed with the others
    and then in batches of its own; the moments stay within the honest identities' (the plain
    moments: variance ~2e11)."""
    rng = np.random.default_rng(3)
    honest = rng.normal(0.0, 0.7, size=(40, 4)).astype(np.float32)
    bad = np.full((20, 4), 9.9e5, np.float32)
    window = normalization.IdentityWindow(seconds=30.0)
    identity = np.repeat([0, 1, 2], 20)
    count, mean, m2 = moments(np.concatenate([honest, bad]), identity, window=window, now=0.0)
    means = np.stack([honest[:20].mean(0), honest[20:].mean(0)])
    assert np.all(mean >= means.min(0) - 1e-6) and np.all(mean <= means.max(0) + 1e-6)
    assert np.all(m2 / count < 1.0) and np.concatenate([honest, bad]).var(0).min() > 1e11
    # A batch the bad identity filled alone, 10 s later: the window still holds the others.
    count, mean, m2 = moments(bad, np.full(20, 2), window=window, now=10.0)
    assert np.all(np.abs(mean) < 1.0) and np.all(m2 / count < 1.0)
    # 40 s later the window holds that batch only: its moments, as with a single actor.
    count, mean, m2 = moments(bad, np.full(20, 2), window=window, now=50.0)
    np.testing.assert_allclose(mean, 9.9e5)


def test_one_row_moves_established_statistics_by_at_most_the_clip():
    """Finding 1 of issue 33: one row of 9.9e5 (inside the codec's bound) among 1,000 honest rows
    took the variance from 0.45 to ~4.5e6 when merged plainly; clipped to mean +- 5 std first,
    it moves the variance by at most ~25 x 0.45 / 1,000."""
    rng = np.random.default_rng(4)
    stats = normalization.RunningStats(np.zeros(3), np.full(3, 0.45), np.asarray(1e5))
    x = rng.normal(0.0, np.sqrt(0.45), size=(1000, 3)).astype(np.float32)
    x[500] = 9.9e5
    after = normalization.update_stats(stats, *moments(x, stats=stats))
    np.testing.assert_allclose(after.var, 0.45, rtol=0.05)
    plain = normalization.update_stats(stats, *moments(x))  # statistics without data: no clip
    assert float(plain.var.min()) > 0.45 * 10


def test_normalize_clips_to_five_and_empty_stats_are_identity():
    stats = normalization.init_stats((2,))
    stats = normalization.update_stats(stats, jnp.zeros(()), jnp.zeros(2), jnp.zeros(2))
    np.testing.assert_allclose(
        normalization.normalize(stats, jnp.array([[1.5, -2.0]])), [[1.5, -2.0]], rtol=1e-6
    )
    stats = normalization.RunningStats(jnp.zeros(2), jnp.full(2, 0.01), jnp.ones(()))
    np.testing.assert_allclose(
        normalization.normalize(stats, jnp.array([[1.0, -0.01]])), [[5.0, -0.1]], rtol=1e-5
    )
