"""The learner update: identical on 1 and 2 devices, on-policy at the first step, NaN-safe."""

import time

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike.config import base_config
from seedlike.learning import train_state as ts
from seedlike.learning.update import Learner
from tests.helpers import LEARNER_SPEC as SPEC
from tests.helpers import VARIANTS, learner_of, random_unrolls, variant_config
from tests.helpers import learner_config as small_config


def run_update(devices, config, updates=2, obs_on_device=False):
    network = make_network(config.network, SPEC)
    learner = Learner(config, network, window_s=config.server.fair_window_s, devices=devices)
    state = learner.init_state(jax.random.key(0))
    learner.set_state(state)
    metrics = []
    for i in range(updates):
        unrolls = random_unrolls(
            network, state.params, state.obs_norm, config.batch_unrolls, config.unroll_length, i
        )
        if obs_on_device:  # as LearnerBatch.unroll(learner.batch_device) stacks them
            unrolls = unrolls._replace(obs=jax.device_put(unrolls.obs, devices[0]))
        metrics.append(learner.update(unrolls))
    return learner.state(), metrics, state


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_one_and_two_devices_compute_the_same_update(variant):
    assert jax.local_device_count() >= 2, "tests/conftest.py forces 2 CPU devices"
    config = variant_config(variant)
    one, metrics_one, initial = run_update(jax.local_devices()[:1], config)
    two, metrics_two, _ = run_update(jax.local_devices()[:2], config)
    moved = jax.tree.map(
        lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))),
        one.params,
        initial.params,
    )
    assert max(jax.tree.leaves(moved)) > 1e-3, "the update must change the parameters"
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), one.params, two.params
    )
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
        one.opt_state,
        two.opt_state,
    )
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
        one.obs_norm,
        two.obs_norm,
    )
    assert int(one.policy_version) == int(two.policy_version) == 2
    algo = config[config.algo]
    assert int(one.sgd_steps) == 2 * algo.epochs * algo.num_minibatches
    for a, b in zip(metrics_one, metrics_two):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize("variant", ["ppo", "vtrace_lstm"])
def test_observations_stacked_on_the_device_give_the_same_update(variant):
    config = variant_config(variant)
    host, metrics_host, _ = run_update(jax.local_devices()[:1], config)
    device, metrics_device, _ = run_update(jax.local_devices()[:1], config, obs_on_device=True)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # noqa: E731
    jax.tree.map(close, host.params, device.params)
    jax.tree.map(close, host.obs_norm, device.obs_norm)
    assert float(host.obs_norm["obs"].count) > 0, "the normalizer must have seen the batch"
    for a, b in zip(metrics_host, metrics_device):
        assert a.keys() == b.keys()
        close([a[k] for k in a], [b[k] for k in a])


def test_normalizer_sees_every_step_but_the_bootstrap_one():
    config = small_config()
    state, _, initial = run_update(jax.local_devices()[:2], config, updates=1)
    network = make_network(config.network, SPEC)
    unrolls = random_unrolls(network, initial.params, initial.obs_norm, 4, 8, seed=0)
    seen = unrolls.obs["obs"][:, :-1].reshape(-1, 4)
    assert float(state.obs_norm["obs"].count) == len(seen) == 32
    np.testing.assert_allclose(state.obs_norm["obs"].mean, seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(state.obs_norm["obs"].var, seen.var(0), rtol=1e-4)


def test_the_observation_bound_follows_each_identity_across_batches_whatever_their_order():
    """Identity "a" sends observations 10 above "b"'s and "c"'s in two batches, first in the
    first and last in the second: the statistics are those of the median identity's rows, the
    same as when the second batch comes in the first's order (the window keeps each identity's
    sums by its name; keyed by per-batch labels, a's rows and c's shared one)."""
    config = small_config()
    network = make_network(config.network, SPEC)

    def statistics(order):
        learner = Learner(config, network, window_s=30.0, devices=jax.local_devices()[:1])
        state = learner.init_state(jax.random.key(0))
        learner.set_state(state)
        names = np.array(["a", "a", "b", "c"])
        for i, idx in enumerate((np.arange(4), order)):
            unrolls = random_unrolls(network, state.params, state.obs_norm, 4, 8, seed=i)
            obs = unrolls.obs["obs"].copy()
            obs[:2] += 10.0
            unrolls = unrolls._replace(obs={"obs": obs})
            learner.update(jax.tree.map(lambda x, i=idx: x[i], unrolls), names[idx])
        return learner.state().obs_norm["obs"]

    ordered, reversed_ = statistics(np.arange(4)), statistics(np.arange(4)[::-1])
    np.testing.assert_allclose(reversed_.mean, ordered.mean, rtol=1e-6)
    np.testing.assert_allclose(reversed_.var, ordered.var, rtol=1e-5)
    assert np.all(np.asarray(ordered.mean) < 4.0)  # b's and c's level (2), not a's (12)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_first_sgd_step_is_on_policy(variant):
    """Replaying the batch (from the stored carries) reproduces the behaviour policy exactly."""
    config = variant_config(variant)
    config[config.algo].epochs = 1
    config[config.algo].num_minibatches = 1
    _, metrics, _ = run_update(jax.local_devices()[:1], config, updates=1)
    if config.algo == "ppo":
        assert metrics[0]["loss/approx_kl"] == pytest.approx(0.0, abs=1e-6)
        assert metrics[0]["loss/clip_fraction"] == 0.0
    else:
        assert metrics[0]["loss/rho_mean"] == pytest.approx(1.0, abs=1e-5)


def test_a_fresh_state_is_the_networks_init_as_host_arrays():
    """init_state runs the init as one compiled program: the values of running it op by op, on
    the host (nothing of it left running on a device outside the learner's guard)."""
    config = small_config()
    network = make_network(config.network, SPEC)
    learner = Learner(
        config, network, window_s=config.server.fair_window_s, devices=jax.local_devices()[:1]
    )
    state = learner.init_state(jax.random.key(3))
    eager = ts.init_train_state(network, learner.optimizer, jax.random.key(3))
    leaves = jax.tree.leaves(state)
    assert leaves and all(type(x) is np.ndarray for x in leaves), {type(x) for x in leaves}
    assert jax.tree.structure(state) == jax.tree.structure(eager)
    for got, want in zip(leaves, jax.tree.leaves(eager)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-7)
    assert np.std(np.asarray(state.params["params"]["policy_torso"]["dense_0"]["kernel"])) > 0.1


def _update_with(corrupt):
    """One update on one device after `corrupt(unrolls)`; returns (metrics, before, after)."""
    config = small_config()
    network = make_network(config.network, SPEC)
    learner = Learner(
        config, network, window_s=config.server.fair_window_s, devices=jax.local_devices()[:1]
    )
    state = learner.init_state(jax.random.key(0))
    learner.set_state(state)
    unrolls = random_unrolls(network, state.params, state.obs_norm, 4, 8)
    corrupt(unrolls)
    return learner.update(unrolls), state, learner.state()


def test_non_finite_update_is_discarded():
    metrics, before, after = _update_with(lambda u: u.reward.__setitem__((0, 3), np.inf))
    assert metrics["nonfinite"] == 1.0
    jax.tree.map(np.testing.assert_array_equal, after.params, before.params)
    assert int(after.policy_version) == 0


def test_observations_that_overflow_the_normalizer_are_discarded():
    """1e30 is a finite float32, but its square is not: the running variance would become inf
    while the loss, on observations normalized by inf, stays finite."""
    metrics, before, after = _update_with(lambda u: u.obs["obs"].__setitem__((1, 2), 1e30))
    assert metrics["nonfinite"] == 1.0
    jax.tree.map(np.testing.assert_array_equal, after.obs_norm, before.obs_norm)
    jax.tree.map(np.testing.assert_array_equal, after.params, before.params)
    assert int(after.policy_version) == 0


def test_indivisible_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="batch_unrolls=3 must be divisible by the 2 devices"):
        Learner(
            small_config(batch_unrolls=3),
            make_network(base_config().network, SPEC),
            window_s=30.0,
            devices=jax.local_devices()[:2],
        )


def test_a_stop_request_abandons_the_update_and_keeps_the_last_complete_version():
    """checkpoint.stop_grace_s: a set `interrupt` ends an update at its next epoch with the
    state of the version before it; cleared, the same batch updates as usual."""
    import threading

    from seedlike.learning.update import Interrupted

    config = small_config()
    network = make_network(config.network, SPEC)
    learner = Learner(
        config, network, window_s=config.server.fair_window_s, devices=jax.local_devices()[:1]
    )
    state = learner.init_state(jax.random.key(0))
    learner.set_state(state)
    unrolls = random_unrolls(
        network, state.params, state.obs_norm, config.batch_unrolls, config.unroll_length
    )
    learner.interrupt = threading.Event()
    learner.interrupt.set()
    with pytest.raises(Interrupted, match="update 0 abandoned"):
        learner.update(unrolls)
    assert learner.policy_version == 0
    kept = jax.tree.leaves(learner.state().params)
    for a, b in zip(kept, jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(a, b)
    learner.interrupt.clear()
    learner.update(unrolls)
    assert learner.policy_version == 1


def rainbow_config(atoms: int):
    c = small_config(algo="rainbow")
    c.network.update(dueling=True, atoms=atoms, normalize_obs=False)
    # 32 steps per batch, 2 sgd steps of 16 transitions each; the target follows every 3 steps.
    c.rainbow.update(min_fill=0, batch_transitions=16, replay_ratio=1.0, target_period=3)
    return c


def run_replay_updates(devices, config, updates=2):
    network = make_network(config.network, SPEC)
    learner = learner_of(config, network, window_s=1e9, devices=devices)
    initial = learner.init_state(jax.random.key(0))
    learner.set_state(initial)
    states, metrics = [], []
    for i in range(updates):
        unrolls = random_unrolls(
            network, initial.params, {}, config.batch_unrolls, config.unroll_length, i
        )
        metrics.append(learner.update(unrolls))
        states.append(learner.state())
    return states, metrics, initial


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_replay_learner_is_the_same_on_one_and_two_devices():
    # C51 (5 atoms) and dueling: the projection and the per-atom head run on both device counts;
    # one atom's Huber path is tests/algos/test_rainbow.py's (one run costs 12 s of the suite).
    config = rainbow_config(5)
    one, metrics_one, initial = run_replay_updates(jax.local_devices()[:1], config)
    two, metrics_two, _ = run_replay_updates(jax.local_devices()[:2], config)

    def close(a, b):
        return jax.tree.map(
            lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), a, b
        )

    close(one[-1].params, two[-1].params)
    close(one[-1].target_params, two[-1].target_params)
    close(one[-1].opt_state, two[-1].opt_state)
    for a, b in zip(metrics_one, metrics_two):
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-4, atol=1e-6)
    assert int(one[-1].sgd_steps) == 4 and int(one[-1].policy_version) == 2
    # Target parameters: the initial ones until sgd step 3 copies the online ones.
    jax.tree.map(np.testing.assert_array_equal, one[0].target_params, initial.params)
    moved = jax.tree.map(
        lambda a, b: float(np.max(np.abs(a - b))), one[-1].target_params, initial.params
    )
    assert max(jax.tree.leaves(moved)) > 1e-4
    inserted = sum(
        int(random_unrolls(make_network(config.network, SPEC), initial.params, {}, 4, 8, i)
            .valid[:, :8].sum())
        for i in range(2)
    )  # fmt: skip
    np.testing.assert_allclose(metrics_one[-1]["replay/ratio"], 4 * 16 / inserted)


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_the_r2d2_learner_is_the_same_on_one_and_two_devices():
    """Sequences with their stored LSTM states, split over devices like transitions."""
    c = small_config(algo="r2d2")
    c.network.update(dueling=True, core="lstm", core_size=8, normalize_obs=False)
    # 4 unrolls of 8 steps per batch; 2 sgd steps of 2 sequences each (burn-in 3).
    c.r2d2.update(min_fill=0, batch_sequences=2, replay_ratio=1.0, target_period=3, burn_in=3)
    one, metrics_one, _ = run_replay_updates(jax.local_devices()[:1], c)
    two, metrics_two, _ = run_replay_updates(jax.local_devices()[:2], c)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6),
        (one[-1].params, one[-1].target_params), (two[-1].params, two[-1].target_params),
    )  # fmt: skip
    for a, b in zip(metrics_one, metrics_two):
        np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=1e-4, atol=1e-6)
    assert int(one[-1].sgd_steps) == 4 and metrics_one[-1]["loss/state_age"] >= 0


def test_a_saved_replay_is_restored_before_the_next_batch(tmp_path):
    config = rainbow_config(1)
    network = make_network(config.network, SPEC)
    first = learner_of(config, network, window_s=1e9, devices=jax.local_devices()[:1])
    state = first.init_state(jax.random.key(0))
    first.set_state(state)
    for i in range(2):
        first.update(random_unrolls(network, state.params, {}, 4, 8, i))
    path = str(tmp_path / "replay.npz")
    first.write_replay(path)
    second = learner_of(config, network, window_s=1e9, devices=jax.local_devices()[:1])
    second.set_state(state)
    second.read_replay(path)
    batch = random_unrolls(network, state.params, {}, 4, 8, 2)
    second.update(batch)
    assert second.replay.inserted == first.replay.inserted + batch.valid[:, :8].sum()
    kept = np.arange(8 * 8)  # the first two batches' 8 slots of 8 steps (capacity 10000)
    np.testing.assert_array_equal(
        second.replay.transitions(kept, np.ones(64)).obs["obs"],
        first.replay.transitions(kept, np.ones(64)).obs["obs"],
    )


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize("devices", [1, 2])
def test_a_newcomer_on_probation_teaches_what_its_unrolls_left_out_would(devices):
    """Identity "b" joins a run whose "a" has been there 100 s: its first batch weighs 0 in the
    loss (server.probation_s), so the update is the one where b's unrolls do not count at all
    (valid False), on one device and two (the weights travel with the batch in both layouts).
    b's rewards are 10x a's, so the RMS bound of two scales b's, not a's."""
    config = small_config()
    network = make_network(config.network, SPEC)
    names = np.array(["a", "a", "b", "b"])

    def updated(mask_b: bool):
        learner = Learner(config, network, window_s=30.0, devices=jax.local_devices()[:devices])
        state = learner.init_state(jax.random.key(0))
        learner.set_state(state)
        batch = random_unrolls(network, state.params, state.obs_norm, 4, 8, seed=3)
        batch = batch._replace(reward=batch.reward * np.array([1, 1, 10, 10])[:, None])
        if mask_b:
            batch = batch._replace(valid=batch.valid & (names != "b")[:, None])
        learner.probation.factors(time.monotonic() - 100.0, ["a"])  # a: the run's cohort
        metrics = learner.update(batch, names)
        return learner.state().params, metrics

    weighed, metrics = updated(mask_b=False)
    left_out, _ = updated(mask_b=True)
    assert metrics["influence/probation_scale_min"] == pytest.approx(0.0, abs=1e-9)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), weighed, left_out
    )


def test_a_minibatch_of_light_samples_alone_steps_by_its_heaviest_weight():
    """The loss's weighted mean is the same for weights w and 0.1 w (only ratios count); the
    sgd step scales the gradients by the minibatch's heaviest weight capped at 1
    (batches.strength). With plain SGD at learning rate 1 and loss = mean_w(x) * sum(params),
    each parameter moves by -strength * mean_w(x): weights [1, 0.1] (a trusted sample beside a
    newcomer's) step in full, [0.1, 0.1] (newcomers alone) a tenth, [2, 0] in full."""
    import jax.numpy as jnp
    import optax

    from seedlike.algos import batches

    def loss_fn(params, target, obs_norm, batch, key):
        del target, obs_norm, key
        mask = batch.mask.astype(jnp.float32)
        mean = jnp.sum(mask * batch.advantage) / jnp.sum(mask)
        total = sum(jnp.sum(p) for p in jax.tree.leaves(params))
        return mean * total, ({}, None)

    optimizer = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)
    step = jax.pmap(ts.make_sgd_step(loss_fn, optimizer, lambda _: jnp.float32(1.0)), ts.AXIS)
    x = np.array([[3.0, 1.0]], np.float32)

    def moved(weights):
        params = {"w": jnp.zeros(2)}
        zero = jnp.zeros((), jnp.int32)
        state = ts.TrainState(params, optimizer.init(params), {}, zero, zero, zero)
        state = jax.tree.map(lambda v: v[None], state)  # one device
        mask = jnp.asarray(np.array([weights], np.float32))
        zeros = jnp.zeros((1, 2))
        batch = batches.SampleBatch(
            obs={}, extras={}, action=zeros.astype(jnp.int32), behaviour_logp=zeros,
            behaviour_value=zeros, advantage=jnp.asarray(x), value_target=zeros, mask=mask,
        )  # fmt: skip
        new, _ = step(state, batch)
        return float(np.asarray(new.params["w"])[0, 0])  # [devices, 2]

    mean = lambda w: float(np.sum(np.array(w) * x[0]) / np.sum(w))  # noqa: E731
    assert moved([1.0, 0.1]) == pytest.approx(-mean([1.0, 0.1]), rel=1e-6)
    assert moved([0.1, 0.1]) == pytest.approx(-0.1 * mean([0.1, 0.1]), rel=1e-5)
    assert moved([2.0, 0.0]) == pytest.approx(-mean([2.0, 0.0]), rel=1e-6)
