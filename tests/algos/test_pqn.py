"""PQN's Q(lambda) targets, its loss and its exploration on device, against independent numpy
definitions; the LayerNorm torso it learns with."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from seedlike.algos import ALGORITHMS, batches, pqn
from seedlike.config import ConfigError, base_config, validate
from seedlike.ondevice import program
from seedlike.types import Unroll
from tests.algos.test_gae_ppo import make_trajectory
from tests.helpers import make_net, random_params


def reference_lambda_returns(r, v, terminated, truncated, valid, gamma, lam):
    """The lambda-return by its definition (Sutton & Barto eq. 12.9): (1 - lam) times the
    lam-weighted n-step returns up to the episode's or the unroll's end, whose own return takes
    the rest. An n-step return bootstraps from v (the greedy values) unless the episode
    terminated inside it; a truncation ends the sum there, bootstrapping from the final
    observation's value."""
    horizon, out = len(r), np.full(len(r), np.nan)
    for t in np.flatnonzero(valid):
        last, ends_terminal = horizon - t, False
        for k in range(t, horizon):
            if terminated[k] or truncated[k]:
                last, ends_terminal = k - t + 1, bool(terminated[k])
                break

        n_step = [None]  # n_step[n]: the n-step return
        for n in range(1, last + 1):
            g = sum(gamma**i * r[t + i] for i in range(n))
            n_step.append(g if (ends_terminal and n == last) else g + gamma**n * v[t + n])
        mixed = sum((1 - lam) * lam ** (n - 1) * n_step[n] for n in range(1, last))
        out[t] = mixed + lam ** (last - 1) * n_step[last]
    return out


def pqn_section(**values):
    c = ml_collections.ConfigDict(base_config().pqn.to_dict())
    c.update(values)
    return c


def unroll_of(r, v, terminated, truncated, valid):
    zeros = np.zeros(len(r) + 1, np.float32)
    return Unroll(
        obs={}, extras={}, action=zeros.astype(np.int32), behaviour_logp=zeros,
        behaviour_value=v, valid=np.append(valid, True), first=zeros.astype(bool),
        policy_version=zeros.astype(np.int32), reward=r, terminated=terminated,
        truncated=truncated, carry=(),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.65), (0.9, 1.0), (0.95, 0.0)])
def test_q_lambda_targets_are_the_lambda_returns_of_the_greedy_values(seed, gamma, lam):
    r, v, terminated, truncated, valid = make_trajectory(np.random.default_rng(seed), 16)
    section = pqn_section(gamma=gamma, lambda_=lam, reward_scale=0.5)
    excess, target = jax.jit(pqn.advantages(section))(unroll_of(r, v, terminated, truncated, valid))
    want = reference_lambda_returns(0.5 * r, v, terminated, truncated, valid, gamma, lam)
    np.testing.assert_allclose(np.asarray(target)[valid], want[valid], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(excess, np.asarray(target) - v[:-1], rtol=1e-6, atol=1e-6)


def test_one_step_and_terminal_targets_by_hand():
    # lambda 0: r + gamma max Q(s'); the terminal step's target is its reward alone.
    r = np.array([1.0, 2.0], np.float32)
    v = np.array([5.0, 3.0, 7.0], np.float32)
    u = unroll_of(r, v, np.array([False, True]), np.array([False, False]), np.array([True, True]))
    _, target = pqn.advantages(pqn_section(gamma=0.5, lambda_=0.0))(u)
    np.testing.assert_allclose(target, [1.0 + 0.5 * 3.0, 2.0], rtol=1e-6)


def test_loss_is_half_the_squared_error_of_the_taken_actions_q_over_valid_steps():
    network = make_net(policy_head="q", layer_norm=True, normalize_obs=False)
    params = random_params(network, 0)
    rng = np.random.default_rng(0)
    size = 8
    obs = {k: rng.normal(size=(size, *s.shape)).astype(np.float32)
           for k, s in network.spec.observation.items()}  # fmt: skip
    action = rng.integers(0, 3, size).astype(np.int32)
    target = rng.normal(size=size).astype(np.float32)
    mask = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)
    batch = batches.SampleBatch(obs, {}, action, None, None, None, target, mask)
    loss, aux = pqn.make_pqn_loss(network, pqn_section())(params, {}, {}, batch, None)
    q = np.asarray(network.apply(params, {}, obs, {})[0])[np.arange(size), action]
    keep = mask > 0
    np.testing.assert_allclose(loss, 0.5 * np.mean((target - q)[keep] ** 2), rtol=1e-5)
    np.testing.assert_allclose(aux.metrics["loss/q_mean"], q[keep].mean(), rtol=1e-5, atol=1e-6)
    assert aux.priority is None


def test_the_layer_norm_torso_normalises_each_dense_layer_before_its_activation():
    network = make_net(
        policy_head="q", layer_norm=True, normalize_obs=False, hidden_sizes=(8, 8),
        activation="relu",
    )  # fmt: skip
    p = jax.tree.map(np.asarray, random_params(network, 1))["params"]
    obs = {"b": np.random.default_rng(1).normal(size=(5, 2, 3)).astype(np.float32),
           "obs": np.random.default_rng(2).normal(size=(5, 4)).astype(np.float32)}  # fmt: skip
    h = np.concatenate([obs["b"].reshape(5, -1), obs["obs"]], -1)  # sorted keys
    for i in range(2):
        h = h @ p["torso"][f"dense_{i}"]["kernel"] + p["torso"][f"dense_{i}"]["bias"]
        norm = p["torso"][f"norm_{i}"]
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6)
        h = np.maximum(h * norm["scale"] + norm["bias"], 0.0)
    want = h @ p["policy_head"]["q"]["kernel"] + p["policy_head"]["q"]["bias"]
    got = network.apply(random_params(network, 1), {}, obs, {})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_each_env_on_device_explores_at_its_slots_annealed_rate():
    config = base_config()
    config.algo = "pqn"
    config.pqn.update(dict(epsilon=0.3, epsilon_alpha=2.0, epsilon_slots=3, anneal_steps=1000))
    network = make_net(policy_head="q", normalize_obs=False)
    devices = jax.local_devices()[:2]
    shape = program.Shape(envs=4, length=10, epochs=1, minibatches=1, sequences=False)
    epsilon = program.make_epsilon(config, network, shape, len(devices))
    for version in (0, 10, 30):
        got = jax.pmap(epsilon, "devices", devices=devices)(jnp.full(len(devices), version))
        i = np.arange(4 * len(devices)) % 3
        rate = 0.3 ** (1 + 2.0 * i / 2)
        left = max(0.0, 1 - version * 4 * len(devices) * 10 / 1000)
        want = (rate + (1 - rate) * left).reshape(len(devices), 4)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert program.make_epsilon(base_config(), make_net(), shape, 2) is None  # a policy's


def test_pqn_refuses_a_distributional_or_noisy_head_in_one_line():
    config = base_config()
    config.algo = "pqn"
    config.network.atoms = 51
    with pytest.raises(ConfigError, match="algo='pqn' learns one value per action"):
        validate(config)
    assert ALGORITHMS["pqn"].head == "q"
