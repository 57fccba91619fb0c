"""seedlike.aggregate against rliable (Agarwal et al. 2021) on the same scores: the IQM and mean
exactly, the stratified bootstrap intervals up to the resampling's own noise."""

import numpy as np
import pytest

from seedlike import aggregate

rliable = pytest.importorskip("rliable", reason="rliable is a dev dependency (setup.py [dev])")


def scores():
    """3 tasks x 5 seeds of made-up final returns, on different scales and spreads."""
    rng = np.random.default_rng(7)
    return {
        "a": rng.normal(100.0, 20.0, 5),
        "b": rng.normal(5.0, 3.0, 5),
        "c": rng.uniform(0.0, 500.0, 5),
    }


def test_iqm_and_mean_equal_rliables():
    from rliable import metrics

    s = scores()
    matrix = np.stack(list(s.values()), axis=1)  # rliable's [runs, tasks]
    assert aggregate.iqm(matrix) == pytest.approx(metrics.aggregate_iqm(matrix), rel=1e-12)
    assert aggregate.mean(matrix) == pytest.approx(np.mean(matrix), rel=1e-12)
    # The middle half of 8 sorted values: the 3rd to the 6th.
    assert aggregate.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_stratified_bootstrap_intervals_match_rliables():
    from rliable import library

    s = scores()
    matrix = np.stack(list(s.values()), axis=1)
    fns = {"iqm": lambda x: np.array([aggregate.iqm(x)]), "mean": lambda x: np.array([x.mean()])}
    ours = aggregate.summarize(s, resamples=20000, seed=0)
    for name, fn in fns.items():
        _, intervals = library.get_interval_estimates({"x": matrix}, fn, reps=20000)
        theirs = intervals["x"][:, 0]
        width = theirs[1] - theirs[0]
        # 20,000 resamples: each end is known to about 1% of the width; 5% is the margin.
        assert np.allclose(ours[name]["ci95"], theirs, atol=0.05 * width), (name, ours, theirs)
    # One seed cannot vary: its interval is the value itself.
    assert aggregate.summarize({"a": [3.0]})["mean"] == {"value": 3.0, "ci95": [3.0, 3.0]}


def test_a_curve_band_holds_its_mean_and_widens_with_the_spread():
    xs = np.linspace(0, 10, 11)
    curves = [(xs, xs + d) for d in (-1.0, 0.0, 1.0)]
    grid, mean, low, high = aggregate.curve_band(curves, points=11)
    np.testing.assert_allclose(mean, xs)
    assert np.all(low <= mean) and np.all(mean <= high) and np.all(high - low > 0.5)
    assert np.all(low >= xs - 1) and np.all(high <= xs + 1)  # means of the draws stay inside
