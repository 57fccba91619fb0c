"""The Rainbow-style learner's math against references computed independently: n-step targets by a
literal loop, double-Q TD errors from the networks' own outputs, the C51 projection by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike.algos import batches, rainbow, td
from seedlike.config import base_config
from tests.helpers import make_net, random_params


def reference_n_step(reward, terminated, truncated, gamma, n):
    """Step t's (sum, discount, bootstrap step) of one unroll [T], literally: add rewards until n
    are summed, the episode ends or the unroll does."""
    horizon = len(reward)
    out = []
    for t in range(horizon):
        total, discount, s = 0.0, 1.0, t
        while True:
            total += discount * reward[s]
            discount *= gamma
            if terminated[s]:
                discount = 0.0
            if terminated[s] or truncated[s] or s + 1 == horizon or s + 1 - t == n:
                break
            s += 1
        out.append((total, discount, s + 1))
    return [np.array(x) for x in zip(*out)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_targets_match_the_literal_definition(seed, n):
    rng = np.random.default_rng(seed)
    batch, horizon = 3, 11
    reward = rng.normal(size=(batch, horizon)).astype(np.float32)
    terminated = rng.random((batch, horizon)) < 0.12
    truncated = ~terminated & (rng.random((batch, horizon)) < 0.08)
    total, discount, boot = td.n_step_targets(reward, terminated, truncated, 0.9, n)
    for b in range(batch):
        want = reference_n_step(reward[b], terminated[b], truncated[b], 0.9, n)
        np.testing.assert_allclose(total[b], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(discount[b], want[1], rtol=1e-6)
        np.testing.assert_array_equal(boot[b], want[2])


def test_n_step_targets_by_hand():
    # Rewards 1, 2, 3, 4 with gamma 0.5 and n = 2; the episode terminates after step 2.
    reward = np.array([[1.0, 2.0, 3.0, 4.0]])
    terminated = np.array([[False, False, True, False]])
    truncated = np.zeros_like(terminated)
    total, discount, boot = td.n_step_targets(reward, terminated, truncated, 0.5, 2)
    np.testing.assert_allclose(total, [[1 + 0.5 * 2, 2 + 0.5 * 3, 3, 4]])
    np.testing.assert_allclose(discount, [[0.25, 0.0, 0.0, 0.5]])  # step 3: the unroll's end
    np.testing.assert_array_equal(boot, [[2, 3, 3, 4]])


def test_categorical_projection_by_hand():
    support = jnp.array([0.0, 1.0, 2.0])
    # 0.5 splits evenly between atoms 0 and 1; 1.0 lands on atom 1; 3.0 clips to atom 2.
    values = jnp.array([0.5, 1.0, 3.0])
    probs = jnp.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(
        rainbow.categorical_projection(values, probs, support), [0.1, 0.4, 0.5], atol=1e-7
    )
    # A quarter of the way from atom 1 to atom 2: 3/4 and 1/4 of its mass.
    got = rainbow.categorical_projection(jnp.array([1.25, -4.0]), jnp.array([0.8, 0.2]), support)
    np.testing.assert_allclose(got, [0.2, 0.6, 0.2], atol=1e-7)


def _batch(network, rng, size=6):
    obs = {k: rng.normal(size=(size, *s.shape)).astype(np.float32) for k, s in
           network.spec.observation.items()}  # fmt: skip
    next_obs = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in obs.items()}
    return batches.Transitions(
        obs=obs,
        extras={},
        action=rng.integers(0, network.spec.num_actions, size).astype(np.int32),
        reward=rng.normal(size=size).astype(np.float32),
        discount=np.array([0.9, 0.0, 0.81, 0.9, 0.729, 0.9], np.float32)[:size],
        next_obs=next_obs,
        next_extras={},
        weight=rng.uniform(0.2, 1.0, size).astype(np.float32),
    )


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("dueling", [False, True])
def test_td_errors_are_double_q_from_the_networks_outputs(double, dueling):
    network = make_net(policy_head="q", dueling=dueling, normalize_obs=False)
    params, target = random_params(network, 0), random_params(network, 1)
    config = base_config().rainbow
    config.double_q = double
    batch = _batch(network, np.random.default_rng(0))
    loss_fn = rainbow.make_rainbow_loss(network, config)
    loss, (metrics, priority) = loss_fn(params, target, {}, batch, jax.random.key(0))

    def q(p, obs):
        return np.asarray(network.apply(p, {}, obs, {})[0], np.float64)

    q_now, q_online, q_target = (
        q(params, batch.obs),
        q(params, batch.next_obs),
        q(target, batch.next_obs),
    )
    best = (q_online if double else q_target).argmax(-1)
    rows = np.arange(len(best))
    td = batch.reward + batch.discount * q_target[rows, best] - q_now[rows, batch.action]
    np.testing.assert_allclose(priority, np.abs(td), rtol=1e-5, atol=1e-5)
    huber = np.where(np.abs(td) <= 1, 0.5 * td**2, np.abs(td) - 0.5)
    weight = batch.weight / batch.weight.max()  # over the batch's largest
    np.testing.assert_allclose(loss, np.mean(weight * huber), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/weight_mean"], weight.mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/q_mean"], q_now[rows, batch.action].mean(), rtol=1e-5)


def test_dueling_head_is_value_plus_centred_advantages():
    network = make_net(policy_head="q", dueling=True, normalize_obs=False)
    params = random_params(network, 2)
    batch = _batch(network, np.random.default_rng(1))
    q = network.apply(params, {}, batch.obs, {})[0]
    head = params["params"]["policy_head"]
    # The torso's features, through the torso alone.
    features = network.module.apply(
        params, network._inputs({}, batch.obs, 1), method=type(network.module).encode
    )[0]

    def dense(layer, x):
        return x @ np.asarray(layer["kernel"], np.float64) + np.asarray(layer["bias"], np.float64)

    x = np.asarray(features, np.float64)
    value, adv = dense(head["value"], x), dense(head["advantage"], x)
    np.testing.assert_allclose(q, value + adv - adv.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_c51_loss_is_the_cross_entropy_to_the_projected_target():
    atoms, value_range = 5, (-2.0, 2.0)
    network = make_net(policy_head="q", atoms=atoms, value_range=value_range, normalize_obs=False)
    params, target = random_params(network, 3), random_params(network, 4)
    config = base_config().rainbow
    batch = _batch(network, np.random.default_rng(2))
    _, (_, priority) = rainbow.make_rainbow_loss(network, config)(
        params, target, {}, batch, jax.random.key(0)
    )

    support = np.linspace(*value_range, atoms)
    size = len(batch.action)

    def dist(p, obs):
        logits = np.asarray(network.apply(p, {}, obs, {})[0], np.float64).reshape(size, -1, atoms)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    now, online, tgt = (
        dist(params, batch.obs),
        dist(params, batch.next_obs),
        dist(target, batch.next_obs),
    )
    best = (online * support).sum(-1).argmax(-1)  # double Q: the online network chooses
    for i in range(size):
        goal = np.zeros(atoms)
        for j in range(atoms):  # each target atom's mass to its two neighbours, by hand
            z = np.clip(batch.reward[i] + batch.discount[i] * support[j], *value_range)
            pos = (z - support[0]) / (support[1] - support[0])
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            if lo == hi:
                goal[lo] += tgt[i, best[i], j]
            else:
                goal[lo] += tgt[i, best[i], j] * (hi - pos)
                goal[hi] += tgt[i, best[i], j] * (pos - lo)
        want = -np.sum(goal * np.log(now[i, batch.action[i]]))
        np.testing.assert_allclose(priority[i], want, rtol=1e-4)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_epsilon_greedy_takes_the_greedy_action_or_a_uniform_one():
    from networks import heads

    q = jnp.array([[0.0, 2.0, 1.0]] * 20000)
    eps = jnp.full(20000, 0.3)
    action, logp = heads.epsilon_greedy(jax.random.key(0), q, eps)
    counts = np.bincount(np.asarray(action), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.8, 0.1], atol=0.015)
    np.testing.assert_allclose(np.exp(logp[action == 1]), 0.8, rtol=1e-6)
    np.testing.assert_allclose(np.exp(logp[action == 0]), 0.1, rtol=1e-6)
    greedy, _ = heads.epsilon_greedy(jax.random.key(1), q[:5], jnp.zeros(5))
    assert (np.asarray(greedy) == 1).all()


def test_noisy_layers_are_their_mean_without_noise_and_factorised_gaussian_with_it():
    from networks import heads

    layer = heads.NoisyDense(3)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)), jnp.float32)
    params = layer.init(jax.random.key(0), x)["params"]
    k, b = params["kernel"], params["bias"]
    np.testing.assert_allclose(layer.apply({"params": params}, x), x @ k + b, rtol=1e-6)
    # One noise draw for a batch of a zero input, the unit vectors and x: the zero row gives
    # f(e_out), unit vector i then f(e_in)_i; x's outputs must be those of w = mu + sigma * outer.
    batch = jnp.concatenate([jnp.zeros((1, 4)), jnp.eye(4), x])
    out = np.asarray(layer.apply({"params": params}, batch, rngs={"noise": jax.random.key(7)}))
    e_out = (out[0] - b) / params["bias_sigma"]
    unit = out[1:5] - np.asarray(k) - np.asarray(b) - params["bias_sigma"] * e_out
    e_in = unit[:, 0] / (params["kernel_sigma"][:, 0] * e_out[0])
    w = k + params["kernel_sigma"] * np.outer(e_in, e_out)
    noisy = out[5:]
    np.testing.assert_allclose(
        noisy, x @ w + b + params["bias_sigma"] * e_out, rtol=1e-4, atol=1e-5
    )
    assert np.abs(np.asarray(noisy) - np.asarray(x @ k + b)).max() > 1e-3


def test_a_noisy_q_network_acts_with_noise_and_evaluates_with_its_mean():
    network = make_net(policy_head="q", noisy=True, normalize_obs=False)
    params = network.init(jax.random.key(0))
    obs = {k: jnp.ones((64, *s.shape)) * 0.3 for k, s in network.spec.observation.items()}
    first = jnp.ones(64, bool)
    act = jax.jit(network.act, static_argnames="greedy")
    zero = jnp.zeros(64)
    # Epsilon 0: only the weight noise varies the action; greedy: the mean weights alone.
    actions = [
        act(params, {}, obs, {}, (), first, jax.random.key(i), epsilon=zero)[0] for i in range(8)
    ]
    greedy = act(params, {}, obs, {}, (), first, jax.random.key(0), greedy=True)
    mean_q = network.apply(params, {}, obs, {})[0]
    np.testing.assert_array_equal(greedy[0], np.asarray(mean_q).argmax(-1))
    np.testing.assert_allclose(greedy[2], np.asarray(mean_q).max(-1), rtol=1e-6)
    assert len({int(a[0]) for a in actions}) > 1 or len({tuple(np.asarray(a)) for a in actions}) > 1


def test_a_c51_network_plays_where_every_action_is_legal():
    """games.NetworkAgent (evaluate.py, watch.py) passes an all-legal mask for every env: a Q
    head's outputs (A x atoms) are not masked (Q heads are refused where actions are masked)."""
    network = make_net(policy_head="q", atoms=5, normalize_obs=False)
    params = network.init(jax.random.key(0))
    obs = {k: jnp.ones((4, *s.shape)) for k, s in network.spec.observation.items()}
    extras = {"legal_action_mask": jnp.ones((4, 3), bool)}
    action, _, value, _ = network.act(
        params, {}, obs, extras, (), jnp.ones(4, bool), jax.random.key(0), greedy=True
    )
    q = network.q_values(network.apply(params, {}, obs)[0])
    np.testing.assert_array_equal(action, np.asarray(q).argmax(-1))
    np.testing.assert_allclose(value, np.asarray(q).max(-1), rtol=1e-6)
