"""R2D2 against closed forms and hand-computed cases: the value rescaling and its inverse, the
rescaled n-step target, sequence priorities, the burn-in (the learned steps start from the state
it produced, and no gradient flows through it), and sequences read back from the replay."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike.algos import batches, r2d2, td
from seedlike.config import base_config
from seedlike.learning.replay import SequenceReplay
from seedlike.types import ArraySpec, EnvSpec, Unroll
from tests.helpers import make_net, random_params


def h(x, eps=1e-3):  # the paper's definition, in plain Python
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + eps * x


def test_the_rescaling_and_its_inverse_by_hand():
    for x in (0.0, 3.0, -8.0, 0.25, 120.0):
        np.testing.assert_allclose(float(r2d2.rescale(jnp.float32(x))), h(x), rtol=1e-6)
    assert float(r2d2.rescale(jnp.float32(3.0))) == pytest.approx(1.003, rel=1e-6)
    assert float(r2d2.rescale(jnp.float32(-8.0))) == pytest.approx(-2.008, rel=1e-6)
    # h^-1(h(x)) = x (and h(h^-1(y)) = y) to float32 rounding, over six decades both signs.
    x = np.concatenate([-np.logspace(-3, 4, 200), np.logspace(-3, 4, 200)]).astype(np.float32)
    np.testing.assert_allclose(r2d2.unrescale(r2d2.rescale(x)), x, rtol=2e-4, atol=1e-5)
    y = np.linspace(-50, 50, 101).astype(np.float32)
    np.testing.assert_allclose(r2d2.rescale(r2d2.unrescale(y)), y, rtol=1e-5, atol=1e-5)


def test_the_rescaled_n_step_target_by_hand():
    # Rewards 1, 0, 0.5 then a bootstrap after 3 steps (gamma 0.9), of rescaled value h(10):
    # y = h(1 + 0.9^2 * 0.5 + 0.9^3 * 10).
    total, discount, boot = td.n_step_targets(
        np.array([[1.0, 0.0, 0.5, 2.0]]), np.zeros((1, 4), bool), np.zeros((1, 4), bool), 0.9, 3
    )
    assert total[0, 0] == pytest.approx(1.405) and discount[0, 0] == pytest.approx(0.729)
    assert boot[0, 0] == 3
    y = r2d2.rescaled_target(total[0, 0], discount[0, 0], jnp.float32(h(10.0)))
    assert float(y) == pytest.approx(h(1.405 + 0.729 * 10.0), rel=1e-5)
    # After a termination nothing is bootstrapped: y = h(R).
    assert float(r2d2.rescaled_target(2.0, 0.0, jnp.float32(99.0))) == pytest.approx(h(2.0))


def test_sequence_priorities_mix_the_largest_and_the_mean_error():
    td = jnp.array([[1.0, 3.0, 2.0, 7.0], [4.0, 4.0, 4.0, 4.0]])
    mask = jnp.array([[1, 1, 1, 0], [0, 0, 0, 0]])  # the 7 is not learned from; nothing in row 2
    np.testing.assert_allclose(r2d2.sequence_priority(td, mask, 0.9), [0.9 * 3 + 0.1 * 2, 0.0])


SPEC = EnvSpec("Pomdp-v0", {"obs": ArraySpec(np.float32, (2,))}, 3)


def _setup(burn_in=3, stored_state=True, horizon=8, size=4, seed=0):
    network = make_net(SPEC, policy_head="q", core="lstm", core_size=8, hidden_sizes=(8,),
                       dueling=True)  # fmt: skip
    c = base_config().r2d2
    c.burn_in, c.stored_state, c.huber_delta = burn_in, stored_state, 0.0
    rng = np.random.default_rng(seed)
    t1 = horizon + 1
    total, discount, boot = td.n_step_targets(
        rng.normal(size=(size, horizon)), rng.random((size, horizon)) < 0.1,
        np.zeros((size, horizon), bool), 0.99, 3,
    )  # fmt: skip
    carry = jax.tree.map(
        lambda x: jnp.asarray(rng.normal(size=(size, *x.shape[1:])), x.dtype),
        network.initial_carry(1),
    )
    batch = batches.Sequences(
        obs={"obs": jnp.asarray(rng.normal(size=(size, t1, 2)), jnp.float32)},
        extras={},
        action=jnp.asarray(rng.integers(0, 3, (size, t1)), jnp.int32),
        first=jnp.asarray(rng.random((size, t1)) < 0.1),
        carry=carry,
        reward=jnp.asarray(total), discount=jnp.asarray(discount), boot=jnp.asarray(boot),
        learn=jnp.asarray(np.arange(horizon) >= burn_in).repeat(size).reshape(horizon, size).T,
        weight=jnp.ones(size, jnp.float32), age=jnp.zeros(size, jnp.float32),
    )  # fmt: skip
    params = random_params(network, seed)
    target = random_params(network, seed + 1)
    return network, r2d2.make_r2d2_loss(network, c), params, target, batch


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_the_burn_in_refreshes_the_state_and_passes_no_gradient():
    burn = 3
    network, loss_fn, params, target, batch = _setup(burn_in=burn)
    key = jax.random.key(0)

    def loss_of_obs(obs):
        return loss_fn(params, target, {}, batch._replace(obs={"obs": obs}), key)[0]

    grads = jax.grad(loss_of_obs)(batch.obs["obs"])
    # Nothing through the burn-in steps: stop_gradient makes these gradients structural zeros
    # (no arithmetic reaches them), exactly 0 on every CPU.
    assert np.all(np.asarray(grads[:, :burn]) == 0.0)
    assert np.abs(np.asarray(grads[:, burn:])).sum() > 0
    # The learned steps start from the state the burn-in produced: the loss equals one computed
    # from that state by hand, and differs from one started at the stored state.
    _, _, after = network.unroll(params, {}, {"obs": batch.obs["obs"][:, :burn]}, {},
                                 batch.carry, batch.first[:, :burn])  # fmt: skip
    _, _, target_after = network.unroll(target, {}, {"obs": batch.obs["obs"][:, :burn]}, {},
                                        batch.carry, batch.first[:, :burn])  # fmt: skip

    def by_hand(start, target_start):
        obs, first = {"obs": batch.obs["obs"][:, burn:]}, batch.first[:, burn:]
        q = network.q_values(network.unroll(params, {}, obs, {}, start, first)[0])
        qt = network.q_values(network.unroll(target, {}, obs, {}, target_start, first)[0])
        span, rows = q.shape[1] - 1, np.arange(q.shape[0])[:, None]
        b = np.asarray(batch.boot[:, burn:]) - burn
        best = np.asarray(q).argmax(-1)[rows, b]
        y = r2d2.rescaled_target(batch.reward[:, burn:], batch.discount[:, burn:],
                                 np.asarray(qt)[rows, b, best])  # fmt: skip
        taken = np.take_along_axis(
            np.asarray(q)[:, :span], np.asarray(batch.action)[:, burn:-1, None], -1
        )[..., 0]
        mask = np.asarray(batch.learn[:, burn:], np.float32)
        return float(np.sum(mask * 0.5 * np.square(np.asarray(y) - taken)) / mask.sum())

    loss = float(loss_of_obs(batch.obs["obs"]))
    assert loss == pytest.approx(by_hand(after, target_after), rel=1e-5)
    assert loss != pytest.approx(by_hand(batch.carry, batch.carry), rel=1e-3)


def test_without_stored_state_the_sequence_starts_from_zeros():
    _, with_state, params, target, batch = _setup(stored_state=True)
    _, zeros, _, _, _ = _setup(stored_state=False)
    key = jax.random.key(0)
    zeroed = batch._replace(carry=jax.tree.map(jnp.zeros_like, batch.carry))
    np.testing.assert_allclose(
        zeros(params, target, {}, batch, key)[0],
        with_state(params, target, {}, zeroed, key)[0],
        rtol=1e-6,
    )


def test_the_replay_gives_back_whole_sequences_with_their_state():
    horizon, burn = 6, 2
    rng = np.random.default_rng(3)
    t1 = horizon + 1
    valid = np.ones((3, t1), bool)
    valid[1, burn:] = False  # nothing to learn from after its burn-in: never sampled
    carry = (rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(3, 5)).astype(np.float32))
    data = Unroll(
        obs={"obs": (np.arange(3)[:, None] * 100 + np.arange(t1))[..., None].astype(np.float32)},
        extras={}, action=rng.integers(0, 3, (3, t1)).astype(np.int32),
        behaviour_logp=np.zeros((3, t1), np.float32), behaviour_value=np.zeros((3, t1), np.float32),
        valid=valid, first=rng.random((3, t1)) < 0.3,
        policy_version=np.array([[7] * t1, [8] * t1, [9] * t1], np.int32),
        reward=np.ones((3, horizon), np.float32), terminated=np.zeros((3, horizon), bool),
        truncated=np.zeros((3, horizon), bool), carry=carry,
    )  # fmt: skip
    replay = SequenceReplay(data, 10 * horizon, 2, 0.5, burn, prioritized=True)
    replay.insert(data)
    assert replay.size == 2
    idx, weight = replay.sample(200, beta=1.0)
    assert set(idx.tolist()) == {0, 2}
    assert replay.sampled == 200 * horizon  # steps, as `inserted` counts them (replay/ratio)
    seq = replay.sequences(idx[:4], weight[:4], version=12)
    for k, slot in enumerate(idx[:4].tolist()):
        np.testing.assert_array_equal(seq.obs["obs"][k, :, 0], slot * 100 + np.arange(t1))
        np.testing.assert_array_equal(seq.carry[0][k], carry[0][slot])
        np.testing.assert_array_equal(seq.carry[1][k], carry[1][slot])
        np.testing.assert_array_equal(seq.first[k], data.first[slot])
        np.testing.assert_array_equal(seq.learn[k], np.arange(horizon) >= burn)
        assert seq.age[k] == 12 - 7 - slot  # versions 7 and 9
    np.testing.assert_allclose(seq.reward[0], [1.5] * (horizon - 1) + [1.0])  # 2-step sums
    # Priorities are per sequence; a state dict round trip keeps everything.
    replay.update(np.array([2]), np.array([5.0]))
    again = SequenceReplay(data, 10 * horizon, 2, 0.5, burn, prioritized=True)
    again.load_state_dict(replay.state_dict())
    np.testing.assert_array_equal(again.tree.values(np.arange(3)), replay.tree.values(np.arange(3)))
    np.testing.assert_array_equal(again.carry[0], replay.carry[0])
