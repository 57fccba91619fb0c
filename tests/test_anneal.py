"""Annealing a new action and new observation features into a fraction of episodes."""

import ml_collections
import numpy as np

from seedlike.rpc.codec import StepRows
from seedlike.server.anneal import Annealing
from seedlike.server.trajectory_store import TrajectoryStore
from seedlike.types import ArraySpec, EnvSpec

SPEC = EnvSpec("t", {"obs": ArraySpec(np.float32, (3,))}, num_actions=4)


def rows(n, obs=1.0):
    zeros = np.zeros(n, bool)
    return StepRows(
        {"obs": np.full((n, 3), obs, np.float32)}, {}, np.zeros(n, np.float32), zeros, zeros,
        np.arange(n, dtype=np.int32), np.zeros(n, np.int32), ~zeros, zeros,
    )  # fmt: skip


def annealing(**kw):
    c = ml_collections.ConfigDict(
        {"start_version": 10, "updates": 20, "new_actions": (3,), "new_obs_features": (2,)}
    )
    c.update(kw)
    return Annealing.from_config(c)


def test_fraction_ramps_linearly_and_zero_updates_disables():
    a = annealing()
    assert [a.fraction(v) for v in (0, 10, 15, 20, 30, 99)] == [0.0, 0.0, 0.25, 0.5, 1.0, 1.0]
    assert annealing(updates=0) is None


def test_episodes_without_the_change_see_the_old_world():
    a = annealing()
    spec = a.server_spec(SPEC)
    assert spec.extras["legal_action_mask"].shape == (4,)
    out = a.apply(rows(3), np.array([True, False, True]), 4)
    np.testing.assert_array_equal(out.obs["obs"][:, 2], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(out.obs["obs"][:, :2], 1.0)
    np.testing.assert_array_equal(out.extras["legal_action_mask"][:, 3], [True, False, True])
    assert out.extras["legal_action_mask"][:, :3].all()


def test_the_store_draws_the_change_once_per_episode():
    draws = []

    def changes(n):
        draws.append(n)
        return np.arange(n) % 2 == 0

    a = annealing()
    store = TrajectoryStore(a.server_spec(SPEC), 4, lambda u: None, changes=changes)
    store.open_session(1, num_envs=4)
    batch = rows(4)
    mask = np.ones(4, bool)
    first = store.policy_inputs(1, batch, mask)
    np.testing.assert_array_equal(first.changed, [True, False, True, False])
    batch = a.apply(batch, first.changed, 4)
    zeros = np.zeros(4)
    store.record(1, batch, np.zeros(4, np.int32), zeros, zeros, 0)
    second = store.policy_inputs(1, rows(4), mask)
    np.testing.assert_array_equal(second.changed, first.changed)  # kept within the episode
    assert draws == [4]
