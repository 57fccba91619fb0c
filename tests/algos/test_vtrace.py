"""V-trace against a direct numpy implementation of the IMPALA paper's definition (sec. 4.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike.algos.vtrace import vtrace


def reference_vtrace(v, r, discount, rho, lam, rho_bar, pg_rho_bar, c_bar):
    """v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} discount_i c_i) delta_t, literally.

    v has T+1 entries (V(x_0)..V(x_T)); the others T. c_i = lam_i * min(c_bar, rho_i).
    """
    horizon = len(r)
    rho_clip = np.minimum(rho_bar, rho)
    c = lam * np.minimum(c_bar, rho)
    delta = rho_clip * (r + discount * v[1:] - v[:-1])
    vs = np.zeros(horizon + 1)
    vs[horizon] = v[horizon]
    for s in range(horizon):
        total, coef = 0.0, 1.0
        for t in range(s, horizon):
            total += coef * delta[t]
            coef *= discount[t] * c[t]
        vs[s] = v[s] + total
    pg = np.minimum(pg_rho_bar, rho) * (r + discount * vs[1:] - v[:-1])
    return vs[:-1], pg


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("clip", [(1.0, 1.0, 1.0), (2.0, 0.5, 0.9)])
def test_matches_paper_definition(seed, clip):
    rng = np.random.default_rng(seed)
    horizon = 12
    v = rng.normal(size=horizon + 1)
    r = rng.normal(size=horizon)
    rho = np.exp(rng.normal(0.0, 0.8, size=horizon))  # ratios on both sides of the clips
    discount = np.full(horizon, 0.97)
    lam = np.full(horizon, 0.9)
    discount[4] = 0.0  # a termination
    lam[8] = 0.0  # a truncation: bootstrap from v[9], do not trace across
    rho_bar, pg_rho_bar, c_bar = clip
    want_vs, want_pg = reference_vtrace(v, r, discount, rho, lam, rho_bar, pg_rho_bar, c_bar)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    vs, pg = jax.jit(vtrace, static_argnums=(6, 7, 8))(
        f32(v[:-1]),
        f32(v[1:]),
        f32(r),
        f32(discount),
        f32(rho),
        f32(lam),
        rho_bar,
        pg_rho_bar,
        c_bar,
    )
    np.testing.assert_allclose(vs, want_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg, want_pg, rtol=1e-5, atol=1e-5)


def test_on_policy_with_lambda_one_is_the_n_step_return():
    # rho = c = 1: v_s is the discounted return bootstrapped from V(x_T).
    r = np.array([1.0, 2.0, 3.0], np.float32)
    v = np.array([0.5, -1.0, 4.0, 10.0], np.float32)
    vs, _ = vtrace(v[:-1], v[1:], r, np.full(3, 0.5, np.float32), np.ones(3, np.float32))
    np.testing.assert_allclose(
        vs, [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10, 2 + 0.5 * 3 + 0.25 * 10, 3 + 5], rtol=1e-6
    )


def test_invalid_step_with_zero_rho_keeps_its_value():
    """The learner's encoding of an auto-reset step: rho = lambda = 0 -> v_s = V(x_s)."""
    v = np.array([1.0, 7.0, 2.0], np.float32)
    r = np.array([0.5, 0.0], np.float32)
    vs, pg = vtrace(
        v[:-1], v[1:], r, np.array([0.9, 0.0], np.float32), np.array([1.0, 0.0], np.float32),
        np.array([0.0, 0.0], np.float32),
    )  # fmt: skip
    assert vs[1] == pytest.approx(7.0)
    assert vs[0] == pytest.approx(1.0 + (0.5 + 0.9 * 7.0 - 1.0))
    assert pg[0] == pytest.approx(0.5 + 0.9 * 7.0 - 1.0)
