"""GAE and the PPO loss against independent numpy implementations."""

import types

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from networks import make_network
from seedlike.algos import ALGORITHMS, batches, gae
from seedlike.algos.batches import SampleBatch
from seedlike.algos.ppo import make_ppo_loss
from seedlike.config import base_config
from seedlike.types import ArraySpec, EnvSpec


def reference_advantages(r, v, terminated, truncated, valid, gamma, lam):
    """Forward-sum definition: A_t = sum_k (gamma*lam)^k delta_{t+k}, stopping at episode ends."""
    horizon = len(r)
    out = np.full(horizon, np.nan)
    for t in range(horizon):
        if not valid[t]:
            continue
        total, coef = 0.0, 1.0
        for k in range(t, horizon):
            next_value = 0.0 if terminated[k] else v[k + 1]
            total += coef * (r[k] + gamma * next_value - v[k])
            if terminated[k] or truncated[k]:
                break
            coef *= gamma * lam
        out[t] = total
    return out


def make_trajectory(rng, horizon):
    r = rng.normal(size=horizon).astype(np.float32)
    v = rng.normal(size=horizon + 1).astype(np.float32)
    terminated = np.zeros(horizon, bool)
    truncated = np.zeros(horizon, bool)
    valid = np.ones(horizon, bool)
    # Episode ends as the trajectory store writes them: a done step is followed by an invalid one
    # (the terminal observation, whose action the env ignores), then the next episode.
    for t in rng.choice(horizon - 1, size=3, replace=False):
        if valid[t] and not (terminated[t] or truncated[t]):
            if rng.random() < 0.5:
                terminated[t] = True
            else:
                truncated[t] = True
            valid[t + 1] = False
            terminated[t + 1] = truncated[t + 1] = False
    return r, v, terminated, truncated, valid


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_gae_matches_reference(seed, gamma, lam):
    rng = np.random.default_rng(seed)
    r, v, terminated, truncated, valid = make_trajectory(rng, 16)
    discount_t, lambda_t = gae.episode_discounts(
        jnp.asarray(terminated), jnp.asarray(truncated), jnp.asarray(valid), gamma, lam
    )
    got = jax.jit(gae.generalized_advantage_estimation)(r, discount_t, lambda_t, v)
    want = reference_advantages(r, v, terminated, truncated, valid, gamma, lam)
    np.testing.assert_allclose(np.asarray(got)[valid], want[valid], rtol=1e-5, atol=1e-5)


def test_gae_hand_example():
    # Two steps, then termination: A_1 = 1 - 0.5 = 0.5; A_0 = (1 + 0.9*0.5 - 1) + 0.9*0.5*0.5.
    r = np.array([1.0, 1.0], np.float32)
    v = np.array([1.0, 0.5, 7.0], np.float32)
    discount, lam = gae.episode_discounts(
        jnp.array([False, True]), jnp.array([False, False]), jnp.array([True, True]), 0.9, 0.5
    )
    got = gae.generalized_advantage_estimation(r, discount, lam, v)
    np.testing.assert_allclose(got, [0.45 + 0.225, 0.5], rtol=1e-6)


def test_truncation_bootstraps_from_final_observation():
    r = np.array([1.0, 0.0], np.float32)
    v = np.array([2.0, 10.0, 3.0], np.float32)  # v[1] is the value of the final observation
    discount, lam = gae.episode_discounts(
        jnp.array([False, False]), jnp.array([True, False]), jnp.array([True, False]), 0.5, 0.9
    )
    got = gae.generalized_advantage_estimation(r, discount, lam, v)
    assert got[0] == pytest.approx(1.0 + 0.5 * 10.0 - 2.0)


def test_gae_rejects_wrong_shapes():
    with pytest.raises(AssertionError):
        gae.generalized_advantage_estimation(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3))


def _np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def ppo_config(**overrides):
    c = ml_collections.ConfigDict(base_config().ppo.to_dict())
    c.update(overrides)
    return c


def _random_batch(rng, n, num_actions, mask):
    """A network on 3 features, its params and obs_norm, and a SampleBatch of n random samples
    with mask() as their mask."""
    spec = EnvSpec("test", {"obs": ArraySpec(np.float32, (3,))}, num_actions=num_actions)
    network = make_network(base_config().network, spec)
    batch = SampleBatch(
        obs={"obs": rng.normal(size=(n, 3)).astype(np.float32)},
        extras={},
        action=rng.integers(0, num_actions, n).astype(np.int32),
        behaviour_logp=np.log(rng.uniform(0.1, 0.5, n)).astype(np.float32),
        behaviour_value=rng.normal(size=n).astype(np.float32),
        advantage=rng.normal(size=n).astype(np.float32),
        value_target=rng.normal(size=n).astype(np.float32),
        mask=np.asarray(mask(), np.float32),
    )
    return network, network.init(jax.random.key(1)), network.init_obs_norm(), batch


@pytest.mark.parametrize("clip_value", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_ppo_loss_matches_reference(clip_value, normalize):
    rng = np.random.default_rng(0)
    n = 64
    network, params, obs_norm, batch = _random_batch(rng, n, 4, lambda: rng.random(n) > 0.2)
    config = ppo_config(clip_value=clip_value, normalize_advantages=normalize, clip_eps=0.1)
    loss, (metrics, _) = jax.jit(make_ppo_loss(network, config))(params, {}, obs_norm, batch, None)
    assert set(metrics) == set(ALGORITHMS["ppo"].metrics)

    logits, value = (np.asarray(x, np.float64) for x in network.apply(params, obs_norm, batch.obs))
    logp_all = _np_log_softmax(logits)
    logp = logp_all[np.arange(n), batch.action]
    ratio = np.exp(logp - batch.behaviour_logp)
    m = batch.mask.astype(bool)
    adv = batch.advantage.astype(np.float64)
    if normalize:
        adv = (adv - adv[m].mean()) / (adv[m].std() + 1e-8)
    pg = -np.minimum(ratio * adv, np.clip(ratio, 0.9, 1.1) * adv)
    vl = (value - batch.value_target) ** 2
    if clip_value:
        vc = batch.behaviour_value + np.clip(value - batch.behaviour_value, -0.2, 0.2)
        vl = np.maximum(vl, (vc - batch.value_target) ** 2)
    vl = 0.5 * vl
    ent = -(np.exp(logp_all) * logp_all).sum(-1)
    want_total = pg[m].mean() + 0.5 * vl[m].mean() - 0.01 * ent[m].mean()

    np.testing.assert_allclose(metrics["loss/policy"], pg[m].mean(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(metrics["loss/value"], vl[m].mean(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(metrics["loss/entropy"], ent[m].mean(), rtol=1e-4)
    np.testing.assert_allclose(loss, want_total, rtol=1e-4, atol=1e-6)
    clip_fraction = (np.abs(ratio - 1) > 0.1)[m].mean()
    np.testing.assert_allclose(metrics["loss/clip_fraction"], clip_fraction, atol=1e-6)


def test_a_sample_weighs_in_every_term_as_many_copies_of_it():
    """The mask is each sample's weight (the learner's per-identity factors, Learner._weights):
    weights 0 and 2 give the loss, its gradient and every metric of the batch with the first
    sample left out and the last one twice, advantage normalisation included; a SequenceBatch
    unroll's weight reaches its valid steps (batches.step_mask)."""
    rng = np.random.default_rng(4)
    n, weights = 8, np.array([0, 1, 1, 1, 1, 1, 1, 2])
    network, params, obs_norm, batch = _random_batch(rng, n, 2, lambda: weights)
    copies = jax.tree.map(lambda x: x[np.array([1, 2, 3, 4, 5, 6, 7, 7])], batch)
    copies = copies._replace(mask=np.ones(n, np.float32))
    loss = jax.jit(jax.value_and_grad(make_ppo_loss(network, ppo_config()), has_aux=True))
    (weighted, (w_metrics, _)), w_grad = loss(params, {}, obs_norm, batch, None)
    (copied, (c_metrics, _)), c_grad = loss(params, {}, obs_norm, copies, None)
    np.testing.assert_allclose(weighted, copied, rtol=1e-5)
    for key in c_metrics:
        np.testing.assert_allclose(w_metrics[key], c_metrics[key], rtol=1e-5, atol=1e-7)
    chex.assert_trees_all_close(w_grad, c_grad, rtol=1e-4, atol=1e-7)
    valid = np.array([[True, True, False], [True, False, True]])
    unroll = types.SimpleNamespace(valid=valid)
    np.testing.assert_allclose(
        batches.step_mask(batches.SequenceBatch(unroll, weight=np.array([0.5, 2.0])), 2),
        [[0.5, 0.5], [2.0, 0.0]],
    )
    np.testing.assert_allclose(batches.step_mask(batches.SequenceBatch(unroll), 2), valid[:, :2])


def test_masked_actions_get_zero_probability():
    spec = EnvSpec("test", {"obs": ArraySpec(np.float32, (2,))}, num_actions=3)
    network = make_network(base_config().network, spec)
    params = network.init(jax.random.key(0))
    mask = np.array([[True, False, True], [False, False, True]])
    logits, _ = network.apply(
        params, {}, {"obs": np.ones((2, 2), np.float32)}, {"legal_action_mask": mask}
    )
    probs = np.asarray(jax.nn.softmax(logits))
    chex.assert_trees_all_close(probs[~mask], np.zeros((~mask).sum()), atol=0.0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
