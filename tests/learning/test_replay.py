"""The replay against closed forms: prefix-sum search, prioritized sampling probabilities and
importance weights, transitions read back from the stored unrolls; the Ape-X epsilons."""

import numpy as np
import pytest

from seedlike.algos.exploration import apex_epsilons
from seedlike.learning.replay import Replay, SumTree
from seedlike.server.exploration import Exploration
from seedlike.types import Unroll


def unrolls(batch, horizon, seed=0, start=0):
    """Stacked Unrolls [B, T+1] whose observation at step t of unroll b is start + b * 1000 + t
    (so a transition's observations say where they came from)."""
    rng = np.random.default_rng(seed)
    t1 = horizon + 1
    index = start + np.arange(batch)[:, None] * 1000 + np.arange(t1)[None]
    terminated = rng.random((batch, horizon)) < 0.1
    valid = np.ones((batch, t1), bool)
    valid[:, 1:][terminated] = False  # the observation after a termination is terminal
    return Unroll(
        obs={"obs": np.repeat(index[..., None], 2, -1).astype(np.float32)},
        extras={},
        action=rng.integers(0, 3, (batch, t1)).astype(np.int32),
        behaviour_logp=np.zeros((batch, t1), np.float32),
        behaviour_value=np.zeros((batch, t1), np.float32),
        valid=valid,
        first=np.zeros((batch, t1), bool),
        policy_version=np.zeros((batch, t1), np.int32),
        reward=rng.normal(size=(batch, horizon)).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros((batch, horizon), bool),
        carry=(),
    )


def test_sum_tree_finds_the_leaf_of_each_prefix_sum():
    rng = np.random.default_rng(0)
    values = rng.random(37) * (rng.random(37) < 0.7)
    tree = SumTree(37)
    tree.set(np.arange(37), values)
    np.testing.assert_allclose(tree.total, values.sum())
    mass = rng.random(500) * values.sum()
    np.testing.assert_array_equal(
        tree.find(mass), np.searchsorted(np.cumsum(values), mass, "right")
    )
    tree.set(np.array([3, 3, 5]), np.array([9.0, 2.0, 0.0]))  # the last write of 3 stands
    values[3], values[5] = 2.0, 0.0
    np.testing.assert_allclose(tree.total, values.sum())


def test_prioritized_sampling_follows_the_closed_form():
    horizon, alpha, beta, eps = 4, 0.6, 0.5, 1e-3
    replay = Replay(unrolls(1, horizon), 8, 1, 0.9, prioritized=True, exponent=alpha, eps=eps)
    data = unrolls(2, horizon)
    data = data._replace(valid=np.ones_like(data.valid))
    replay.insert(data)
    priority = np.array([0.1, 2.0, 0.5, 0.0, 1.0, 3.0, 0.2, 0.7])
    replay.update(np.arange(8), priority)
    p = (priority + eps) ** alpha
    probs = p / p.sum()
    idx, weight = replay.sample(200_000, beta)
    freq = np.bincount(idx, minlength=8) / idx.size
    np.testing.assert_allclose(freq, probs, atol=0.004)
    # Importance weights: (N P(i))^-beta (the loss divides them by the batch's largest).
    np.testing.assert_allclose(weight, (8 * probs[idx]) ** -beta, rtol=1e-5)


def test_uniform_sampling_draws_valid_steps_alike_with_unit_weights():
    data = unrolls(4, 8, seed=1)
    replay = Replay(data, 64, 3, 0.99, prioritized=False)
    replay.insert(data)
    idx, weight = replay.sample(100_000, 0.4)
    valid = data.valid[:, :8].reshape(-1)
    freq = np.bincount(idx, minlength=32) / idx.size
    assert (freq[~valid] == 0).all()
    np.testing.assert_allclose(freq[valid], 1 / valid.sum(), atol=0.006)
    assert (weight == 1).all()


def test_transitions_read_the_stored_steps_and_their_bootstrap_observation():
    horizon = 6
    data = unrolls(3, horizon, seed=2)
    replay = Replay(data, 2 * horizon, 3, 0.9)  # two slots: the third unroll overwrites the first
    replay.insert(data)
    assert replay.next_slot == 1 and replay.filled == 2
    idx = np.arange(2 * horizon)
    got = replay.transitions(idx, np.ones(idx.size))
    slot, t = np.divmod(idx, horizon)
    unroll = np.where(slot == 0, 2, 1)  # slot 0 now holds unroll 2
    np.testing.assert_array_equal(got.obs["obs"][:, 0], unroll * 1000 + t)
    np.testing.assert_array_equal(got.action, data.action[unroll, t])
    boot = replay.boot[slot, t]
    np.testing.assert_array_equal(got.next_obs["obs"][:, 0], unroll * 1000 + boot)
    # A termination ends the sum without a bootstrap; a step after it is not a transition.
    ended = data.terminated[unroll, t]
    assert (got.discount[ended] == 0).all()
    assert replay.size == data.valid[1:, :horizon].sum()


def test_priorities_written_to_an_overwritten_step_are_dropped():
    data = unrolls(1, 4)
    replay = Replay(data, 4, 1, 0.9)
    replay.insert(data._replace(valid=np.zeros_like(data.valid)))  # nothing sampleable
    replay.update(np.arange(4), np.full(4, 5.0))
    assert replay.tree.total == 0


def test_replay_state_round_trips_and_refuses_another_shape():
    data = unrolls(2, 4)
    replay = Replay(data, 8, 2, 0.9)
    replay.insert(data)
    replay.update(np.arange(3), np.array([1.0, 2.0, 3.0]))
    other = Replay(data, 8, 2, 0.9)
    other.load_state_dict(replay.state_dict())
    np.testing.assert_array_equal(other.tree.values(np.arange(8)), replay.tree.values(np.arange(8)))
    assert other.inserted == replay.inserted and other.max_priority == replay.max_priority
    with pytest.raises(ValueError, match="capacity"):
        Replay(data, 16, 2, 0.9).load_state_dict(replay.state_dict())


def test_apex_epsilons_and_slots_as_identities_come_and_go():
    np.testing.assert_allclose(
        apex_epsilons(0.4, 7.0, 4), [0.4 ** (1 + 7 * i / 3) for i in range(4)], rtol=1e-6
    )
    exploration = Exploration(0.4, 7.0, 3)
    assert [exploration.join(label) for label in (0, 1, 2)] == [0, 1, 2]
    exploration.leave(1)
    assert exploration.join(3) == 1  # the lowest free slot
    assert exploration.join(4) == 4 % 3  # all held: shared by label
    rates = exploration.epsilon(np.array([0, 3, 2]), env_steps=0)
    np.testing.assert_allclose(rates, exploration.rates[[0, 1, 2]])
    annealed = Exploration(0.1, 0.0, 1, anneal_steps=100)
    annealed.join(0)
    np.testing.assert_allclose(annealed.epsilon(np.array([0]), 25), [0.1 + 0.9 * 0.75])
    np.testing.assert_allclose(annealed.epsilon(np.array([0]), 400), [0.1])


def frame_stacks(steps, stack=4, size=32, seed=0):
    """Stacks [steps, S, H, W] as envpool builds them: each continues the one before, and a new
    episode's (every 7th to 12th step) is its first frame repeated."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 255, (steps, size, size), np.uint8)
    out, current = [], None
    for i in range(steps):
        if current is None or rng.random() < 0.1:
            current = np.repeat(frames[i][None], stack, 0)
        else:
            current = np.concatenate([current[1:], frames[i][None]])
        out.append(current)
    return np.stack(out)


def test_stacked_frames_are_stored_once_and_rebuilt_exactly():
    horizon, batch = 8, 3
    stacks = frame_stacks(batch * horizon + 1)
    # Unroll b holds steps b*T .. b*T + T (its last step is the next one's first).
    obs = np.stack([stacks[b * horizon : b * horizon + horizon + 1] for b in range(batch)])
    obs[2, 5, 0] = 7  # a stack that follows neither rule: that unroll is kept whole
    data = unrolls(batch, horizon)._replace(obs={"obs": obs})
    data = data._replace(valid=np.ones_like(data.valid))
    replay = Replay(unrolls(1, horizon)._replace(obs={"obs": obs[:1]}), 64, 2, 0.9)
    assert set(replay.stacks) == {"obs"} and not replay.obs
    replay.insert(data)
    assert set(replay.stacks["obs"].whole) == {2}
    idx = np.arange(batch * horizon)
    got = replay.transitions(idx, np.ones(idx.size))
    slot, t = np.divmod(idx, horizon)
    np.testing.assert_array_equal(got.obs["obs"], obs[slot, t])
    np.testing.assert_array_equal(got.next_obs["obs"], obs[slot, replay.boot[slot, t]])
    # One frame per step and the S-1 before each slot, not S frames per step.
    frames = replay.stacks["obs"].frames
    assert frames.shape == (8, 3 + horizon + 1, 32, 32)
    restored = Replay(unrolls(1, horizon)._replace(obs={"obs": obs[:1]}), 64, 2, 0.9)
    restored.load_state_dict(replay.state_dict())
    np.testing.assert_array_equal(
        restored.transitions(idx, np.ones(idx.size)).obs["obs"], obs[slot, t]
    )
